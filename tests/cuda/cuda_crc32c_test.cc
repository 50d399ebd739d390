// The device payload checksum: the GPU chunk kernel's CRC32C pieces, folded on
// the host, equal the host CRC32C (needs a GPU; the folding itself is tested in
// tests/kv_transport/checksum_test.cc).
#include <cuda_runtime_api.h>

#include <random>
#include <vector>

#include "kernels/cuda/crc32c.h"
#include "services/kv_transport/checksum.h"
#include "tests/kv_transport/test_sink.h"
#include "tests/cuda/cuda_test_util.h"

namespace ced::kv_transport {
namespace {

using testing::RandomBytes;

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
