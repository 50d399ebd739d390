// CRC32C (Castagnoli, reflected polynomial 0x82F63B78) for the KV wire header and
// payload integrity checks. Thread-safe pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ced::kv_transport {

// Extends a running CRC32C `crc` (start with 0) over `size` bytes at `data`.
// Crc32c(Crc32c(0, a), b) == Crc32c(0, a ++ b). `data` may be null when size == 0.
// Uses the SSE4.2 crc32 instruction when the build targets it (three interleaved
// streams on long inputs), else Crc32cPortable.
uint32_t Crc32c(uint32_t crc, const void* data, size_t size);

// Same result, always the software table-driven (slicing-by-8) implementation.
uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t size);

}  // namespace ced::kv_transport
