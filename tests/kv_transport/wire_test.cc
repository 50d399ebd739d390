#include "services/kv_transport/wire.h"

#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/kv_transport/checksum.h"

namespace ced::kv_transport {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kMax = uint64_t{1} << 30;

KvMessageHeader Sample() {
  KvMessageHeader h;
  h.kind = KvMessageKind::kGlobalRange;
  h.flags = kKvFlagFinal;
  h.request_id = 0x0123456789ABCDEFull;
  h.transfer_token = 0xFEDCBA9876543210ull;
  h.token_begin = 17;
  h.token_end = 4113;
  h.layer = 23;
  h.format = kernels::KvFormat::kFP8E4M3;
  h.payload_bytes = 123456;
  h.payload_checksum = 0xDEADBEEF;
  return h;
}

// Rewrites the header checksum after a test edits the bytes.
void Reseal(KvHeaderBytes& b) {
  const uint32_t crc = Crc32c(0, b.data(), 60);
  for (int i = 0; i < 4; ++i) b[60 + i] = static_cast<uint8_t>(crc >> (8 * i));
}

absl::Status DecodeStatus(const KvHeaderBytes& b, uint64_t max = kMax) {
  return DecodeHeader(absl::MakeConstSpan(b), max).status();
}

TEST(KvWireTest, RoundTrip) {
  for (KvMessageKind kind : {KvMessageKind::kGlobalRange, KvMessageKind::kTail}) {
    for (int f = 0; f < kernels::kNumKvFormats; ++f) {
      KvMessageHeader h = Sample();
      h.kind = kind;
      h.format = static_cast<kernels::KvFormat>(f);
      h.layer = f - 1;
      const KvHeaderBytes b = EncodeHeader(h);
      absl::StatusOr<KvMessageHeader> back = DecodeHeader(absl::MakeConstSpan(b), kMax);
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(*back, h);
    }
  }
  KvMessageHeader abort = Sample();
  abort.kind = KvMessageKind::kAbort;
  abort.payload_bytes = 0;
  const KvHeaderBytes b = EncodeHeader(abort);
  EXPECT_EQ(*DecodeHeader(absl::MakeConstSpan(b), kMax), abort);
}

TEST(KvWireTest, LittleEndianLayout) {
  const KvHeaderBytes b = EncodeHeader(Sample());
  EXPECT_EQ(std::string(b.begin(), b.begin() + 4), "CEDK");
  EXPECT_EQ(b[4], 1);  // version
  EXPECT_EQ(b[5], 0);
  EXPECT_EQ(b[6], 1);      // kind
  EXPECT_EQ(b[7], 2);      // format
  EXPECT_EQ(b[12], 17);    // token_begin
  EXPECT_EQ(b[24], 0xEF);  // request_id, low byte first
  EXPECT_EQ(b[31], 0x01);
}

TEST(KvWireTest, RejectsWrongSize) {
  const KvHeaderBytes b = EncodeHeader(Sample());
  for (size_t n : {size_t{0}, size_t{1}, kKvHeaderBytes - 1}) {
    EXPECT_EQ(DecodeHeader(absl::MakeConstSpan(b.data(), n), kMax).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  std::vector<uint8_t> longer(b.begin(), b.end());
  longer.push_back(0);
  EXPECT_EQ(DecodeHeader(absl::MakeConstSpan(longer), kMax).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KvWireTest, RejectsBadMagicVersionChecksumReserved) {
  KvHeaderBytes b = EncodeHeader(Sample());
  b[0] = 'X';
  Reseal(b);
  EXPECT_THAT(DecodeStatus(b).message(), HasSubstr("magic"));

  b = EncodeHeader(Sample());
  b[4] = 2;
  Reseal(b);
  EXPECT_THAT(DecodeStatus(b).message(), HasSubstr("version"));

  b = EncodeHeader(Sample());
  b[30] ^= 0x01;  // inside request_id, checksum not updated
  EXPECT_EQ(DecodeStatus(b).code(), absl::StatusCode::kDataLoss);
  b = EncodeHeader(Sample());
  b[62] ^= 0x80;  // the checksum itself
  EXPECT_EQ(DecodeStatus(b).code(), absl::StatusCode::kDataLoss);

  b = EncodeHeader(Sample());
  b[55] = 1;
  Reseal(b);
  EXPECT_THAT(DecodeStatus(b).message(), HasSubstr("reserved"));
}

struct FieldCase {
  const char* field;
  void (*edit)(KvMessageHeader&);
};

TEST(KvWireTest, RejectsInvalidFields) {
  const FieldCase cases[] = {
      {"kind", [](KvMessageHeader& h) { h.kind = static_cast<KvMessageKind>(0); }},
      {"kind", [](KvMessageHeader& h) { h.kind = static_cast<KvMessageKind>(4); }},
      {"kind", [](KvMessageHeader& h) { h.kind = static_cast<KvMessageKind>(255); }},
      {"flags", [](KvMessageHeader& h) { h.flags = 1u << 7; }},
      {"format", [](KvMessageHeader& h) { h.format = static_cast<kernels::KvFormat>(4); }},
      {"format", [](KvMessageHeader& h) { h.format = static_cast<kernels::KvFormat>(255); }},
      {"token_begin", [](KvMessageHeader& h) { h.token_begin = h.token_end + 1; }},
      {"layer", [](KvMessageHeader& h) { h.layer = -2; }},
      {"layer", [](KvMessageHeader& h) { h.layer = INT32_MIN; }},
      {"payload_bytes", [](KvMessageHeader& h) { h.payload_bytes = kMax + 1; }},
      {"payload_bytes", [](KvMessageHeader& h) { h.payload_bytes = UINT64_MAX; }},
      {"payload_bytes",
       [](KvMessageHeader& h) {
         h.kind = KvMessageKind::kAbort;
         h.payload_bytes = 1;
       }},
  };
  for (const FieldCase& c : cases) {
    KvMessageHeader h = Sample();
    c.edit(h);
    const absl::Status validated = ValidateHeader(h, kMax);
    EXPECT_EQ(validated.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(validated.message(), HasSubstr(c.field));
    const absl::Status decoded = DecodeStatus(EncodeHeader(h));
    EXPECT_EQ(decoded.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(decoded.message(), HasSubstr(c.field));
  }
}

TEST(KvWireTest, EmptyRangeAndLimitsAreAccepted) {
  KvMessageHeader h = Sample();
  h.token_begin = h.token_end = 0xFFFFFFFFu;
  h.payload_bytes = kMax;
  h.layer = INT32_MAX;
  EXPECT_TRUE(DecodeHeader(absl::MakeConstSpan(EncodeHeader(h)), kMax).ok());
  EXPECT_FALSE(DecodeHeader(absl::MakeConstSpan(EncodeHeader(h)), kMax - 1).ok());
}

// Random inputs and mutations of a valid header: the parser never misbehaves (run
// under the sanitizers to check for UB) and whatever it accepts re-encodes to the
// same bytes.
TEST(KvWireTest, FuzzMutations) {
  std::mt19937_64 rng(1234);
  const KvHeaderBytes valid = EncodeHeader(Sample());
  int accepted = 0;
  for (int iter = 0; iter < 200000; ++iter) {
    KvHeaderBytes b = valid;
    if (iter % 4 == 0) {
      for (auto& byte : b) byte = static_cast<uint8_t>(rng());
    } else {
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < flips; ++i) b[rng() % kKvHeaderBytes] ^= static_cast<uint8_t>(rng());
    }
    if (iter % 2 == 0) Reseal(b);  // get past the checksum to reach the field checks
    absl::StatusOr<KvMessageHeader> h = DecodeHeader(absl::MakeConstSpan(b), kMax);
    if (h.ok()) {
      ++accepted;
      EXPECT_EQ(EncodeHeader(*h), b);
      EXPECT_TRUE(ValidateHeader(*h, kMax).ok());
    }
  }
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace ced::kv_transport
