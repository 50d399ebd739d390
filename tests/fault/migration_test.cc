// Issue 15 point 4: request migration.
// - A decode worker SIGKILLed mid-stream: the gateway moves the stream to the
//   other decode worker (prompt + the tokens streamed, the remaining
//   max_tokens, the sampler's step offset) and the client gets one stream,
//   no error, token for token what the colocated engine gives, greedy and
//   sampled. Its gap (the migration latency) is printed as a figure.
// - With --migration-limit 0 the client gets UNAVAILABLE, as before.
// - The only decode worker killed: the stream waits for it to come back
//   (restarted) and continues there; if none does, UNAVAILABLE after the wait.
// - A decode worker SIGTERMed whose drain runs out migrates its streams too.
// - A prefill worker SIGKILLed before the first decoded token: the prefill
//   runs again on the other prefill worker, once.
// Deterministic: the decode workers sleep before every step
// (--step-delay-ms-for-testing), so the stream is still running when the test
// kills its worker, whatever the machine; the test checks it is (tokens
// received, not all, the worker running it).
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tests/fault/fault_cluster.h"

namespace ced::testing {
namespace {

constexpr int kStepDelayMs = 10;
constexpr int kTokens = 300;  // >= 3 s of decoding by construction
constexpr int kKillAfterTokens = 40;

// `prefill` + `decode` workers whose decode steps are slowed (kStepDelayMs).
FaultClusterOptions SteppedTopology(const std::string& model, int prefill, int decode) {
  FaultClusterOptions o = Topology(model, prefill, decode);
  o.decode_flags = {"--step-delay-ms-for-testing", std::to_string(kStepDelayMs)};
  return o;
}

double Running(Proc& p) {
  return ScrapeMetric(p.metrics(), "ced_decode_running_sequences").value_or(-1);
}

double GatewayMetric(FaultCluster& c, const std::string& series) {
  return ScrapeMetric(c.gateway().metrics(), series).value_or(-1);
}

// A Generate stream read message by message, with the arrival time of each.
class TimedStream {
 public:
  TimedStream(const std::string& gateway, const ced::v1::GenerateRequest& req) {
    stub_ =
        ced::v1::Gateway::NewStub(grpc::CreateChannel(gateway, grpc::InsecureChannelCredentials()));
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    reader_ = stub_->Generate(&ctx_, req);
  }
  // Reads until `n` tokens arrived in all; false when the stream ended first.
  bool ReadTokens(int n) {
    ced::v1::GenerateResponse r;
    while (static_cast<int>(tokens_.size()) < n) {
      if (!reader_->Read(&r)) return false;
      Record(r);
    }
    return true;
  }
  grpc::Status Finish() {
    ced::v1::GenerateResponse r;
    while (reader_->Read(&r)) Record(r);
    return reader_->Finish();
  }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::vector<ced::v1::StepLogprobs>& logprobs() const { return logprobs_; }
  const ced::v1::GenerateResponse& last() const { return last_; }
  // The longest wait for a token after `t` (ms), and the median wait over the
  // whole stream.
  double LongestGapAfter(SteadyClock::time_point t) const {
    double longest = 0;
    for (size_t i = 1; i < times_.size(); ++i) {
      if (times_[i] < t) continue;
      longest = std::max(longest, Ms(times_[i] - std::max(times_[i - 1], t)));
    }
    return longest;
  }
  double MedianGap() const {
    std::vector<double> gaps;
    for (size_t i = 1; i < times_.size(); ++i) gaps.push_back(Ms(times_[i] - times_[i - 1]));
    if (gaps.empty()) return 0;
    std::nth_element(gaps.begin(), gaps.begin() + gaps.size() / 2, gaps.end());
    return gaps[gaps.size() / 2];
  }

 private:
  static double Ms(SteadyClock::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
  }
  void Record(const ced::v1::GenerateResponse& r) {
    if (r.token_ids_size() > 0) times_.push_back(SteadyClock::now());
    tokens_.insert(tokens_.end(), r.token_ids().begin(), r.token_ids().end());
    logprobs_.insert(logprobs_.end(), r.logprobs().begin(), r.logprobs().end());
    last_ = r;
  }
  std::vector<ced::v1::StepLogprobs> logprobs_;

  std::unique_ptr<ced::v1::Gateway::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<ced::v1::GenerateResponse>> reader_;
  std::vector<int32_t> tokens_;
  std::vector<SteadyClock::time_point> times_;
  ced::v1::GenerateResponse last_;
};

struct Case {
  const char* name;
  float temperature;
  ced::v1::ReplayOn replay_on;
  // Penalties count the tokens generated before the move too: the worker
  // that continues finds them at the end of its prompt.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Every token's log-probabilities arrive, from either worker.
  bool logprobs = false;
};

class FaultMigrationTest : public ::testing::TestWithParam<Case> {};

TEST_P(FaultMigrationTest, DecodeWorkerKilledMidStreamMigrates) {
  const Case& param = GetParam();
  const std::string model = MakeModelDir("tiny");
  FaultClusterOptions o = SteppedTopology(model, 1, 2);
  FaultCluster c(o);
  ASSERT_TRUE(c.ok());
  ColocatedEngine ref(model);
  const auto prompt = Prompt(64, 11);
  ced::v1::GenerateRequest req = FaultRequest(prompt, kTokens, "migrate-1", param.replay_on);
  SamplingParams sampling;
  if (param.temperature > 0) {
    req.set_temperature(param.temperature);
    req.set_top_p(0.95f);
    req.set_seed(1234);
    sampling.temperature = param.temperature;
    sampling.top_p = 0.95f;
    sampling.seed = 1234;
  }
  req.set_presence_penalty(param.presence_penalty);
  req.set_frequency_penalty(param.frequency_penalty);
  sampling.presence_penalty = param.presence_penalty;
  sampling.frequency_penalty = param.frequency_penalty;
  if (param.logprobs) {
    req.set_logprobs(true);
    req.set_top_logprobs(3);
  }
  std::vector<std::vector<float>> logits;
  const std::vector<int32_t> want =
      ref.Run(prompt, kTokens, ReplayMode::kBounded, sampling, &logits);
  if (sampling.has_penalties()) {
    SamplingParams plain = sampling;
    plain.presence_penalty = plain.frequency_penalty = 0.0f;
    ASSERT_NE(want, ref.Run(prompt, kTokens, ReplayMode::kBounded, plain))
        << "the penalties change nothing here: the case tests nothing";
  }

  TimedStream stream(c.gateway().grpc(), req);
  ASSERT_TRUE(stream.ReadTokens(kKillAfterTokens));
  const double r0 = Running(c.decode(0)), r1 = Running(c.decode(1));
  ASSERT_EQ(r0 + r1, 1) << "the stream is running on exactly one decode worker";
  const int victim = r0 == 1 ? 0 : 1, survivor = 1 - victim;
  const size_t before_kill = stream.tokens().size();
  ASSERT_GT(before_kill, 0u);
  ASSERT_LT(before_kill, static_cast<size_t>(kTokens)) << "the stream finished before the kill";
  const auto t_kill = SteadyClock::now();
  c.decode(victim).Kill();

  const grpc::Status s = stream.Finish();
  ASSERT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
  EXPECT_EQ(stream.tokens(), want) << "the migrated stream differs from the colocated engine";
  if (param.logprobs) {
    ASSERT_EQ(stream.logprobs().size(), stream.tokens().size());
    for (size_t i = 0; i < stream.tokens().size() && i < logits.size(); ++i) {
      const ced::v1::StepLogprobs& l = stream.logprobs()[i];
      EXPECT_EQ(l.token().token_id(), stream.tokens()[i]) << "step " << i;
      EXPECT_EQ(l.top_size(), 3) << "step " << i;
      // The model's log-softmax, computed here. After the move the new
      // worker prefilled prompt + output (a bounded replay of its own): near.
      const std::vector<float>& x = logits[i];
      const long double mx = *std::max_element(x.begin(), x.end());
      long double sum = 0;
      for (float v : x) sum += std::exp(static_cast<long double>(v) - mx);
      const double want_lp = static_cast<double>(x[stream.tokens()[i]] - mx - std::log(sum));
      EXPECT_NEAR(l.token().logprob(), want_lp, i < before_kill ? 1e-3 : 0.05) << "step " << i;
    }
  }
  EXPECT_EQ(stream.last().finish_reason(), ced::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(stream.last().usage().completion_tokens(), kTokens);
  const ced::v1::Placement& placement = stream.last().placement();
  EXPECT_EQ(placement.migrations(), 1);
  ASSERT_EQ(placement.migrated_from_decode_worker_ids_size(), 1);
  EXPECT_EQ(placement.migrated_from_decode_worker_ids(0), c.decode_id(victim));
  EXPECT_EQ(placement.decode_worker_id(), c.decode_id(survivor));
  EXPECT_EQ(GatewayMetric(c, "ced_migrations_total{outcome=\"ok\"}"), 1);
  EXPECT_EQ(GatewayMetric(c, "ced_migrations_total{outcome=\"limit\"}"), 0);

  const double gap_ms = stream.LongestGapAfter(t_kill);
  const std::string scenario = std::string("migration_") + param.name;
  Figure(scenario, "tokens_before_kill", static_cast<double>(before_kill));
  Figure(scenario, "stream_gap_ms", gap_ms);
  Figure(scenario, "median_token_interval_ms", stream.MedianGap());
  Figure(scenario, "tokens_equal", stream.tokens() == want ? 1 : 0);
  std::string why;
  EXPECT_TRUE(c.WaitNoKvInUse(Ms(10000), nullptr, &why)) << why;
}

INSTANTIATE_TEST_SUITE_P(
    Sampling, FaultMigrationTest,
    ::testing::Values(
        Case{"greedy", 0.0f, ced::v1::REPLAY_ON_AUTO},
        Case{"sampled", 0.8f, ced::v1::REPLAY_ON_AUTO},
        Case{"sampled_replay_on_decode", 0.8f, ced::v1::REPLAY_ON_DECODE},
        Case{"greedy_penalties_replay_on_prefill", 0.0f, ced::v1::REPLAY_ON_PREFILL, 0.5f, 0.3f},
        Case{"sampled_penalties_replay_on_decode", 0.8f, ced::v1::REPLAY_ON_DECODE, 0.4f, 0.6f},
        Case{"greedy_logprobs", 0.0f, ced::v1::REPLAY_ON_PREFILL, 0.0f, 0.0f, true}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(FaultMigrationLimitTest, LimitZeroEndsTheStreamWithUnavailable) {
  const std::string model = MakeModelDir("tiny");
  FaultClusterOptions o = SteppedTopology(model, 1, 2);
  o.gateway_flags = {"--migration-limit", "0"};
  FaultCluster c(o);
  ASSERT_TRUE(c.ok());
  ColocatedEngine ref(model);
  const auto prompt = Prompt(64, 12);
  TimedStream stream(c.gateway().grpc(), FaultRequest(prompt, kTokens, "no-migrate-1"));
  ASSERT_TRUE(stream.ReadTokens(kKillAfterTokens));
  const double r0 = Running(c.decode(0)), r1 = Running(c.decode(1));
  ASSERT_EQ(r0 + r1, 1);
  c.decode(r0 == 1 ? 0 : 1).Kill();
  const grpc::Status s = stream.Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_LT(stream.tokens().size(), static_cast<size_t>(kTokens));
  EXPECT_TRUE(IsPrefix(stream.tokens(), ref.Run(prompt, kTokens))) << "a wrong token was streamed";
  EXPECT_EQ(GatewayMetric(c, "ced_migrations_total{outcome=\"limit\"}"), 1);
  EXPECT_EQ(GatewayMetric(c, "ced_migrations_total{outcome=\"ok\"}"), 0);
}

// The only decode worker is killed mid-stream and comes back (restarted under
// its id, on a new port, as a supervisor does): the stream waits for it
// (--migration-wait-ms, default 15 s) and continues there, token for token.
TEST(FaultMigrationWaitTest, OnlyDecodeWorkerRestartedTakesTheStreamBack) {
  const std::string model = MakeModelDir("tiny");
  FaultClusterOptions o = SteppedTopology(model, 1, 1);
  FaultCluster c(o);
  ASSERT_TRUE(c.ok());
  ColocatedEngine ref(model);
  const auto prompt = Prompt(64, 15);
  const std::vector<int32_t> want = ref.Run(prompt, kTokens);
  TimedStream stream(c.gateway().grpc(), FaultRequest(prompt, kTokens, "wait-migrate-1"));
  ASSERT_TRUE(stream.ReadTokens(kKillAfterTokens));
  ASSERT_EQ(Running(c.decode(0)), 1);
  const size_t before_kill = stream.tokens().size();
  ASSERT_LT(before_kill, static_cast<size_t>(kTokens)) << "the stream finished before the kill";
  const auto t_kill = SteadyClock::now();
  c.decode(0).Kill();
  // Down long enough for the gateway to find no decode worker at least once.
  ASSERT_TRUE(WaitUntil(
      [&] { return c.gateway().Log().find("no worker to migrate to") != std::string::npos; },
      Ms(20000), Ms(10)))
      << c.gateway().Log();
  c.ReplaceDecode(0, c.StartDecode(0));
  ASSERT_TRUE(c.decode(0).ready());

  const grpc::Status s = stream.Finish();
  ASSERT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message() << "\n" << c.gateway().Log();
  EXPECT_EQ(stream.tokens(), want) << "the migrated stream differs from the colocated engine";
  EXPECT_EQ(stream.last().finish_reason(), ced::v1::FINISH_REASON_LENGTH);
  const ced::v1::Placement& placement = stream.last().placement();
  EXPECT_EQ(placement.migrations(), 1);
  ASSERT_EQ(placement.migrated_from_decode_worker_ids_size(), 1);
  EXPECT_EQ(placement.migrated_from_decode_worker_ids(0), c.decode_id(0));
  EXPECT_EQ(placement.decode_worker_id(), c.decode_id(0));
  EXPECT_EQ(GatewayMetric(c, "ced_migrations_total{outcome=\"ok\"}"), 1);
  EXPECT_EQ(GatewayMetric(c, "ced_migrations_total{outcome=\"failed\"}"), 0);
  Figure("migration_restart", "stream_gap_ms", stream.LongestGapAfter(t_kill));
}

// No decode worker comes back: the stream ends UNAVAILABLE once the wait is
// over, saying so.
TEST(FaultMigrationWaitTest, NoWorkerComesBackEndsTheStreamAfterTheWait) {
  const std::string model = MakeModelDir("tiny");
  FaultClusterOptions o = SteppedTopology(model, 1, 1);
  o.gateway_flags = {"--migration-wait-ms", "1000"};
  FaultCluster c(o);
  ASSERT_TRUE(c.ok());
  ColocatedEngine ref(model);
  const auto prompt = Prompt(64, 16);
  TimedStream stream(c.gateway().grpc(), FaultRequest(prompt, kTokens, "wait-migrate-2"));
  ASSERT_TRUE(stream.ReadTokens(kKillAfterTokens));
  c.decode(0).Kill();
  const grpc::Status s = stream.Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_NE(s.error_message().find("no worker took it in"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("--migration-wait-ms"), std::string::npos) << s.error_message();
  EXPECT_TRUE(IsPrefix(stream.tokens(), ref.Run(prompt, kTokens))) << "a wrong token was streamed";
  EXPECT_EQ(GatewayMetric(c, "ced_migrations_total{outcome=\"failed\"}"), 1);
  EXPECT_EQ(GatewayMetric(c, "ced_migrations_total{outcome=\"ok\"}"), 0);
}

// A decode worker SIGTERMed mid-stream whose drain runs out (the stream is
// far longer than --drain-timeout-ms) ends the stream with UNAVAILABLE and
// answers the gateway's Cancel with UNAVAILABLE: the gateway migrates the
// stream like a killed worker's, and the worker still exits 0.
TEST(FaultMigrationDrainTest, DecodeWorkerPastItsDrainTimeoutMigrates) {
  const std::string model = MakeModelDir("tiny");
  FaultClusterOptions o = Topology(model, 1, 2);
  o.decode_flags = {"--step-delay-ms-for-testing", std::to_string(kStepDelayMs),
                    "--drain-timeout-ms", "200"};
  FaultCluster c(o);
  ASSERT_TRUE(c.ok());
  ColocatedEngine ref(model);
  const auto prompt = Prompt(64, 14);
  const std::vector<int32_t> want = ref.Run(prompt, kTokens);
  TimedStream stream(c.gateway().grpc(), FaultRequest(prompt, kTokens, "drain-migrate-1"));
  ASSERT_TRUE(stream.ReadTokens(kKillAfterTokens));
  const double r0 = Running(c.decode(0)), r1 = Running(c.decode(1));
  ASSERT_EQ(r0 + r1, 1) << "the stream is running on exactly one decode worker";
  const int victim = r0 == 1 ? 0 : 1;
  ASSERT_LT(stream.tokens().size(), static_cast<size_t>(kTokens));
  const auto t_term = SteadyClock::now();
  c.decode(victim).Signal(SIGTERM);

  const grpc::Status s = stream.Finish();
  ASSERT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
  EXPECT_EQ(stream.tokens(), want) << "the migrated stream differs from the colocated engine";
  const ced::v1::Placement& placement = stream.last().placement();
  EXPECT_EQ(placement.migrations(), 1);
  ASSERT_EQ(placement.migrated_from_decode_worker_ids_size(), 1);
  EXPECT_EQ(placement.migrated_from_decode_worker_ids(0), c.decode_id(victim));
  EXPECT_EQ(placement.decode_worker_id(), c.decode_id(1 - victim));
  EXPECT_EQ(GatewayMetric(c, "ced_migrations_total{outcome=\"ok\"}"), 1);
  const std::optional<int> st = c.decode(victim).WaitExit(Ms(60000));
  ASSERT_TRUE(st.has_value()) << "the decode worker did not exit after SIGTERM";
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << c.decode(victim).Log();
  Figure("migration_drain_timeout", "stream_gap_ms", stream.LongestGapAfter(t_term));
  std::string why;
  EXPECT_TRUE(c.WaitNoKvInUse(Ms(10000), nullptr, &why)) << why;
}

double SentBytes(Proc& p) {
  return ScrapeMetric(p.metrics(), "ced_kv_transfer_bytes_total{direction=\"out\"}").value_or(0);
}

TEST(FaultMigrationPrefillTest, PrefillWorkerKilledBeforeFirstTokenIsRetriedOnce) {
  const std::string model = MakeModelDir("tiny");
  // Requests named "slow-*" move their K/V in 64-token chunks 700 ms apart.
  FaultClusterOptions o = Topology(model, 2, 1);
  o.prefill_flags = {"--chunk", "64", "--fault-injection-for-testing",
                     "match=slow,send_delay_ms=700"};
  FaultCluster c(o);
  ASSERT_TRUE(c.ok());
  ColocatedEngine ref(model);
  const auto prompt = Prompt(300, 13);
  const std::vector<double> before = {SentBytes(c.prefill(0)), SentBytes(c.prefill(1))};
  TimedStream stream(c.gateway().grpc(), FaultRequest(prompt, 16, "slow-retry-1"));
  int dead = -1;
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (int i = 0; i < 2; ++i) {
          if (SentBytes(c.prefill(i)) > before[i]) dead = i;
        }
        return dead >= 0;
      },
      Ms(30000), Ms(20)));
  const auto t_kill = SteadyClock::now();
  c.prefill(dead).Kill();
  const grpc::Status s = stream.Finish();
  const double took_ms = MsSince(t_kill);
  ASSERT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
  EXPECT_EQ(stream.tokens(), ref.Run(prompt, 16));
  const ced::v1::Placement& placement = stream.last().placement();
  ASSERT_EQ(placement.retried_from_prefill_worker_ids_size(), 1);
  EXPECT_EQ(placement.retried_from_prefill_worker_ids(0), c.prefill_id(dead));
  EXPECT_EQ(placement.prefill_worker_id(), c.prefill_id(1 - dead));
  EXPECT_EQ(placement.migrations(), 0);
  EXPECT_EQ(GatewayMetric(c, "ced_prefill_retries_total{outcome=\"ok\"}"), 1);
  Figure("prefill_retry", "kill_to_final_ms", took_ms);
  std::string why;
  EXPECT_TRUE(c.WaitNoKvInUse(Ms(10000), nullptr, &why)) << why;
}

}  // namespace
}  // namespace ced::testing
