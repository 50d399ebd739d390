// End to end: client -> gateway -> router -> prefill worker -> K/V over UCX
// -> decode worker -> tokens, all real processes on loopback; the tokens are
// compared with a colocated run of the same engine in this process.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "ced/v1/gateway.grpc.pb.h"
#include "engine/model/presets.h"
#include "engine/runtime/engine.h"
#include "engine/sampling/sampler.h"
#include "tests/e2e/cluster_fixture.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/http_get.h"

namespace ced::testing {
namespace {

std::vector<int32_t> Colocated(const std::string& model, const std::vector<int32_t>& prompt,
                               int max_tokens, ReplayMode mode, const SamplingParams& sampling) {
  return ColocatedEngine(model).Run(prompt, max_tokens, mode, sampling);
}

double ResidentBytes(const LocalCluster& cluster, const std::string& name) {
  return ScrapeMetric(cluster.addresses().at(name).at("metrics"), "ced_weights_resident_bytes")
      .value_or(0.0);
}

class E2eClusterTest : public ::testing::Test {
 protected:
  // Started lazily from SetUp (not SetUpTestSuite) so that a cluster that
  // fails to start fails the test instead of skipping it.
  void SetUp() override {
    if (cluster_ == nullptr) {
      model_ = new std::string(MakeModelDir("tiny"));
      // Gateway flags that are not the defaults, to see them forwarded.
      cluster_ = new LocalCluster(*model_, {"--prefill", "1", "--decode", "1", "--migration-limit",
                                            "4", "--reserve-retries", "5",
                                            "--http-direct-stream=false"});
    }
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete model_;
  }
  static inline std::string* model_ = nullptr;
  static inline LocalCluster* cluster_ = nullptr;
};

TEST_F(E2eClusterTest, DisaggregatedGreedyEqualsColocatedForBothReplayPlacements) {
  ASSERT_TRUE(cluster_->ready()) << cluster_->Log();
  const auto prompt = Prompt(150, 1);  // longer than R: the bounded replay matters
  const auto expected = Colocated(*model_, prompt, 24, ReplayMode::kBounded, SamplingParams{});
  for (auto on : {ced::v1::REPLAY_ON_PREFILL, ced::v1::REPLAY_ON_DECODE}) {
    GenResult r = Generate(cluster_->gateway(), Request(prompt, 24, on));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\n" << cluster_->Log();
    EXPECT_EQ(r.tokens, expected) << "replay_on " << on;
    EXPECT_EQ(r.last.finish_reason(), ced::v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(r.last.usage().prompt_tokens(), 150);
    EXPECT_EQ(r.last.usage().completion_tokens(), 24);
    EXPECT_EQ(r.last.placement().replay_on(), on);
    EXPECT_FALSE(r.last.placement().local_prefill());
  }
}

TEST_F(E2eClusterTest, ExactReplayAndSamplingAgreeAcrossPlacements) {
  ASSERT_TRUE(cluster_->ready());
  const auto prompt = Prompt(90, 2);
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.top_k = 40;
  sp.seed = 1234;
  const auto expected = Colocated(*model_, prompt, 16, ReplayMode::kExact, sp);
  for (auto on : {ced::v1::REPLAY_ON_PREFILL, ced::v1::REPLAY_ON_DECODE}) {
    auto req = Request(prompt, 16, on);
    req.set_replay_mode(ced::v1::REPLAY_MODE_EXACT);
    req.set_temperature(0.8f);
    req.set_top_k(40);
    req.set_seed(1234);
    GenResult r = Generate(cluster_->gateway(), req);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, expected) << "replay_on " << on;
  }
}

// Presence and frequency penalties reach the sampler wherever it runs (the
// first token on the prefill worker when it replays, every other on the
// decode worker), counting the tokens generated so far on either.
TEST_F(E2eClusterTest, PenaltiesAgreeAcrossPlacementsAndChangeTheOutput) {
  ASSERT_TRUE(cluster_->ready());
  const auto prompt = Prompt(80, 4);
  SamplingParams greedy;
  SamplingParams sp;
  sp.presence_penalty = 0.7f;
  sp.frequency_penalty = 0.4f;
  const auto plain = Colocated(*model_, prompt, 32, ReplayMode::kBounded, greedy);
  const auto expected = Colocated(*model_, prompt, 32, ReplayMode::kBounded, sp);
  ASSERT_NE(expected, plain) << "the penalties change nothing on this prompt: pick another";
  for (auto on : {ced::v1::REPLAY_ON_PREFILL, ced::v1::REPLAY_ON_DECODE}) {
    auto req = Request(prompt, 32, on);
    req.set_presence_penalty(0.7f);
    req.set_frequency_penalty(0.4f);
    GenResult r = Generate(cluster_->gateway(), req);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, expected) << "replay_on " << on;
  }
  // Sampled, with a negative penalty (repetition encouraged).
  sp.temperature = 0.9f;
  sp.seed = 77;
  sp.presence_penalty = -1.0f;
  const auto sampled = Colocated(*model_, prompt, 24, ReplayMode::kBounded, sp);
  auto req = Request(prompt, 24, ced::v1::REPLAY_ON_DECODE);
  req.set_temperature(0.9f);
  req.set_seed(77);
  req.set_presence_penalty(-1.0f);
  req.set_frequency_penalty(0.4f);
  GenResult r = Generate(cluster_->gateway(), req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, sampled);
  // Out of range: refused naming the field.
  req.set_frequency_penalty(2.5f);
  r = Generate(cluster_->gateway(), req);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(r.status.error_message().rfind("frequency_penalty:", 0), 0u)
      << r.status.error_message();
}

// The repetition penalty (prompt and output) and logit_bias, on both
// replay placements.
TEST_F(E2eClusterTest, RepetitionPenaltyAndLogitBiasAgreeAcrossPlacements) {
  ASSERT_TRUE(cluster_->ready());
  const auto prompt = Prompt(80, 5);
  SamplingParams sp;
  sp.repetition_penalty = 1.4f;
  sp.logit_bias = {{prompt[3], 1.5f}, {200, -0.5f}};
  const auto plain = Colocated(*model_, prompt, 24, ReplayMode::kBounded, SamplingParams{});
  const auto expected = Colocated(*model_, prompt, 24, ReplayMode::kBounded, sp);
  ASSERT_NE(expected, plain) << "the adjustments change nothing on this prompt: pick another";
  for (auto on : {ced::v1::REPLAY_ON_PREFILL, ced::v1::REPLAY_ON_DECODE}) {
    auto req = Request(prompt, 24, on);
    req.set_repetition_penalty(1.4f);
    (*req.mutable_logit_bias())[prompt[3]] = 1.5f;
    (*req.mutable_logit_bias())[200] = -0.5f;
    GenResult r = Generate(cluster_->gateway(), req);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, expected) << "replay_on " << on;
  }
  // +100 forces a token at every step.
  auto req = Request(prompt, 6, ced::v1::REPLAY_ON_AUTO);
  (*req.mutable_logit_bias())[65] = 100.0f;
  GenResult r = Generate(cluster_->gateway(), req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, std::vector<int32_t>(6, 65));
  // A token id outside the vocabulary: refused naming it.
  (*req.mutable_logit_bias())[1 << 20] = 1.0f;
  r = Generate(cluster_->gateway(), req);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(r.status.error_message().rfind("logit_bias[1048576]:", 0), 0u)
      << r.status.error_message();
}

// Log-softmax in long double, written here (not the sampler's).
std::vector<double> LogSoftmax(const std::vector<float>& logits) {
  long double mx = *std::max_element(logits.begin(), logits.end());
  long double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<long double>(l) - mx);
  std::vector<double> out;
  for (float l : logits) out.push_back(static_cast<double>(l - mx - std::log(sum)));
  return out;
}

// Each generated token's logprob and its step's most probable tokens are the
// model's own distribution (before the adjustments), wherever the step was
// sampled: the first token on the prefill or the decode worker, the others
// on the decode worker.
TEST_F(E2eClusterTest, LogprobsAreTheModelsDistributionOnEveryPlacement) {
  ASSERT_TRUE(cluster_->ready());
  const auto prompt = Prompt(90, 6);
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.seed = 5;
  sp.frequency_penalty = 0.5f;
  sp.logit_bias = {{prompt[2], 2.0f}};
  std::vector<std::vector<float>> logits;
  const auto expected = ColocatedEngine(*model_).Run(prompt, 12, ReplayMode::kBounded, sp, &logits);
  ASSERT_EQ(logits.size(), 12u);
  constexpr int kTop = 5;
  for (auto on : {ced::v1::REPLAY_ON_PREFILL, ced::v1::REPLAY_ON_DECODE}) {
    auto req = Request(prompt, 12, on);
    req.set_temperature(0.8f);
    req.set_seed(5);
    req.set_frequency_penalty(0.5f);
    (*req.mutable_logit_bias())[prompt[2]] = 2.0f;
    req.set_logprobs(true);
    req.set_top_logprobs(kTop);
    GenResult r = Generate(cluster_->gateway(), req);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, expected) << "replay_on " << on;
    ASSERT_EQ(r.logprobs.size(), r.tokens.size()) << "replay_on " << on;
    for (size_t step = 0; step < r.tokens.size(); ++step) {
      const std::vector<double> ref = LogSoftmax(logits[step]);
      const ced::v1::StepLogprobs& got = r.logprobs[step];
      EXPECT_EQ(got.token().token_id(), r.tokens[step]);
      EXPECT_NEAR(got.token().logprob(), ref[r.tokens[step]], 1e-3)
          << "step " << step << ", replay_on " << on;
      std::vector<int> order(ref.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ref[a] > ref[b]; });
      ASSERT_EQ(got.top_size(), kTop);
      for (int i = 0; i < kTop; ++i) {
        EXPECT_EQ(got.top(i).token_id(), order[i]) << "step " << step << ", rank " << i;
        EXPECT_NEAR(got.top(i).logprob(), ref[order[i]], 1e-3);
      }
    }
  }
  // Not asked for: none.
  GenResult plain = Generate(cluster_->gateway(), Request(prompt, 4, ced::v1::REPLAY_ON_AUTO));
  ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();
  EXPECT_TRUE(plain.logprobs.empty());
  // Refused naming the field.
  auto req = Request(prompt, 4, ced::v1::REPLAY_ON_AUTO);
  req.set_top_logprobs(3);
  GenResult r = Generate(cluster_->gateway(), req);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(r.status.error_message().rfind("top_logprobs:", 0), 0u) << r.status.error_message();
}

TEST_F(E2eClusterTest, ConcurrentRequestsAreAllCorrect) {
  ASSERT_TRUE(cluster_->ready());
  constexpr int kRequests = 6;
  std::vector<std::vector<int32_t>> expected(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    expected[i] = Colocated(*model_, Prompt(20 + 25 * i, i), 12, ReplayMode::kBounded, {});
  }
  std::vector<GenResult> got(kRequests);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      got[i] = Generate(cluster_->gateway(),
                        Request(Prompt(20 + 25 * i, i), 12, ced::v1::REPLAY_ON_AUTO));
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(got[i].status.ok()) << i << ": " << got[i].status.error_message();
    EXPECT_EQ(got[i].tokens, expected[i]) << "request " << i;
  }
}

TEST_F(E2eClusterTest, TextPromptStreamsText) {
  ASSERT_TRUE(cluster_->ready());
  ced::v1::GenerateRequest req;
  req.set_prompt("Hello, disaggregated world");
  req.set_max_tokens(8);
  req.set_ignore_eos(true);
  GenResult r = Generate(cluster_->gateway(), req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens.size(), 8u);
  EXPECT_EQ(r.last.finish_reason(), ced::v1::FINISH_REASON_LENGTH);
}

TEST_F(E2eClusterTest, BadFieldIsInvalidArgumentNamingIt) {
  ASSERT_TRUE(cluster_->ready());
  auto req = Request(Prompt(5, 1), 8, ced::v1::REPLAY_ON_AUTO);
  req.set_max_tokens(-3);
  GenResult r = Generate(cluster_->gateway(), req);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(r.status.error_message().find("max_tokens"), std::string::npos);
  auto bad_token = Request({1, 2, 99999}, 8, ced::v1::REPLAY_ON_AUTO);
  r = Generate(cluster_->gateway(), bad_token);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(r.status.error_message().find("prompt_token_ids"), std::string::npos);
}

TEST_F(E2eClusterTest, EveryServiceServesPrometheusMetrics) {
  ASSERT_TRUE(cluster_->ready());
  // One request so the counters move.
  ASSERT_TRUE(Generate(cluster_->gateway(), Request(Prompt(40, 5), 4, ced::v1::REPLAY_ON_DECODE))
                  .status.ok());
  const std::map<std::string, std::vector<std::string>> expected = {
      {"gateway", {"ced_gateway_requests_total", "ced_gateway_ttft_seconds_bucket"}},
      {"router", {"ced_router_decisions_total"}},
      {"prefill-0",
       {"ced_prefill_seconds_bucket", "ced_kv_transfer_bytes_total{direction=\"out\"}",
        "ced_weights_resident_bytes"}},
      {"decode-0",
       {"ced_decode_steps_total", "ced_kv_blocks_free", "ced_replays_total",
        "ced_kv_transfer_bytes_total{direction=\"in\"}"}},
  };
  for (const auto& [name, families] : expected) {
    ASSERT_TRUE(cluster_->addresses().count(name)) << name;
    int status = 0;
    const std::string text =
        HttpGet(cluster_->addresses().at(name).at("metrics"), "/metrics", &status);
    EXPECT_EQ(status, 200) << name;
    for (const auto& f : families) {
      EXPECT_NE(text.find(f), std::string::npos) << name << " lacks " << f << "\n" << text;
    }
  }
  const double prefill = ResidentBytes(*cluster_, "prefill-0");
  const double decode = ResidentBytes(*cluster_, "decode-0");
  EXPECT_GT(decode, 0);
  // The default cluster's prefill workers may replay, so they hold the decoder too.
  EXPECT_NEAR(prefill / decode, 1.0, 0.01);
}

TEST_F(E2eClusterTest, ForwardsGatewayFlagsToTheGateway) {
  ASSERT_TRUE(cluster_->ready());
  const std::vector<std::string> argv = cluster_->ServiceArgv("gateway");
  ASSERT_FALSE(argv.empty()) << "no gateway process";
  auto value = [&](const std::string& flag) {
    for (size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == flag) return argv[i + 1];
    }
    return std::string("(absent)");
  };
  EXPECT_EQ(value("--migration-limit"), "4");
  EXPECT_EQ(value("--reserve-retries"), "5");
  // Boolean flags go as --name=value.
  auto has = [&](const std::string& arg) {
    return std::find(argv.begin(), argv.end(), arg) != argv.end();
  };
  EXPECT_TRUE(has("--http-direct-stream=false"));
  EXPECT_TRUE(has("--decode-mux=true"));
}

// What the same engine holds in this process with `weights`.
double EngineResidentBytes(const std::string& model, WeightSet weights) {
  EngineOptions o;
  o.model_dir = model;
  o.weights = weights;
  o.kv_cache_bytes = 1 << 20;
  auto engine = Engine::Create(o);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? static_cast<double>((*engine)->weights().resident_bytes()) : -1.0;
}

// `ced client` pointed at a service of another role says what it reached
// (gRPC itself answers only UNIMPLEMENTED with no message).
TEST_F(E2eClusterTest, ClientCommandsSayWhenTheAddressIsAnotherRole) {
  const std::string router = cluster_->addresses().at("router").at("grpc");
  const std::string gateway = cluster_->gateway();
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"client", "model-info", "--gateway", router},
       "ced client model-info: " + router + " is not a gateway"},
      {{"client", "generate", "--gateway", router, "hi"},
       "ced client generate: " + router + " is not a gateway"},
      {{"client", "drain", "--worker", gateway},
       "ced client drain: " + gateway + " is not a prefill or decode worker"},
      {{"client", "flush-cache", "--worker", router},
       "ced client flush-cache: " + router + " is not a prefill or decode worker"},
  };
  for (const Case& c : cases) {
    services::SubprocessOptions o;
    o.argv = {CedBinary()};
    o.argv.insert(o.argv.end(), c.args.begin(), c.args.end());
    o.stderr_to_stdout = true;
    auto run = services::RunToCompletion(o, 60);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_FALSE(run->exited_ok());
    EXPECT_NE(run->output.find(c.expected), std::string::npos) << run->output;
  }
  // The gateway still serves (a drain sent to it was not taken as one).
  EXPECT_TRUE(Generate(gateway, Request(Prompt(20, 3), 4, ced::v1::REPLAY_ON_AUTO)).status.ok());
}

// Requests one after the other that each need most of the decode worker's
// cache: each must run once the one before has ended, even before the
// worker's next load report tells the router (the router used to count the
// ended request's blocks as still taken until that report, up to a second,
// and refused the next one with RESOURCE_EXHAUSTED).
TEST(E2eSmallCacheTest, BackToBackRequestsThatEachFillTheCacheAllRun) {
  const std::string model = MakeModelDir("tiny");
  // 3 MiB of f32 `tiny` K/V: 48 blocks of 16 tokens; a request below needs 38.
  // --kv-wait-ms 0: a refusal fails the request instead of waiting for room,
  // so the router's own bookkeeping is what the test sees.
  LocalCluster cluster(
      model, {"--prefill", "1", "--decode", "1", "--kv-cache-mb", "3", "--kv-wait-ms", "0"});
  ASSERT_TRUE(cluster.ready()) << cluster.Log();
  const std::string total = cluster.addresses().at("decode-0").at("metrics");
  ASSERT_EQ(ScrapeMetric(total, "ced_kv_blocks_free"), 48.0) << cluster.Log();
  for (int i = 0; i < 6; ++i) {
    GenResult r =
        Generate(cluster.gateway(), Request(Prompt(600, 40 + i), 4, ced::v1::REPLAY_ON_AUTO));
    ASSERT_TRUE(r.status.ok()) << "request " << i << ": " << r.status.error_message() << "\n"
                               << cluster.Log();
    EXPECT_EQ(r.tokens.size(), 4u);
  }
}

TEST(E2eEncoderOnlyTest, EncoderOnlyPrefillHoldsHalfTheWeightsAndStillServes) {
  const std::string model = MakeModelDir("tiny");
  LocalCluster cluster(model, {"--prefill", "1", "--decode", "1", "--prefill-replay-capable",
                               "false", "--replay-on", "prefill"});
  ASSERT_TRUE(cluster.ready()) << cluster.Log();
  const auto prompt = Prompt(64, 9);
  const auto expected = Colocated(model, prompt, 10, ReplayMode::kBounded, {});
  // Asked to replay on prefill, the router must place it on decode instead.
  GenResult r = Generate(cluster.gateway(), Request(prompt, 10, ced::v1::REPLAY_ON_PREFILL));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message() << cluster.Log();
  EXPECT_EQ(r.tokens, expected);
  EXPECT_EQ(r.last.placement().replay_on(), ced::v1::REPLAY_ON_DECODE);
  const double prefill = ResidentBytes(cluster, "prefill-0");
  const double decode = ResidentBytes(cluster, "decode-0");
  EXPECT_EQ(prefill, EngineResidentBytes(model, WeightSet::kEncoderOnly));
  EXPECT_EQ(decode, EngineResidentBytes(model, WeightSet::kFull));
  ASSERT_GT(decode, 0);
  const double ratio = prefill / decode;
  ::testing::Test::RecordProperty("prefill_over_decode_weights", std::to_string(ratio));
  EXPECT_GT(ratio, 0.35);
  EXPECT_LT(ratio, 0.65);
}

TEST(E2eDecoderOnlyTest, DecoderOnlyBaselineEqualsColocatedAndHoldsEqualWeights) {
  const std::string model = MakeModelDir("tiny-dec");
  // Even without replay capability, a decoder-only prefill needs every layer.
  LocalCluster cluster(model,
                       {"--prefill", "1", "--decode", "1", "--prefill-replay-capable", "false"});
  ASSERT_TRUE(cluster.ready()) << cluster.Log();
  const auto prompt = Prompt(70, 4);
  const auto expected = Colocated(model, prompt, 16, ReplayMode::kBounded, {});
  GenResult r = Generate(cluster.gateway(), Request(prompt, 16, ced::v1::REPLAY_ON_AUTO));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message() << cluster.Log();
  EXPECT_EQ(r.tokens, expected);
  const double decode = ResidentBytes(cluster, "decode-0");
  EXPECT_GT(decode, 0);
  EXPECT_EQ(ResidentBytes(cluster, "prefill-0"), decode);
}

}  // namespace
}  // namespace ced::testing
