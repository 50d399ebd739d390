#include "engine/common/status.h"

#include <cstdio>
#include <cstdlib>

namespace ced::internal {
void CheckFailed(const char* file, int line, const char* cond) {
  std::fprintf(stderr, "CHECK failed at %s:%d: %s\n", file, line, cond);
  std::abort();
}
}  // namespace ced::internal
