// Issue 16: a migrated request reuses the prefix that is already stored.
// 1 prefill + 2 decode workers, prefix cache on, a shared Redis tier (a
// private redis-server). The decode worker running a stream is SIGKILLed
// mid-stream; the gateway re-issues prompt + streamed tokens to the other
// decode worker (tests/fault/migration_test.cc). What is reused then:
// - the prefill worker finds the prompt's blocks in its own prefix cache and
//   the blocks of tokens the victim generated in Redis (the victim wrote
//   each block as a decode step filled it, while the sequence ran: DESIGN.md
//   §2 "KV tiers"), and computes only the rest (usage.cached_prompt_tokens >
//   the prompt's full blocks);
// - the survivor decode worker, which never saw the request, reads nothing
//   from Redis at its reservation (a remote prefill follows): the prefill
//   worker sends it every block over the K/V transport, the reused ones
//   with the computed ones, so the prefix is read once, not twice in a row.
// Greedy with the router's replay placement, and sampled with the replay on
// the decode worker. Deterministic: the decode workers sleep before every
// step; the victim is SIGSTOPped once it has written two blocks of generated
// tokens, and stays stopped while the test waits for the prompt's blocks to
// be in Redis, so the stream cannot end before the kill.
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/kv/block_store.h"
#include "engine/runtime/engine.h"
#include "services/kv_store/local_redis.h"
#include "tests/common/missing_tool.h"
#include "tests/fault/fault_cluster.h"

namespace ced::testing {
namespace {

constexpr int kStepDelayMs = 10;
constexpr int kPromptTokens = 64;
constexpr int kTokens = 300;
constexpr int kKillAfterTokens = 40;

double Metric(Proc& p, const std::string& series) {
  return ScrapeMetric(p.metrics(), series).value_or(-1);
}

struct Case {
  const char* name;
  float temperature;
  ced::v1::ReplayOn replay_on;
};

class FaultMigrationTierTest : public ::testing::TestWithParam<Case> {};

TEST_P(FaultMigrationTierTest, MigratedRequestReusesStoredPrefix) {
  const Case& param = GetParam();
  if (services::FindRedisServer().empty()) {
    CED_SKIP_OR_FAIL_WHEN_MISSING("redis-server");
  }
  auto redis = services::LocalRedis::Start(64);
  ASSERT_TRUE(redis.ok()) << redis.status();
  const std::string model = MakeModelDir("tiny");
  ColocatedEngine ref(model);
  ASSERT_TRUE(ref.ok());
  const int bs = ref.engine().cache_stats().block_size;
  ASSERT_EQ(kPromptTokens % bs, 0) << "the prompt is whole blocks";
  const int prompt_blocks = kPromptTokens / bs;
  const double block_bytes = static_cast<double>(
      kKvBlockHeaderBytes + Engine::GlobalRangeBytes(ref.engine().config(), 0, bs));

  FaultClusterOptions o = Topology(model, 1, 2);
  const std::vector<std::string> tiers = {"--prefix-cache", "true", "--kv-store", (*redis)->url()};
  o.prefill_flags = tiers;
  o.decode_flags = tiers;
  o.decode_flags.insert(o.decode_flags.end(),
                        {"--step-delay-ms-for-testing", std::to_string(kStepDelayMs)});
  FaultCluster c(o);
  ASSERT_TRUE(c.ok());
  const auto prompt = Prompt(kPromptTokens, 16);
  ced::v1::GenerateRequest req = FaultRequest(prompt, kTokens, "tier-migrate-1", param.replay_on);
  SamplingParams sampling;
  if (param.temperature > 0) {
    req.set_temperature(param.temperature);
    req.set_seed(4321);
    sampling.temperature = param.temperature;
    sampling.seed = 4321;
  }
  const std::vector<int32_t> want = ref.Run(prompt, kTokens, ReplayMode::kBounded, sampling);

  Stream stream(c.gateway().grpc(), req, Ms(120000));
  ASSERT_TRUE(stream.ReadTokens(kKillAfterTokens));
  const double r0 =
      ScrapeMetric(c.decode(0).metrics(), "ced_decode_running_sequences").value_or(-1);
  const double r1 =
      ScrapeMetric(c.decode(1).metrics(), "ced_decode_running_sequences").value_or(-1);
  ASSERT_EQ(r0 + r1, 1) << "the stream is running on exactly one decode worker";
  const int victim = r0 == 1 ? 0 : 1, survivor = 1 - victim;
  // The victim writes the prompt's blocks (it does not know the prefill
  // worker wrote them) and each block of generated tokens once it is final,
  // while the sequence still runs (not when it ends).
  constexpr int kGeneratedBlocks = 2;
  Proc& v = c.decode(victim);
  bool running = true;
  ASSERT_TRUE(WaitUntil(
      [&] {
        running = Metric(v, "ced_decode_running_sequences") == 1;
        return !running || Metric(v, "ced_kv_tier_written_bytes_total{tier=\"redis\"}") >=
                               block_bytes * (prompt_blocks + kGeneratedBlocks);
      },
      Ms(30000)))
      << v.Log();
  ASSERT_TRUE(running) << "the sequence ended before its generated blocks were in Redis\n"
                       << v.Log();
  v.Signal(SIGSTOP);

  // The prefill worker released its sequence once the K/V was sent, and wrote
  // the prompt's full blocks to Redis behind the request.
  Proc& prefill = c.prefill(0);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Metric(prefill, "ced_kv_tier_written_bytes_total{tier=\"redis\"}") >=
               block_bytes * prompt_blocks;
      },
      Ms(30000)))
      << prefill.Log();
  EXPECT_EQ(Metric(prefill, "ced_kv_tier_written_bytes_total{tier=\"redis\"}"),
            block_bytes * prompt_blocks);
  const double prefill_hits_before = Metric(prefill, "ced_prefix_cache_hit_tokens_total");
  EXPECT_EQ(prefill_hits_before, 0) << "the first prefill found nothing cached";
  EXPECT_EQ(Metric(c.decode(survivor), "ced_prefix_cache_query_tokens_total"), 0)
      << "the survivor has not seen the request yet";
  const size_t before_kill = stream.tokens().size();
  ASSERT_LT(before_kill, static_cast<size_t>(kTokens)) << "the stream finished before the kill";
  c.decode(victim).Kill();

  const grpc::Status s = stream.Finish();
  ASSERT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
  EXPECT_EQ(stream.tokens(), want) << "the migrated stream differs from the colocated engine";
  EXPECT_EQ(stream.last().usage().completion_tokens(), kTokens);
  const ced::v1::Placement& placement = stream.last().placement();
  EXPECT_EQ(placement.migrations(), 1);
  EXPECT_EQ(placement.decode_worker_id(), c.decode_id(survivor));
  EXPECT_FALSE(placement.local_prefill());

  // Neither the prompt nor the victim's generated blocks were recomputed: the
  // prefill worker's prefix cache held the prompt's full blocks, Redis the
  // generated ones (usage counts what the worker that ran the prefill
  // skipped).
  const int cached = stream.last().usage().cached_prompt_tokens();
  EXPECT_GE(cached, kPromptTokens + kGeneratedBlocks * bs)
      << "the migrated request recomputed the blocks the victim had generated";
  EXPECT_EQ(cached % bs, 0);
  EXPECT_EQ(Metric(prefill, "ced_prefix_cache_hit_tokens_total") - prefill_hits_before, cached);
  EXPECT_EQ(Metric(prefill, "ced_kv_tier_hit_blocks_total{tier=\"redis\"}"),
            cached / bs - prompt_blocks);
  // ... and the survivor got them from the prefill worker, not from Redis:
  // every token of its prompt came over the K/V transport.
  Proc& d = c.decode(survivor);
  EXPECT_EQ(Metric(d, "ced_kv_tier_hit_blocks_total{tier=\"redis\"}"), 0);
  EXPECT_EQ(Metric(d, "ced_kv_tier_read_seconds_count{tier=\"redis\"}"), 0)
      << "a reservation with a remote prefill reads no tier";
  EXPECT_EQ(Metric(d, "ced_prefix_cache_hit_tokens_total"), 0);
  EXPECT_GE(Metric(d, "ced_kv_transfer_bytes_total{direction=\"in\"}"),
            static_cast<double>(Engine::GlobalRangeBytes(
                ref.engine().config(), 0, kPromptTokens + static_cast<int>(before_kill))))
      << "the reused blocks were not sent to the survivor";
  EXPECT_EQ(Metric(d, "ced_kv_tier_errors_total{tier=\"redis\"}"), 0);

  const std::string scenario = std::string("migration_tier_") + param.name;
  Figure(scenario, "tokens_before_kill", static_cast<double>(before_kill));
  Figure(scenario, "cached_prompt_tokens", stream.last().usage().cached_prompt_tokens());
  Figure(scenario, "survivor_redis_hit_blocks",
         Metric(d, "ced_kv_tier_hit_blocks_total{tier=\"redis\"}"));
  Figure(scenario, "survivor_redis_miss_blocks",
         Metric(d, "ced_kv_tier_miss_blocks_total{tier=\"redis\"}"));
  Figure(scenario, "survivor_kv_in_bytes",
         Metric(d, "ced_kv_transfer_bytes_total{direction=\"in\"}"));
  Figure(scenario, "prefill_kv_out_bytes",
         Metric(prefill, "ced_kv_transfer_bytes_total{direction=\"out\"}"));
  Figure(scenario, "prefill_redis_miss_blocks",
         Metric(prefill, "ced_kv_tier_miss_blocks_total{tier=\"redis\"}"));
  std::string why;
  EXPECT_TRUE(c.WaitNoKvInUse(Ms(10000), nullptr, &why)) << why;
}

INSTANTIATE_TEST_SUITE_P(
    Placement, FaultMigrationTierTest,
    ::testing::Values(Case{"greedy", 0.0f, ced::v1::REPLAY_ON_AUTO},
                      Case{"sampled_replay_on_decode", 0.8f, ced::v1::REPLAY_ON_DECODE}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ced::testing
