#include "kernels/cpu/huge_alloc.h"

#include <sys/mman.h>

#include <cstdlib>

namespace ced::kernels {

size_t LargeAllocBytes(size_t bytes) {
  if (bytes < kHugePageBytes) return bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
  return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
}

void* AllocLarge(size_t bytes) {
  const size_t rounded = LargeAllocBytes(bytes);
  if (bytes < kHugePageBytes) return std::aligned_alloc(64, rounded);
  void* p = std::aligned_alloc(kHugePageBytes, rounded);
  // Advice only: without THP (or with it off) the pages stay 4 KiB.
  if (p != nullptr) (void)::madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

}  // namespace ced::kernels
