// Every bad input of the public API gets its status from the gateway of a
// real cluster (INVALID_ARGUMENT naming the field, RESOURCE_EXHAUSTED for an
// over-size message); no worker sees any of them, and the cluster keeps
// serving correct tokens afterwards.
#include <signal.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <thread>

#include "tests/e2e/cluster_fixture.h"
#include "tests/e2e/e2e_util.h"

namespace ced::testing {
namespace {

struct BadInput {
  std::string name;
  std::function<void(ced::v1::GenerateRequest*)> mutate;  // applied to a good request
  grpc::StatusCode code;
  std::string field;  // the message must name it ("" for RESOURCE_EXHAUSTED)
};

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<BadInput> BadInputs() {
  using R = ced::v1::GenerateRequest;
  const auto invalid = grpc::StatusCode::INVALID_ARGUMENT;
  std::vector<BadInput> v = {
      {"empty prompt", [](R* r) { r->clear_prompt_token_ids(); }, invalid, "prompt"},
      {"empty text prompt",
       [](R* r) {
         r->clear_prompt_token_ids();
         r->set_prompt("");
       },
       invalid, "prompt"},
      {"both prompt forms", [](R* r) { r->set_prompt("hello"); }, invalid, "prompt"},
      {"token id >= vocab", [](R* r) { r->set_prompt_token_ids(1, 260); }, invalid,
       "prompt_token_ids[1]"},
      {"negative token id", [](R* r) { r->set_prompt_token_ids(2, -1); }, invalid,
       "prompt_token_ids[2]"},
      {"prompt fills the context",
       [](R* r) {
         for (int i = r->prompt_token_ids_size(); i < 4096; ++i) r->add_prompt_token_ids(7);
       },
       invalid, "prompt_token_ids"},
      {"prompt + max_tokens beyond the context", [](R* r) { r->set_max_tokens(4096); }, invalid,
       "max_tokens"},
      {"zero max_tokens", [](R* r) { r->set_max_tokens(0); }, invalid, "max_tokens"},
      {"negative max_tokens", [](R* r) { r->set_max_tokens(-1); }, invalid, "max_tokens"},
      {"negative temperature", [](R* r) { r->set_temperature(-0.5f); }, invalid, "temperature"},
      {"NaN temperature", [](R* r) { r->set_temperature(kNaN); }, invalid, "temperature"},
      {"infinite temperature", [](R* r) { r->set_temperature(kInf); }, invalid, "temperature"},
      {"top_p above 1", [](R* r) { r->set_top_p(1.5f); }, invalid, "top_p"},
      {"negative top_p", [](R* r) { r->set_top_p(-0.1f); }, invalid, "top_p"},
      {"NaN top_p", [](R* r) { r->set_top_p(kNaN); }, invalid, "top_p"},
      {"negative top_k", [](R* r) { r->set_top_k(-1); }, invalid, "top_k"},
      {"too many stop strings",
       [](R* r) {
         for (int i = 0; i < 17; ++i) r->add_stop("s" + std::to_string(i));
       },
       invalid, "stop"},
      {"empty stop string", [](R* r) { r->add_stop(""); }, invalid, "stop[0]"},
      {"too many stop token ids",
       [](R* r) {
         for (int i = 0; i < 65; ++i) r->add_stop_token_ids(i);
       },
       invalid, "stop_token_ids"},
      {"stop token id outside the vocabulary", [](R* r) { r->add_stop_token_ids(5000); }, invalid,
       "stop_token_ids[0]"},
      {"unknown replay_on", [](R* r) { r->set_replay_on(static_cast<ced::v1::ReplayOn>(9)); },
       invalid, "replay_on"},
      {"request_id with a space", [](R* r) { r->set_request_id("a b"); }, invalid, "request_id"},
      // proto3 strings must be UTF-8: the C++ client logs an error but sends the bytes.
      {"invalid UTF-8 prompt",
       [](R* r) {
         r->clear_prompt_token_ids();
         r->set_prompt(std::string("ab\xff\xfe", 4));
       },
       invalid, "prompt"},
      {"invalid UTF-8 stop string", [](R* r) { r->add_stop(std::string("\xc3\x28", 2)); }, invalid,
       "stop[0]"},
      // Over the gateway's 4 MiB request limit.
      {"over-size message",
       [](R* r) {
         r->clear_prompt_token_ids();
         r->set_prompt(std::string(5 << 20, 'a'));
       },
       grpc::StatusCode::RESOURCE_EXHAUSTED, ""},
  };
  return v;
}

class E2eBadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = MakeModelDir("tiny");
    cluster_ = std::make_unique<LocalCluster>(
        model_, std::vector<std::string>{"--prefill", "1", "--decode", "1"});
  }
  void TearDown() override { cluster_.reset(); }
  double Metric(const std::string& service, const std::string& series) const {
    return ScrapeMetric(cluster_->addresses().at(service).at("metrics"), series).value_or(-1);
  }
  std::string model_;
  std::unique_ptr<LocalCluster> cluster_;
};

TEST_F(E2eBadInputTest, EveryBadInputGetsItsStatusAndTheClusterKeepsServing) {
  ASSERT_TRUE(cluster_->ready()) << cluster_->Log();
  const std::vector<int32_t> prompt = Prompt(24, 5);
  const ced::v1::GenerateRequest good = Request(prompt, 8, ced::v1::REPLAY_ON_AUTO);
  int invalid = 0;
  for (const BadInput& bad : BadInputs()) {
    ced::v1::GenerateRequest req = good;
    bad.mutate(&req);
    const GenResult r = Generate(cluster_->gateway(), req, {std::chrono::seconds(30)});
    EXPECT_EQ(r.status.error_code(), bad.code)
        << bad.name << ": " << r.status.error_code() << " " << r.status.error_message();
    EXPECT_TRUE(r.tokens.empty()) << bad.name;
    if (!bad.field.empty()) {
      EXPECT_EQ(r.status.error_message().rfind(bad.field + ":", 0), 0u)
          << bad.name << ": the message must start with the field: " << r.status.error_message();
    }
    if (bad.code == grpc::StatusCode::INVALID_ARGUMENT) ++invalid;
  }
  EXPECT_EQ(Metric("gateway", "ced_gateway_requests_total{api=\"grpc\",outcome=\"invalid_argument\"}"), invalid);
  // No worker saw any of them.
  EXPECT_EQ(Metric("router",
                   "ced_router_decisions_total{replay_on=\"prefill\",local_prefill=\"false\"}") +
                Metric("router",
                       "ced_router_decisions_total{replay_on=\"decode\",local_prefill=\"false\"}"),
            0);
  EXPECT_EQ(Metric("prefill-0", "ced_prompt_tokens_total"), 0);
  EXPECT_EQ(Metric("decode-0", "ced_generated_tokens_total"), 0);

  const GenResult r = Generate(cluster_->gateway(), good);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\n" << cluster_->Log();
  EXPECT_EQ(r.tokens, ColocatedEngine(model_).Run(prompt, 8));
  EXPECT_EQ(Metric("decode-0", "ced_generated_tokens_total"), 8);
}

// A request whose client request_id is already in flight on the gateway is
// refused (ALREADY_EXISTS naming the field) without touching the workers: the
// first request, whose sequence and transfer the workers key by that id,
// completes untouched (a Cancel sent for the second used to end it). The
// first is held in flight by construction: the decode worker is stopped
// (SIGSTOP) before it is sent, so it cannot finish until the test resumes it.
TEST_F(E2eBadInputTest, ARequestIdAlreadyInFlightIsRefusedAndTheFirstCompletes) {
  ASSERT_TRUE(cluster_->ready()) << cluster_->Log();
  const std::vector<int32_t> prompt = Prompt(24, 9);
  const std::vector<int32_t> want = ColocatedEngine(model_).Run(prompt, 64);
  ced::v1::GenerateRequest first = Request(prompt, 64, ced::v1::REPLAY_ON_AUTO);
  first.set_request_id("same-id");
  ASSERT_TRUE(cluster_->SignalService("decode-0", SIGSTOP));
  GenResult first_result;
  std::thread runner([&] { first_result = Generate(cluster_->gateway(), first); });
  // The gateway admitted the first (it holds the id); it cannot end while the
  // decode worker is stopped.
  const bool admitted =
      WaitUntil([&] { return Metric("gateway", "ced_gateway_inflight_requests") >= 1; },
                std::chrono::seconds(30), std::chrono::milliseconds(5));
  GenResult refused;
  if (admitted) {
    ced::v1::GenerateRequest second = Request(Prompt(16, 3), 4, ced::v1::REPLAY_ON_AUTO);
    second.set_request_id("same-id");
    refused = Generate(cluster_->gateway(), second);
  }
  ASSERT_TRUE(cluster_->SignalService("decode-0", SIGCONT));
  runner.join();
  ASSERT_TRUE(admitted) << "the first request never became in flight\n" << cluster_->Log();
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::ALREADY_EXISTS)
      << refused.status.error_message();
  EXPECT_EQ(refused.status.error_message().rfind("request_id:", 0), 0u)
      << refused.status.error_message();
  EXPECT_TRUE(refused.tokens.empty());
  ASSERT_TRUE(first_result.status.ok()) << first_result.status.error_message() << "\n"
                                        << cluster_->Log();
  EXPECT_EQ(first_result.tokens, want);
  // The id is free again once the first ended.
  ced::v1::GenerateRequest again = Request(Prompt(16, 3), 4, ced::v1::REPLAY_ON_AUTO);
  again.set_request_id("same-id");
  const GenResult r = Generate(cluster_->gateway(), again);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, ColocatedEngine(model_).Run(Prompt(16, 3), 4));
}

}  // namespace
}  // namespace ced::testing
