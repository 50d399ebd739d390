// Cancelled work gives its KV blocks back: a client that cancels mid-stream
// (or before the first token) and a request whose deadline expires both end
// with every decode worker's ced_kv_blocks_used at 0, every worker idle as
// the router sees it, and generation stopped early on the decode workers.
#include <memory>

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

TEST_F(E2eCancelTest, ClientCancelReleasesKvBlocksOnEveryDecodeWorker) {
  ASSERT_TRUE(cluster_->ready()) << cluster_->Log();
  const auto long_request = [](int salt) {
    return Request(Prompt(kPromptTokens, salt), kMaxTokens, ced::v1::REPLAY_ON_AUTO);
  };
  Stream early(cluster_->gateway(), long_request(1), std::chrono::seconds(120));
  early.Cancel();  // most likely while routing or prefilling
  Stream first(cluster_->gateway(), long_request(2), std::chrono::seconds(120));
  Stream later(cluster_->gateway(), long_request(3), std::chrono::seconds(120));
  ASSERT_TRUE(first.ReadTokens(1));
  ASSERT_TRUE(later.ReadTokens(20));
  // While they run, their reservations show (the gauge follows heartbeats).
  EXPECT_TRUE(WaitUntil([&] { return DecodeSum("ced_kv_blocks_used") > 0; },
                        std::chrono::seconds(10), std::chrono::milliseconds(50)));
  first.Cancel();
  later.Cancel();
  for (Stream* s : {&early, &first, &later}) {
    const grpc::Status status = s->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED) << status.error_message();
  }
  ExpectAllKvFree();
  // Generation stopped: two uncancelled requests alone would make 2 * kMaxTokens.
  EXPECT_LT(DecodeSum("ced_generated_tokens_total"), 2.0 * kMaxTokens);
  EXPECT_EQ(Gateway("ced_gateway_requests_total{outcome=\"cancelled\"}"), 3);
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
  EXPECT_EQ(Gateway("ced_gateway_requests_total{outcome=\"deadline_exceeded\"}") +
                Gateway("ced_gateway_requests_total{outcome=\"cancelled\"}"),
            2);
  ExpectStillServing();
}

}  // namespace
}  // namespace ced::testing
