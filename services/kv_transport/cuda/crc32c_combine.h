// Folding CRC32Cs of consecutive pieces into the CRC32C of their concatenation
// without touching the data: the device checksum (kernels/cuda/crc32c.h)
// computes one CRC per chunk on the GPU and the host folds them here.
// Matches services/kv_transport/checksum.h: Crc32c(0, a ++ b) ==
// Crc32cCombine(Crc32c(0, a), Crc32c(0, b), b.size()).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace ced::kv_transport {

// CRC32C of A ++ B from crc_a = CRC32C(A), crc_b = CRC32C(B) and |B|.
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
