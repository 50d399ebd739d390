// CRC32C (Castagnoli, reflected polynomial 0x82F63B78) for the checksums of
// blocks kept in the KV tiers. The SSE4.2 instruction where the CPU has it
// (chosen at run time), a table otherwise. Thread-safe pure function.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ced {

// Extends `crc` (start with 0) over `size` bytes at `data`:
// KvCrc32c(KvCrc32c(0, a), b) == KvCrc32c(0, a ++ b).
uint32_t KvCrc32c(uint32_t crc, const void* data, size_t size);

}  // namespace ced
