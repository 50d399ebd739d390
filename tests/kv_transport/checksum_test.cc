#include "services/kv_transport/checksum.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
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

// ---- Every implementation this CPU runs, against the portable reference ----

std::string ImplTestName(const ::testing::TestParamInfo<Crc32cImpl>& info) {
  std::string name(Crc32cImplName(info.param));
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

class Crc32cImplTest : public ::testing::TestWithParam<Crc32cImpl> {};

TEST_P(Crc32cImplTest, KnownVectors) {
  const Crc32cImpl impl = GetParam();
  const std::string digits = "123456789";
  EXPECT_EQ(Crc32cWith(impl, 0, digits.data(), digits.size()), 0xE3069283u);
  EXPECT_EQ(Crc32cWith(impl, 0, nullptr, 0), 0u);
  EXPECT_EQ(Crc32cWith(impl, 0xDEADBEEFu, nullptr, 0), 0xDEADBEEFu);
}

// Random lengths 0..10k at random misalignments, random starting CRCs, and
// the same input cut into random pieces.
TEST_P(Crc32cImplTest, RandomInputsMatchPortableAndCompose) {
  const Crc32cImpl impl = GetParam();
  std::mt19937_64 rng(1234);
  const auto data = testing::RandomBytes(10000 + 64, 3);
  for (int trial = 0; trial < 2000; ++trial) {
    const size_t n = rng() % 10001;
    const uint8_t* p = data.data() + rng() % 64;
    const uint32_t start = trial % 2 == 0 ? 0u : static_cast<uint32_t>(rng());
    const uint32_t want = Crc32cPortable(start, p, n);
    ASSERT_EQ(Crc32cWith(impl, start, p, n), want) << "n=" << n << " trial=" << trial;
    uint32_t chunked = start;
    for (size_t off = 0; off < n;) {
      const size_t piece = std::min<size_t>(n - off, 1 + rng() % 3000);
      chunked = Crc32cWith(impl, chunked, p + off, piece);
      off += piece;
    }
    ASSERT_EQ(chunked, want) << "n=" << n << " trial=" << trial;
  }
}

// Every boundary of the long-input paths (three-stream blocks of 3 x 256 and
// 3 x 4096 bytes, 64-byte folding from 1024 bytes, 256 per round; copies in
// 12 KiB / 16 KiB pieces) at several alignments.
TEST_P(Crc32cImplTest, LongInputBoundariesMatchPortable) {
  const Crc32cImpl impl = GetParam();
  const auto data = testing::RandomBytes((1 << 20) + 64, 11);
  for (size_t n : {767u,  768u,  769u,  1023u, 1024u, 1025u, 1087u, 1088u, 1279u, 1280u,
                   1344u, 1535u, 1536u, 1600u, 12287u, 12288u, 12289u, 13055u, 13056u, 13057u,
                   16385u, 24576u, 100003u, 1u << 20}) {
    for (size_t offset : {0u, 1u, 3u, 8u, 63u}) {
      const uint8_t* p = data.data() + offset;
      ASSERT_EQ(Crc32cWith(impl, 0, p, n), Crc32cPortable(0, p, n))
          << "n=" << n << " offset=" << offset;
      ASSERT_EQ(Crc32cWith(impl, 0x12345678u, p, n), Crc32cPortable(0x12345678u, p, n))
          << "n=" << n << " offset=" << offset;
    }
  }
}

TEST_P(Crc32cImplTest, CopyCopiesExactlyAndChecksums) {
  const Crc32cImpl impl = GetParam();
  std::mt19937_64 rng(99);
  const auto data = testing::RandomBytes((1 << 20) + 200, 5);
  std::vector<uint8_t> dst(data.size() + 64);
  std::vector<size_t> sizes = {0, 1, 63, 1023, 1024, 1025, 1087, 8256, 12289, 16385, 65536,
                               100003, 1u << 20};
  for (int i = 0; i < 40; ++i) sizes.push_back(rng() % 10001);
  for (size_t n : sizes) {
    for (size_t src_off : {0u, 5u}) {
      for (size_t dst_off : {0u, 3u}) {
        std::fill(dst.begin(), dst.end(), uint8_t{0xA5});
        const uint8_t* p = data.data() + src_off;
        const uint32_t got = CopyCrc32cWith(impl, 0x1234u, dst.data() + dst_off, p, n);
        ASSERT_EQ(got, Crc32cPortable(0x1234u, p, n)) << "n=" << n;
        ASSERT_EQ(std::memcmp(dst.data() + dst_off, p, n), 0) << "n=" << n;
        // Nothing written around the destination.
        for (size_t i = 0; i < dst_off; ++i) ASSERT_EQ(dst[i], 0xA5) << "n=" << n;
        for (size_t i = dst_off + n; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xA5) << "n=" << n;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Supported, Crc32cImplTest, ::testing::ValuesIn(SupportedCrc32cImpls()),
                         ImplTestName);

// The implementations the CPU reports must all be offered: a detection bug
// would otherwise leave the fast paths untested and unused.
TEST(Crc32cDispatchTest, OffersWhatTheCpuSupports) {
  const std::vector<Crc32cImpl> impls = SupportedCrc32cImpls();
  ASSERT_FALSE(impls.empty());
  EXPECT_EQ(impls.front(), Crc32cImpl::kPortable);
  auto offered = [&](Crc32cImpl impl) {
    return std::find(impls.begin(), impls.end(), impl) != impls.end();
  };
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool sse42 = __builtin_cpu_supports("sse4.2");
  EXPECT_EQ(offered(Crc32cImpl::kSse42), sse42);
  EXPECT_EQ(offered(Crc32cImpl::kAvx512Fold),
            sse42 && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("avx512f") &&
                __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("vpclmulqdq"));
#endif
  std::string names;
  for (Crc32cImpl impl : impls) names += " " + std::string(Crc32cImplName(impl));
  std::printf("CRC32C implementations on this CPU:%s; active: %s (kernels: %s)\n", names.c_str(),
              std::string(Crc32cImplementation()).c_str(), kernels::CpuIsaSummary().c_str());
}

// Crc32c follows the kernels' variant, including SetActiveCpuIsa.
TEST(Crc32cDispatchTest, FollowsTheKernelVariant) {
  const kernels::CpuIsa before = kernels::ActiveCpuIsa();
  const std::vector<Crc32cImpl> impls = SupportedCrc32cImpls();
  auto offered = [&](Crc32cImpl impl) {
    return std::find(impls.begin(), impls.end(), impl) != impls.end();
  };
  const auto data = testing::RandomBytes(5000, 8);
  for (kernels::CpuIsa isa : kernels::SupportedCpuIsas()) {
    ASSERT_TRUE(kernels::SetActiveCpuIsa(isa));
    Crc32cImpl want = Crc32cImpl::kPortable;
    if (isa == kernels::CpuIsa::kAvx512 && offered(Crc32cImpl::kAvx512Fold)) {
      want = Crc32cImpl::kAvx512Fold;
    } else if (isa != kernels::CpuIsa::kGeneric && offered(Crc32cImpl::kSse42)) {
      want = Crc32cImpl::kSse42;
    }
    EXPECT_EQ(ActiveCrc32cImpl(), want) << kernels::CpuIsaName(isa);
    EXPECT_EQ(Crc32cImplementation(), Crc32cImplName(want));
    EXPECT_EQ(Crc32c(7, data.data(), data.size()), Crc32cPortable(7, data.data(), data.size()));
  }
  ASSERT_TRUE(kernels::SetActiveCpuIsa(before));
}

}  // namespace
}  // namespace ced::kv_transport
