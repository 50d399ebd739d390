// One policy for tests that need a tool scripts/install_deps.sh installs
// (promtool, prometheus, python3-grpcio, clang/libFuzzer, kubectl,
// docker-compose, node/npm): without it the test is skipped on a developer's
// machine, but under CI=true (CI runs .ci/run after install_deps.sh) a
// missing tool is a broken setup, and the test fails instead of passing
// silently. Shell tests use tests/common/missing_tool.sh.
#pragma once

#include <cstdlib>
#include <string_view>

#include "gtest/gtest.h"

namespace ced::testing {

// True when the environment says CI=true: missing tools fail tests.
inline bool MissingToolFails() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string_view(ci) == "true";
}

}  // namespace ced::testing

// Ends the current test (or SetUp) because `what` is missing: GTEST_SKIP,
// or a fatal failure under CI=true. Use as a statement:
//   if (promtool.empty()) CED_SKIP_OR_FAIL_WHEN_MISSING("promtool");
#define CED_SKIP_OR_FAIL_WHEN_MISSING(what)                                       \
  do {                                                                            \
    if (::ced::testing::MissingToolFails()) {                                     \
      GTEST_FAIL() << (what)                                                      \
                   << " is missing; scripts/install_deps.sh installs it (CI=true: " \
                      "a missing tool fails the test)";                           \
    }                                                                             \
    GTEST_SKIP() << (what) << " is missing; scripts/install_deps.sh installs it";  \
  } while (0)
