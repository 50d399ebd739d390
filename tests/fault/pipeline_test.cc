// The prefill worker pipelines compute and K/V transfer: once a prompt's
// compute ends, the next queued prompt computes while the previous one's K/V
// messages are still unacknowledged (its cache stays allocated until then),
// and the Prefill RPC's `done` (transfer_ms: the transfer exposed after the
// compute) comes when its last message is acknowledged. The test-only fault
// rule send_delay_ms holds the first request's K/V on the wire for seconds
// (one delay per message), so the order of events is fixed without relying
// on how fast anything runs.
#include "tests/fault/fault_cluster.h"

namespace ced::testing {
namespace {

constexpr int kSlowPrompt = 300;  // 5 chunks of 64 + the tail: 6 delayed messages
constexpr int kSendDelayMs = 1000;

double Prefill(FaultCluster& c, const std::string& series) {
  return ScrapeMetric(c.prefill(0).metrics(), series).value_or(0);
}

TEST(FaultPipelineTest, NextPrefillComputesWhileTheLastKvIsInFlight) {
  const std::string model = MakeModelDir("tiny");
  FaultClusterOptions o = Topology(model, 1, 1);
  o.prefill_flags = {"--chunk", "64", "--fault-injection-for-testing",
                     "match=slow,send_delay_ms=" + std::to_string(kSendDelayMs)};
  FaultCluster c(o);
  ASSERT_TRUE(c.ok());
  ColocatedEngine ref(model);
  const auto slow_prompt = Prompt(kSlowPrompt, 1);
  const auto fast_prompt = Prompt(40, 2);
  const auto want_slow = ref.Run(slow_prompt, 8);
  const auto want_fast = ref.Run(fast_prompt, 8);

  Stream slow(c.gateway().grpc(),
              FaultRequest(slow_prompt, 8, "slow-1", ced::v1::REPLAY_ON_PREFILL), Ms(120000));
  // Its compute is over (the first token comes from the prefill worker);
  // its K/V takes 6 x kSendDelayMs more.
  ASSERT_TRUE(slow.ReadTokens(1));
  ASSERT_EQ(Prefill(c, "ced_prompt_tokens_total"), kSlowPrompt);
  Stream fast(c.gateway().grpc(),
              FaultRequest(fast_prompt, 8, "fast-1", ced::v1::REPLAY_ON_PREFILL), Ms(120000));
  // The second prompt's first token comes from its compute on the prefill
  // worker, which (without pipelining) would start only after the first
  // request's last K/V acknowledgement, i.e. after its `done`.
  ASSERT_TRUE(fast.ReadTokens(1));
  EXPECT_EQ(Prefill(c, "ced_prompt_tokens_total"), kSlowPrompt + 40);
  EXPECT_EQ(Prefill(c, "ced_requests_total{outcome=\"ok\"}"), 0)
      << "the second prompt computed only after the first one's K/V was acknowledged";

  const grpc::Status ss = slow.Finish();
  EXPECT_TRUE(ss.ok()) << ss.error_message();
  EXPECT_EQ(slow.tokens(), want_slow);
  const grpc::Status fs = fast.Finish();
  EXPECT_TRUE(fs.ok()) << fs.error_message();
  EXPECT_EQ(fast.tokens(), want_fast);
  // `done` still reports the transfer exposed after the compute: at least the
  // delayed tail, which is queued when the compute ends.
  EXPECT_GE(slow.last().timings().transfer_ms(), kSendDelayMs);
  EXPECT_EQ(Prefill(c, "ced_requests_total{outcome=\"ok\"}"), 2);
  std::string why;
  Ms took;
  EXPECT_TRUE(c.WaitNoKvInUse(Ms(10000), &took, &why)) << why;
}

// A prompt that finds no room in the prefill worker's cache while an earlier
// job's K/V is still in flight waits for that job's cache to come back
// instead of failing: two 300-token prompts do not fit in 2 MiB together
// (tiny: 4 KiB of global K/V per token), one does.
TEST(FaultPipelineTest, APromptWaitsForTheCacheOfAJobInTransfer) {
  const std::string model = MakeModelDir("tiny");
  FaultClusterOptions o = Topology(model, 1, 1);
  o.prefill_flags = {"--chunk",
                     "64",
                     "--kv-cache-mb",
                     "2",
                     "--fault-injection-for-testing",
                     "match=slow,send_delay_ms=300"};
  FaultCluster c(o);
  ASSERT_TRUE(c.ok());
  ColocatedEngine ref(model);
  const auto slow_prompt = Prompt(kSlowPrompt, 3);
  const auto next_prompt = Prompt(kSlowPrompt, 4);
  Stream slow(c.gateway().grpc(),
              FaultRequest(slow_prompt, 8, "slow-2", ced::v1::REPLAY_ON_PREFILL), Ms(120000));
  ASSERT_TRUE(slow.ReadTokens(1));
  const GenResult next = Generate(c.gateway().grpc(), FaultRequest(next_prompt, 8, "next-2"));
  EXPECT_TRUE(next.status.ok()) << next.status.error_message();
  EXPECT_EQ(next.tokens, ref.Run(next_prompt, 8));
  const grpc::Status ss = slow.Finish();
  EXPECT_TRUE(ss.ok()) << ss.error_message();
  EXPECT_EQ(slow.tokens(), ref.Run(slow_prompt, 8));
  EXPECT_EQ(Prefill(c, "ced_requests_total{outcome=\"error\"}"), 0);
  std::string why;
  Ms took;
  EXPECT_TRUE(c.WaitNoKvInUse(Ms(10000), &took, &why)) << why;
}

}  // namespace
}  // namespace ced::testing
