// Shared helper for the libFuzzer harnesses in this folder: a property check
// that aborts (so libFuzzer records a crash and keeps the input) when an
// invariant of the code under test does not hold.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                         \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::fprintf(stderr, "%s:%d: fuzz check failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                       \
      std::abort();                                                              \
    }                                                                            \
  } while (0)
