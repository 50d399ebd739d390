#include "services/metrics/names.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ced::metrics {
namespace {

bool IsLetterOrUnderscore(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

absl::Status ValidateMetricName(std::string_view name_view) {
  const absl::string_view name(name_view.data(), name_view.size());
  if (name.empty()) return absl::InvalidArgumentError("metric name is empty");
  if (absl::StartsWith(name, "__")) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric name '", name, "' starts with the reserved prefix '__'"));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = IsLetterOrUnderscore(c) || c == ':' || (i > 0 && IsDigit(c));
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat("metric name '", name,
                                                     "' has an invalid character at position ", i,
                                                     " (allowed: [a-zA-Z_:][a-zA-Z0-9_:]*)"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateLabelName(std::string_view name_view) {
  const absl::string_view name(name_view.data(), name_view.size());
  if (name.empty()) return absl::InvalidArgumentError("label name is empty");
  if (absl::StartsWith(name, "__")) {
    return absl::InvalidArgumentError(
        absl::StrCat("label name '", name, "' starts with the reserved prefix '__'"));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (!(IsLetterOrUnderscore(c) || (i > 0 && IsDigit(c)))) {
      return absl::InvalidArgumentError(absl::StrCat("label name '", name,
                                                     "' has an invalid character at position ", i,
                                                     " (allowed: [a-zA-Z_][a-zA-Z0-9_]*)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ced::metrics
