// The stored block format (engine/kv/block_store.h): header + the cache's
// bytes; every check a reader makes, one reason each.
#include <cstring>

#include "engine/kv/block_store.h"
#include "engine/kv/crc32c.h"
#include "gtest/gtest.h"
#include "tests/kv_tiers/tier_test_util.h"

namespace ced::testing {
namespace {

TEST(KvCrc32cTest, KnownVectors) {
  EXPECT_EQ(KvCrc32c(0, "123456789", 9), 0xE3069283u);  // the CRC-32C check value
  EXPECT_EQ(KvCrc32c(0, nullptr, 0), 0u);
  std::string a = Payload(1003, 1);
  EXPECT_EQ(KvCrc32c(KvCrc32c(0, a.data(), 500), a.data() + 500, 503), KvCrc32c(0, a.data(), 1003));
}

TEST(KvBlockFormatTest, RoundTripsAndAddsAFixedHeader) {
  const KvBlockLayout l = TestLayout();
  const BlockHash h = Chain(l, 1, 0)[0];
  const std::string p = Payload(l.payload_bytes, 3);
  const std::string s = EncodeKvBlock(l, h, reinterpret_cast<const uint8_t*>(p.data()));
  ASSERT_EQ(s.size(), kKvBlockHeaderBytes + l.payload_bytes);
  EXPECT_EQ(kKvBlockHeaderBytes, 64u);
  EXPECT_EQ(s.substr(0, 8), "CEDKVBLK");
  EXPECT_EQ(s.substr(kKvBlockHeaderBytes), p) << "the payload is stored as the cache holds it";
  EXPECT_EQ(CheckKvBlock(l, h, s), KvBlockReject::kNone);
}

TEST(KvBlockFormatTest, EveryMismatchHasItsReason) {
  const KvBlockLayout l = TestLayout();
  const std::vector<BlockHash> hs = Chain(l, 2, 0);
  const std::string p = Payload(l.payload_bytes, 3);
  const std::string good = EncodeKvBlock(l, hs[0], reinterpret_cast<const uint8_t*>(p.data()));

  std::string flipped = good;
  flipped[kKvBlockHeaderBytes + 500] ^= 0x01;
  EXPECT_EQ(CheckKvBlock(l, hs[0], flipped), KvBlockReject::kChecksum);
  std::string crc_flip = good;
  crc_flip[57] ^= 0x10;
  EXPECT_EQ(CheckKvBlock(l, hs[0], crc_flip), KvBlockReject::kChecksum);

  EXPECT_EQ(CheckKvBlock(l, hs[1], good), KvBlockReject::kKey) << "stored under another key";
  EXPECT_EQ(CheckKvBlock(TestLayout(1000, "other-model"), hs[0], good), KvBlockReject::kModel);
  KvBlockLayout fmt = l;
  fmt.format = KvFormat::kFP8E4M3;
  EXPECT_EQ(CheckKvBlock(fmt, hs[0], good), KvBlockReject::kFormat);
  KvBlockLayout bs = l;
  bs.block_size = 32;
  EXPECT_EQ(CheckKvBlock(bs, hs[0], good), KvBlockReject::kFormat);
  KvBlockLayout len = l;
  len.payload_bytes = 999;
  EXPECT_EQ(CheckKvBlock(len, hs[0], good), KvBlockReject::kLength);
  EXPECT_EQ(CheckKvBlock(l, hs[0], good.substr(0, good.size() - 1)), KvBlockReject::kLength);
  EXPECT_EQ(CheckKvBlock(l, hs[0], good.substr(0, 10)), KvBlockReject::kLength);
  EXPECT_EQ(CheckKvBlock(l, hs[0], ""), KvBlockReject::kLength);
  std::string magic = good;
  magic[0] = 'X';
  EXPECT_EQ(CheckKvBlock(l, hs[0], magic), KvBlockReject::kMagic);
  std::string version = good;
  version[8] = 2;
  EXPECT_EQ(CheckKvBlock(l, hs[0], version), KvBlockReject::kMagic);
  EXPECT_EQ(CheckKvBlock(l, hs[0], std::string(good.size(), '\0')), KvBlockReject::kMagic);
  for (int zero : {11, 60, 63}) {
    std::string z = good;
    z[zero] = 1;
    EXPECT_EQ(CheckKvBlock(l, hs[0], z), KvBlockReject::kMagic) << "byte " << zero;
  }
}

TEST(KvBlockFormatTest, RejectNamesAreMetricLabels) {
  for (int r = 1; r < kKvBlockRejectReasons; ++r) {
    const std::string name = KvBlockRejectName(static_cast<KvBlockReject>(r));
    EXPECT_FALSE(name.empty());
    for (char c : name) EXPECT_TRUE(c >= 'a' && c <= 'z') << name;
  }
}

}  // namespace
}  // namespace ced::testing
