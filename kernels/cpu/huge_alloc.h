// Large host buffers on transparent huge pages where the kernel offers them
// (madvise mode, the Debian default): the KV cache, packed weights, scratch.
// A 4 KiB page fault cost ~30 us on the 2-core VMs this was measured on, so
// first touching a 2 GiB cache took ~15 s; huge pages also cut the TLB misses
// of the attention and GEMV streams. Buffers below 2 MiB are 64-byte
// aligned as before. Free with std::free.
#pragma once

#include <cstddef>

namespace ced::kernels {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// The bytes AllocLarge(bytes) takes: rounded up to 64 bytes, or to 2 MiB
// from 2 MiB on.
size_t LargeAllocBytes(size_t bytes);

// `bytes` (LargeAllocBytes of it; from 2 MiB on 2 MiB-aligned and advised
// MADV_HUGEPAGE), uninitialized; null when out of memory.
void* AllocLarge(size_t bytes);

}  // namespace ced::kernels
