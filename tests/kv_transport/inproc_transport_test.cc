#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/kv_transport/checksum.h"
#include "services/kv_transport/transport.h"
#include "tests/kv_transport/test_sink.h"

namespace ced::kv_transport {
namespace {

using ::testing::HasSubstr;
using testing::MakeHeader;
using testing::RandomBytes;
using testing::SplitInto;
using testing::TestSink;

std::unique_ptr<KvTransport> MakeInproc(bool corrupt = false) {
  TransportOptions options;
  options.kind = "inproc";
  options.max_payload_bytes = 1 << 20;
  options.corrupt_payload_checksum_for_testing = corrupt;
  absl::StatusOr<std::unique_ptr<KvTransport>> t = CreateKvTransport(options);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

class InprocTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    receiver_ = MakeInproc();
    sender_ = MakeInproc();
    ASSERT_NE(receiver_, nullptr);
    ASSERT_NE(sender_, nullptr);
    absl::StatusOr<std::string> address = receiver_->Listen("decode:0", &sink_);
    ASSERT_TRUE(address.ok()) << address.status();
    address_ = *address;
  }

  TestSink sink_;
  std::unique_ptr<KvTransport> receiver_, sender_;
  std::string address_;
};

TEST_F(InprocTransportTest, PayloadLandsInSpans) {
  EXPECT_EQ(sender_->name(), "inproc");
  const std::vector<uint8_t> data = RandomBytes(10000, 1);
  sink_.Reserve(7, 99, {1000, 3000, 0, 6000});
  ASSERT_TRUE(
      sender_->Send(address_, MakeHeader(7, 99, data.size()), SplitInto(data, {1, 4095, 333}))
          .ok());
  EXPECT_EQ(sink_.landed(), data);
  EXPECT_EQ(sink_.guard(), 0xEE);
  const auto done = sink_.completions();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].status.ok());
  EXPECT_EQ(done[0].header.request_id, 7u);
  EXPECT_EQ(done[0].header.token_end, 16u);
}

TEST_F(InprocTransportTest, EmptyPayload) {
  sink_.Reserve(7, 99, {});
  EXPECT_TRUE(sender_->Send(address_, MakeHeader(7, 99, 0), {}).ok());
  EXPECT_EQ(sink_.completions().size(), 1u);
}

TEST_F(InprocTransportTest, RejectionReachesSenderWithoutComplete) {
  const std::vector<uint8_t> data = RandomBytes(64, 2);
  sink_.Reserve(7, 99, {64});
  const absl::Status s = sender_->Send(address_, MakeHeader(7, 98, 64), SplitInto(data, {}));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("transfer token mismatch"));
  EXPECT_EQ(sink_.accepts(), 1);
  EXPECT_TRUE(sink_.completions().empty());
  EXPECT_EQ(sink_.landed(), std::vector<uint8_t>(64, 0xEE));
}

TEST_F(InprocTransportTest, ChecksumMismatchIsDataLoss) {
  std::unique_ptr<KvTransport> corrupting = MakeInproc(/*corrupt=*/true);
  const std::vector<uint8_t> data = RandomBytes(256, 3);
  sink_.Reserve(7, 99, {128, 128});
  const absl::Status s = corrupting->Send(address_, MakeHeader(7, 99, 256), SplitInto(data, {}));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  const auto done = sink_.completions();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status.code(), absl::StatusCode::kDataLoss);
}

TEST_F(InprocTransportTest, ProducerChecksumIsVerified) {
  const std::vector<uint8_t> data = RandomBytes(256, 4);
  KvMessageHeader h = MakeHeader(7, 99, 256);
  h.payload_checksum = Crc32c(0, data.data(), data.size());
  sink_.Reserve(7, 99, {256});
  EXPECT_TRUE(sender_->SendChecksummed(address_, h, SplitInto(data, {100})).ok());
  EXPECT_TRUE(sink_.landed() == data);
  h.payload_checksum ^= 1;
  sink_.Reserve(7, 99, {256});
  EXPECT_EQ(sender_->SendChecksummed(address_, h, SplitInto(data, {})).code(),
            absl::StatusCode::kDataLoss);
  // Send ignores the caller's value and computes its own.
  sink_.Reserve(7, 99, {256});
  EXPECT_TRUE(sender_->Send(address_, h, SplitInto(data, {})).ok());
}

TEST_F(InprocTransportTest, SinkSpansOfWrongSizeAreInternalError) {
  const std::vector<uint8_t> data = RandomBytes(256, 4);
  sink_.Reserve(7, 99, {128, 128});
  sink_.ShortChangeSpans(1);
  EXPECT_EQ(sender_->Send(address_, MakeHeader(7, 99, 256), SplitInto(data, {})).code(),
            absl::StatusCode::kInternal);
  ASSERT_EQ(sink_.completions().size(), 1u);
  EXPECT_EQ(sink_.completions()[0].status.code(), absl::StatusCode::kInternal);
}

TEST_F(InprocTransportTest, SenderSideValidation) {
  const std::vector<uint8_t> data = RandomBytes(256, 5);
  sink_.Reserve(7, 99, {256});
  KvMessageHeader h = MakeHeader(7, 99, 256);
  h.token_begin = 20;  // > token_end
  EXPECT_EQ(sender_->Send(address_, h, SplitInto(data, {})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sender_->Send(address_, MakeHeader(7, 99, 255), SplitInto(data, {})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sender_->Send(address_, MakeHeader(7, 99, (1 << 20) + 1), {}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sink_.accepts(), 0);
}

TEST_F(InprocTransportTest, UnknownOrVanishedPeerIsUnavailable) {
  const std::vector<uint8_t> data = RandomBytes(16, 6);
  EXPECT_EQ(sender_->Send("nobody", MakeHeader(7, 99, 16), SplitInto(data, {})).code(),
            absl::StatusCode::kUnavailable);
  receiver_.reset();
  EXPECT_EQ(sender_->Send(address_, MakeHeader(7, 99, 16), SplitInto(data, {})).code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(InprocTransportTest, ListenRules) {
  EXPECT_EQ(receiver_->Listen("other", &sink_).status().code(),
            absl::StatusCode::kFailedPrecondition);
  std::unique_ptr<KvTransport> second = MakeInproc();
  EXPECT_EQ(second->Listen(address_, &sink_).status().code(), absl::StatusCode::kAlreadyExists);
  absl::StatusOr<std::string> picked = second->Listen("decode:0", &sink_);
  ASSERT_TRUE(picked.ok());
  EXPECT_NE(*picked, address_);
}

TEST(KvTransportFactoryTest, UnknownKind) {
  TransportOptions options;
  options.kind = "carrier-pigeon";
  EXPECT_EQ(CreateKvTransport(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ced::kv_transport
