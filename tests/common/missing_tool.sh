# Sourced by shell tests that need a tool scripts/install_deps.sh installs.
# skip_or_fail_missing MESSAGE: exits 77 (CTest: skipped, with
# SKIP_RETURN_CODE 77), or 1 under CI=true, where a missing tool is a broken
# setup that must fail the test (tests/common/missing_tool.h for C++ tests).
skip_or_fail_missing() {
  if [[ ${CI:-} == true ]]; then
    echo "FAIL: $* (scripts/install_deps.sh installs it; CI=true: a missing tool fails)"
    exit 1
  fi
  echo "SKIP: $* (scripts/install_deps.sh installs it)"
  exit 77
}
