// Status helpers used at every module boundary of ced-serve.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define CED_CONCAT_INNER_(a, b) a##b
#define CED_CONCAT_(a, b) CED_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status ced_status_ = (expr);               \
    if (!ced_status_.ok()) return ced_status_;         \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MakeX());` unwraps a StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(CED_CONCAT_(ced_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()

// Programmer invariants only (never input validation): aborts with a message.
#define CED_CHECK(cond)                                                          \
  do {                                                                           \
    if (!(cond)) ::ced::internal::CheckFailed(__FILE__, __LINE__, #cond);        \
  } while (0)

namespace ced::internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond);
}  // namespace ced::internal
