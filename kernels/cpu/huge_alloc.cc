#include "kernels/cpu/huge_alloc.h"

#include <sys/mman.h>

#include <cstdlib>

namespace ced::kernels {

void* AllocLarge(size_t bytes) {
  if (bytes < kHugePageBytes) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    return std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  }
  const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* p = std::aligned_alloc(kHugePageBytes, rounded);
  // Advice only: without THP (or with it off) the pages stay 4 KiB.
  if (p != nullptr) (void)::madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

}  // namespace ced::kernels
