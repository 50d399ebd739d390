// CRC32C (Castagnoli, reflected polynomial 0x82F63B78) for the KV wire header and
// payload integrity checks. Thread-safe pure functions.
#pragma once

#include <array>
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

// Copies `size` bytes from `src` to `dst` (which must not overlap) and returns
// Crc32c(crc, src, size), in one pass over the data where the CPU has the
// folding instructions (the receiver's landing copy doubles as its check).
uint32_t CopyCrc32c(uint32_t crc, void* dst, const void* src, size_t size);

// CRC32C of A ++ B from crc_a = Crc32c(0, A), crc_b = Crc32c(0, B) and |B|,
// without touching the data: checksums of pieces that arrive (or are computed)
// apart are folded into the checksum of the whole.
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

// Crc32cCombine for a fixed |B|, precomputed: 32 word operations per fold.
class Crc32cFolder {
 public:
  explicit Crc32cFolder(uint64_t len_b);
  uint32_t Fold(uint32_t crc_a, uint32_t crc_b) const;

 private:
  std::array<uint32_t, 32> shift_{};  // the linear map "append len_b zero bytes"
};

}  // namespace ced::kv_transport
