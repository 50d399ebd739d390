// Prefix cache end to end (DESIGN.md §1.6, issue 16): an agent session resends
// its whole conversation every turn. On a `ced cluster` (processes, K/V over
// UCX) the next turn reuses what both workers cached from the last one: the
// prefill worker computes only the new tokens (continuing the last turn's
// held sequence, or, with --held-sequences 0, after an encoder rebuild from
// the cached blocks), the decode worker receives only the blocks it lacks,
// the client's usage says how many prompt tokens were cached, and the tokens
// equal a fresh colocated run (exact replay).
#include <string>
#include <vector>

#include "engine/runtime/engine.h"
#include "tests/e2e/cluster_fixture.h"
#include "tests/e2e/e2e_util.h"

namespace ced::testing {
namespace {

double Metric(const LocalCluster& c, const std::string& who, const std::string& series) {
  return ScrapeMetric(c.addresses().at(who).at("metrics"), series).value_or(-1.0);
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class E2ePrefixCacheTest : public ::testing::TestWithParam<bool> {};

TEST_P(E2ePrefixCacheTest, NextTurnReusesBothWorkersCaches) {
  const bool held = GetParam();
  const std::string model = MakeModelDir("tiny");
  LocalCluster cluster(model,
                       {"--prefill", "1", "--decode", "1", "--held-sequences", held ? "8" : "0"});
  ASSERT_TRUE(cluster.ready()) << cluster.Log();
  ColocatedEngine colocated(model);
  ASSERT_TRUE(colocated.ok());
  const ModelConfig& config = colocated.engine().config();
  const int bs = colocated.engine().cache_stats().block_size;
  constexpr int kTokens = 24;

  auto run = [&](const std::vector<int32_t>& prompt, ced::v1::ReplayOn on) {
    ced::v1::GenerateRequest req = Request(prompt, kTokens, on);
    req.set_replay_mode(ced::v1::REPLAY_MODE_EXACT);
    return Generate(cluster.gateway(), req);
  };
  const double kv_in_0 = Metric(cluster, "decode-0", "ced_kv_transfer_bytes_total{direction=\"in\"}");

  // Turn 1: nothing cached.
  const std::vector<int32_t> turn1 = Prompt(200, 31);
  const GenResult r1 = run(turn1, ced::v1::REPLAY_ON_DECODE);
  ASSERT_TRUE(r1.status.ok()) << r1.status.error_message() << "\n" << cluster.Log();
  EXPECT_EQ(r1.tokens, colocated.Run(turn1, kTokens, ReplayMode::kExact));
  EXPECT_EQ(r1.last.usage().cached_prompt_tokens(), 0);
  const double kv_in_1 = Metric(cluster, "decode-0", "ced_kv_transfer_bytes_total{direction=\"in\"}");
  EXPECT_GE(kv_in_1 - kv_in_0, static_cast<double>(Engine::GlobalRangeBytes(config, 0, 200)));

  // Turn 2: turn 1, its answer and a tool result.
  const std::vector<int32_t> turn2 = Concat(Concat(turn1, r1.tokens), Prompt(50, 32));
  const int n2 = static_cast<int>(turn2.size());
  const GenResult r2 = run(turn2, ced::v1::REPLAY_ON_DECODE);
  ASSERT_TRUE(r2.status.ok()) << r2.status.error_message() << "\n" << cluster.Log();
  EXPECT_EQ(r2.tokens, colocated.Run(turn2, kTokens, ReplayMode::kExact))
      << "a resumed exact prefill must equal a fresh one";
  // The prefill worker holds turn 1's sequence (all 200 positions) or cached
  // its full blocks; the decode worker also the answer it decoded (all but
  // the last token's K/V), held whole or in full blocks.
  const int prefill_cached = held ? 200 : 200 / bs * bs;
  const int decode_cached = held ? 200 + kTokens - 1 : (200 + kTokens - 1) / bs * bs;
  EXPECT_EQ(r2.last.usage().cached_prompt_tokens(), prefill_cached);
  const double kv_in_2 = Metric(cluster, "decode-0", "ced_kv_transfer_bytes_total{direction=\"in\"}");
  const double moved = kv_in_2 - kv_in_1;
  EXPECT_GE(moved, static_cast<double>(Engine::GlobalRangeBytes(config, decode_cached, n2)));
  EXPECT_LT(moved, static_cast<double>(Engine::GlobalRangeBytes(config, 0, decode_cached)))
      << "the decode worker's cached blocks must not cross the wire again";
  EXPECT_EQ(Metric(cluster, "prefill-0", "ced_prefix_cache_hit_tokens_total"), prefill_cached);
  EXPECT_EQ(Metric(cluster, "prefill-0", "ced_prefix_cache_query_tokens_total"), 200 + n2);
  EXPECT_EQ(Metric(cluster, "decode-0", "ced_prefix_cache_hit_tokens_total"), decode_cached);
  EXPECT_GT(Metric(cluster, "decode-0", "ced_prefix_cache_blocks{state=\"cached\"}"), 0);
  EXPECT_EQ(Metric(cluster, "prefill-0", "ced_prefix_cache_continued_total"), held ? 1 : 0);
  EXPECT_EQ(Metric(cluster, "prefill-0", "ced_prefix_cache_held_sequences"), held ? 1 : 0);
  EXPECT_EQ(Metric(cluster, "decode-0", "ced_prefix_cache_continued_total"), held ? 1 : 0);

  // Turn 3, replay on the prefill worker, sampled: the same tokens as fresh.
  const std::vector<int32_t> turn3 = Concat(Concat(turn2, r2.tokens), Prompt(40, 33));
  ced::v1::GenerateRequest req = Request(turn3, kTokens, ced::v1::REPLAY_ON_PREFILL);
  req.set_replay_mode(ced::v1::REPLAY_MODE_EXACT);
  req.set_temperature(0.8f);
  req.set_seed(99);
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.seed = 99;
  const GenResult r3 = Generate(cluster.gateway(), req);
  ASSERT_TRUE(r3.status.ok()) << r3.status.error_message();
  EXPECT_EQ(r3.tokens, colocated.Run(turn3, kTokens, ReplayMode::kExact, sp));
  // The prefill worker cached turn 2's prompt; the decode worker also its
  // answer. Which one ran this prefill is the router's call (a short uncached
  // suffix is prefilled on the decode worker that holds the session).
  const bool local = r3.last.placement().local_prefill();
  const int decode_has = n2 + kTokens - 1;  // turn 2 and its answer, but the last token
  EXPECT_EQ(r3.last.usage().cached_prompt_tokens(),
            held ? (local ? decode_has : n2) : (local ? decode_has / bs * bs : n2 / bs * bs));
}

INSTANTIATE_TEST_SUITE_P(Held, E2ePrefixCacheTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "held" : "rebuilt"; });

}  // namespace
}  // namespace ced::testing
