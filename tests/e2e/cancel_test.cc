// Cancelled work gives its KV blocks back: requests cancelled mid-stream or
// right after they start, and requests whose deadline expires, all end with
// every decode worker's ced_kv_blocks_used at 0, every worker idle as the
// router sees it, and generation stopped early on the decode workers.
#include <memory>
#include <thread>

#include "tests/e2e/cluster_fixture.h"
#include "tests/e2e/e2e_util.h"

namespace ced::testing {
namespace {

// A prompt and a length that fill tiny's whole 4096-position context: far
// more work than the test lets run.
constexpr int kPromptTokens = 300;
constexpr int kMaxTokens = 4096 - kPromptTokens - 1;

// One Generate stream the test drives by hand.
class Stream {
 public:
  Stream(const std::string& gateway, const ced::v1::GenerateRequest& req,
         std::chrono::milliseconds deadline)
      : stub_(ced::v1::Gateway::NewStub(
            grpc::CreateChannel(gateway, grpc::InsecureChannelCredentials()))) {
    ctx_.set_deadline(std::chrono::system_clock::now() + deadline);
    reader_ = stub_->Generate(&ctx_, req);
  }
  // Reads until `n` tokens arrived in all; false when the stream ended first.
  bool ReadTokens(int n) {
    ced::v1::GenerateResponse resp;
    while (tokens_ < n) {
      if (!reader_->Read(&resp)) return false;
      tokens_ += resp.token_ids_size();
    }
    return true;
  }
  void Cancel() { ctx_.TryCancel(); }
  grpc::Status Finish() {
    ced::v1::GenerateResponse resp;
    while (reader_->Read(&resp)) tokens_ += resp.token_ids_size();
    return reader_->Finish();
  }
  int tokens() const { return tokens_; }

 private:
  std::unique_ptr<ced::v1::Gateway::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<ced::v1::GenerateResponse>> reader_;
  int tokens_ = 0;
};

class E2eCancelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = MakeModelDir("tiny");
    cluster_ = std::make_unique<LocalCluster>(
        model_, std::vector<std::string>{"--prefill", "1", "--decode", "2"});
  }
  void TearDown() override { cluster_.reset(); }

  std::vector<std::string> DecodeMetrics() const {
    std::vector<std::string> out;
    for (const auto& [name, addr] : cluster_->addresses()) {
      if (name.rfind("decode-", 0) == 0) out.push_back(addr.at("metrics"));
    }
    return out;
  }
  // Sum of one series over the decode workers (absent counts as 0).
  double DecodeSum(const std::string& series) const {
    double sum = 0;
    for (const std::string& m : DecodeMetrics()) sum += ScrapeMetric(m, series).value_or(0);
    return sum;
  }
  double Gateway(const std::string& series) const {
    return ScrapeMetric(cluster_->addresses().at("gateway").at("metrics"), series).value_or(-1);
  }
  void ExpectAllKvFree() const {
    std::string why;
    const bool idle = WaitUntil(
        [&] {
          for (const std::string& m : DecodeMetrics()) {
            if (ScrapeMetric(m, "ced_kv_blocks_used") != 0.0) {
              why = m + " has KV blocks in use";
              return false;
            }
          }
          const auto workers = ListWorkers(cluster_->addresses().at("router").at("grpc"));
          return workers.has_value() && AllWorkersIdle(*workers, &why);
        },
        std::chrono::seconds(20));
    EXPECT_TRUE(idle) << "still busy: " << why << "\n" << cluster_->Log();
  }
  // A short request after the cancellations still gets the right tokens.
  void ExpectStillServing() {
    const auto prompt = Prompt(40, 3);
    const auto expected = ColocatedEngine(model_).Run(prompt, 8);
    const GenResult r = Generate(cluster_->gateway(), Request(prompt, 8, ced::v1::REPLAY_ON_AUTO));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, expected);
  }

  std::string model_;
  std::unique_ptr<LocalCluster> cluster_;
};

ced::v1::GenerateRequest LongRequest(int salt) {
  return Request(Prompt(kPromptTokens, salt), kMaxTokens, ced::v1::REPLAY_ON_AUTO);
}

TEST_F(E2eCancelTest, ClientCancelReleasesKvBlocksOnEveryDecodeWorker) {
  ASSERT_TRUE(cluster_->ready()) << cluster_->Log();
  Stream first(cluster_->gateway(), LongRequest(2), std::chrono::seconds(120));
  Stream later(cluster_->gateway(), LongRequest(3), std::chrono::seconds(120));
  ASSERT_TRUE(first.ReadTokens(1));
  ASSERT_TRUE(later.ReadTokens(20));
  // While they run, their reservations show.
  EXPECT_TRUE(WaitUntil([&] { return DecodeSum("ced_kv_blocks_used") > 0; },
                        std::chrono::seconds(10), std::chrono::milliseconds(50)));
  first.Cancel();
  later.Cancel();
  for (Stream* s : {&first, &later}) {
    const grpc::Status status = s->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED) << status.error_message();
  }
  ExpectAllKvFree();
  // Generation stopped: two uncancelled requests alone would make 2 * kMaxTokens.
  EXPECT_LT(DecodeSum("ced_generated_tokens_total"), 2.0 * kMaxTokens);
  EXPECT_EQ(Gateway("ced_gateway_requests_total{api=\"grpc\",outcome=\"cancelled\"}"), 2);
  ExpectStillServing();
}

// Cancels that race the gateway's Reserve call on the decode worker (0 to
// 19 ms after the call starts): no reservation may outlive its request. The
// router counts blocks it assigned as taken until the worker's next load
// report, so some of these quick requests may find no room at all.
TEST_F(E2eCancelTest, EarlyCancelsReleaseKvBlocks) {
  ASSERT_TRUE(cluster_->ready()) << cluster_->Log();
  for (int i = 0; i < 40; ++i) {
    Stream s(cluster_->gateway(), LongRequest(i), std::chrono::seconds(60));
    std::this_thread::sleep_for(std::chrono::milliseconds(i % 20));
    s.Cancel();
    const grpc::Status status = s.Finish();
    EXPECT_TRUE(status.error_code() == grpc::StatusCode::CANCELLED ||
                status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED)
        << i << ": " << status.error_code() << " " << status.error_message();
  }
  ExpectAllKvFree();
  ExpectStillServing();
}

TEST_F(E2eCancelTest, ExpiredDeadlineReleasesKvBlocks) {
  ASSERT_TRUE(cluster_->ready()) << cluster_->Log();
  std::vector<std::unique_ptr<Stream>> streams;
  for (int i = 0; i < 2; ++i) {
    streams.push_back(std::make_unique<Stream>(
        cluster_->gateway(),
        Request(Prompt(kPromptTokens, 10 + i), kMaxTokens, ced::v1::REPLAY_ON_AUTO),
        std::chrono::milliseconds(1500)));
  }
  for (auto& s : streams) {
    const grpc::Status status = s->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
        << status.error_message() << " after " << s->tokens() << " tokens";
  }
  ExpectAllKvFree();
  EXPECT_LT(DecodeSum("ced_generated_tokens_total"), 2.0 * kMaxTokens);
  // The client's deadline timer fires first and resets the stream, which the
  // gateway cannot tell from a cancel: either label may count it.
  EXPECT_EQ(Gateway("ced_gateway_requests_total{api=\"grpc\",outcome=\"deadline_exceeded\"}") +
                Gateway("ced_gateway_requests_total{api=\"grpc\",outcome=\"cancelled\"}"),
            2);
  ExpectStillServing();
}

}  // namespace
}  // namespace ced::testing
