#include "services/kv_transport/checksum.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kv_transport/test_sink.h"

namespace ced::kv_transport {
namespace {

uint32_t BitwiseCrc32c(const uint8_t* p, size_t n) {
  uint32_t c = ~0u;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

using CrcFn = uint32_t (*)(uint32_t, const void*, size_t);

class Crc32cTest : public ::testing::TestWithParam<CrcFn> {};

TEST_P(Crc32cTest, KnownVectors) {
  const CrcFn Crc32c = GetParam();
  const std::string digits = "123456789";
  EXPECT_EQ(Crc32c(0, digits.data(), digits.size()), 0xE3069283u);
  EXPECT_EQ(Crc32c(0, nullptr, 0), 0u);
  // RFC 3720 (iSCSI) appendix B.4.
  std::vector<uint8_t> buf(32, 0x00);
  EXPECT_EQ(Crc32c(0, buf.data(), buf.size()), 0x8A9136AAu);
  std::fill(buf.begin(), buf.end(), 0xFF);
  EXPECT_EQ(Crc32c(0, buf.data(), buf.size()), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32c(0, buf.data(), buf.size()), 0x46DD794Eu);
}

TEST_P(Crc32cTest, MatchesBitwiseReferenceAndComposes) {
  const CrcFn Crc32c = GetParam();
  std::mt19937 rng(7);
  std::vector<uint8_t> data(3000);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (size_t n : {1u, 7u, 8u, 9u, 63u, 64u, 1000u, 2999u}) {
    // Unaligned start exercises the byte-wise word assembly.
    const uint8_t* p = data.data() + 1;
    ASSERT_EQ(Crc32c(0, p, n), BitwiseCrc32c(p, n)) << "n=" << n;
    for (size_t split : {size_t{0}, n / 3, n - 1}) {
      EXPECT_EQ(Crc32c(Crc32c(0, p, split), p + split, n - split), Crc32c(0, p, n))
          << "n=" << n << " split=" << split;
    }
  }
}

TEST_P(Crc32cTest, DetectsSingleBitFlip) {
  const CrcFn Crc32c = GetParam();
  std::vector<uint8_t> data(4096, 0x5A);
  const uint32_t before = Crc32c(0, data.data(), data.size());
  data[1234] ^= 0x10;
  EXPECT_NE(Crc32c(0, data.data(), data.size()), before);
}

// Long inputs take the carry-less-multiply folding path (where the CPU has
// VPCLMULQDQ: from 1024 bytes, 64-byte blocks, 256 per round) and the
// interleaved three-stream path (blocks of 3 x 4096 and 3 x 256 bytes): every
// boundary around them, at several alignments, must agree with the portable
// implementation and compose.
TEST(Crc32cLongTest, InterleavedStreamsMatchPortable) {
  std::mt19937 rng(11);
  std::vector<uint8_t> data((1 << 20) + 64);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  for (size_t n : {767u,   768u,   769u,   1023u,  1024u,  1025u,   1087u,   1088u,
                   1279u,  1280u,  1344u,  1535u,  1536u,  1600u,   12287u,  12288u,
                   12289u, 13055u, 13056u, 13057u, 24576u, 100003u, 1u << 20}) {
    for (size_t offset : {0u, 1u, 3u, 8u, 63u}) {
      const uint8_t* p = data.data() + offset;
      const uint32_t want = Crc32cPortable(0, p, n);
      ASSERT_EQ(Crc32c(0, p, n), want) << "n=" << n << " offset=" << offset;
      ASSERT_EQ(Crc32c(Crc32c(0, p, n / 2 + 1), p + n / 2 + 1, n - n / 2 - 1), want)
          << "n=" << n << " offset=" << offset;
      ASSERT_EQ(Crc32c(0x12345678u, p, n), Crc32cPortable(0x12345678u, p, n)) << "n=" << n;
    }
  }
}

using testing::RandomBytes;

TEST(CopyCrc32cTest, CopiesAndChecksumsInOnePass) {
  const auto data = RandomBytes((1 << 20) + 200, 5);
  std::vector<uint8_t> dst(data.size() + 64);
  for (size_t n : {0u, 1u, 63u, 1023u, 1024u, 1025u, 1087u, 8256u, 65536u, 100003u, 1u << 20}) {
    for (size_t src_off : {0u, 5u}) {
      for (size_t dst_off : {0u, 3u}) {
        std::fill(dst.begin(), dst.end(), uint8_t{0xA5});
        const uint8_t* p = data.data() + src_off;
        const uint32_t got = CopyCrc32c(0x1234u, dst.data() + dst_off, p, n);
        ASSERT_EQ(got, Crc32cPortable(0x1234u, p, n)) << "n=" << n;
        ASSERT_EQ(std::memcmp(dst.data() + dst_off, p, n), 0) << "n=" << n;
        // Nothing written around the destination.
        for (size_t i = 0; i < dst_off; ++i) ASSERT_EQ(dst[i], 0xA5) << "n=" << n;
        for (size_t i = dst_off + n; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xA5) << "n=" << n;
      }
    }
  }
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

INSTANTIATE_TEST_SUITE_P(Implementations, Crc32cTest,
                         ::testing::Values(&::ced::kv_transport::Crc32c, &Crc32cPortable),
                         [](const ::testing::TestParamInfo<CrcFn>& info) {
                           return std::string(info.index == 0 ? "Default" : "Portable");
                         });

}  // namespace
}  // namespace ced::kv_transport
