// The device payload checksum: CRC32C pieces folded on the host equal the
// host CRC32C (runs everywhere), and the GPU chunk kernel matches it (needs a
// GPU).
#include <cuda_runtime_api.h>

#include <random>
#include <vector>

#include "kernels/cuda/crc32c.h"
#include "services/kv_transport/checksum.h"
#include "services/kv_transport/cuda/crc32c_combine.h"
#include "tests/cuda/cuda_test_util.h"

namespace ced::kv_transport {
namespace {

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(Crc32cCombineTest, FoldsPiecesIntoTheWholeChecksum) {
  const auto data = RandomBytes(10000, 1);
  const uint32_t whole = Crc32c(0, data.data(), data.size());
  for (size_t cut : {size_t{0}, size_t{1}, size_t{7}, size_t{4096}, size_t{9999}, size_t{10000}}) {
    const uint32_t a = Crc32c(0, data.data(), cut);
    const uint32_t b = Crc32c(0, data.data() + cut, data.size() - cut);
    EXPECT_EQ(Crc32cCombine(a, b, data.size() - cut), whole) << "cut " << cut;
  }
}

TEST(Crc32cCombineTest, FolderEqualsCombineForItsLength) {
  const auto data = RandomBytes(3 * 1000 + 17, 2);
  const Crc32cFolder fold(1000);
  uint32_t crc = Crc32c(0, data.data(), 1000);
  for (size_t off = 1000; off + 1000 <= data.size(); off += 1000) {
    crc = fold.Fold(crc, Crc32c(0, data.data() + off, 1000));
  }
  crc = Crc32cCombine(crc, Crc32c(0, data.data() + 3000, 17), 17);
  EXPECT_EQ(crc, Crc32c(0, data.data(), data.size()));
  EXPECT_NE(Crc32cCombine(crc, 0, 1), crc);  // the length matters
}

TEST(Crc32cCudaTest, ChunkChecksumsMatchTheHost) {
  CED_SKIP_WITHOUT_CUDA();
  const size_t chunk = 4096;
  for (size_t size : {size_t{1}, size_t{4095}, size_t{4096}, size_t{100003}}) {
    auto data = RandomBytes(size + 3, static_cast<uint32_t>(size));
    ced::testing::DeviceArray<uint8_t> dev(data);
    const size_t n = (size + chunk - 1) / chunk;
    ced::testing::DeviceArray<uint32_t> crcs(n);
    // Offset by 3: unaligned starts take the byte path.
    ASSERT_EQ(kernels::Crc32cChunksCuda(dev.get() + 3, size, chunk, crcs.get(), nullptr),
              cudaSuccess);
    const auto got = crcs.ToHost();
    uint32_t whole = got[0];
    for (size_t i = 0; i < n; ++i) {
      const size_t len = std::min(chunk, size - i * chunk);
      EXPECT_EQ(got[i], Crc32c(0, data.data() + 3 + i * chunk, len)) << "chunk " << i;
      if (i > 0) whole = Crc32cCombine(whole, got[i], len);
    }
    EXPECT_EQ(whole, Crc32c(0, data.data() + 3, size)) << "size " << size;
  }
}

}  // namespace
}  // namespace ced::kv_transport
