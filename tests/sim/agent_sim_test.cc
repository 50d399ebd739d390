#include "bench/sim/agent_sim.h"

#include "engine/model/presets.h"
#include "gtest/gtest.h"

namespace ced::sim {
namespace {

AgentSimOptions Fleet(const std::string& preset, int prefill, int decode) {
  AgentSimOptions o;
  o.model = *PresetConfig(preset);
  o.gpu = *GpuByName("h100");
  o.prefill_instances = prefill;
  o.decode_instances = decode;
  o.prefill_gpus = 4;
  o.decode_gpus = 4;
  o.trace.sessions = 6;
  o.trace.turns = 5;
  o.trace.first_prompt_tokens = 2048;
  o.trace.tool_result_mean = 1024;
  o.trace.tool_result_cv = 0.5;
  o.trace.output_tokens = 32;
  o.trace.think_time_s = 0.5;
  return o;
}

TEST(AgentSimTest, DeterministicAndEveryTurnCompletes) {
  const AgentSimOptions o = Fleet("llama3-70b-ced", 1, 1);
  auto a = RunAgentSimulation(o);
  auto b = RunAgentSimulation(o);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->ToString(), b->ToString());
  EXPECT_EQ(a->failed, 0);
  ASSERT_EQ(a->turns.size(), 30u);
  ASSERT_EQ(a->by_turn.size(), 5u);
  for (const AgentTurnResult& t : a->turns) {
    EXPECT_TRUE(t.completed);
    EXPECT_GT(t.ttft_s(), 0);
    EXPECT_GE(t.finish_s, t.first_token_s);
  }
}

TEST(AgentSimTest, TurnsFollowEachOtherAfterTheThinkTime) {
  const AgentSimOptions o = Fleet("llama3-70b-ced", 1, 1);
  auto s = RunAgentSimulation(o);
  ASSERT_TRUE(s.ok());
  for (size_t i = 1; i < s->turns.size(); ++i) {
    const AgentTurnResult& prev = s->turns[i - 1];
    const AgentTurnResult& t = s->turns[i];
    if (t.session != prev.session) continue;
    EXPECT_NEAR(t.arrival_s, prev.finish_s + o.trace.think_time_s, 1e-9);
    EXPECT_EQ(t.reusable_tokens, prev.prompt_tokens + prev.output_tokens);
  }
}

TEST(AgentSimTest, OneWorkerPairHitsThePreviousPromptAndCutsTtft) {
  AgentSimOptions o = Fleet("llama3-70b-ced", 1, 1);
  auto with = RunAgentSimulation(o);
  o.held_sequences = 0;
  auto blocks_only = RunAgentSimulation(o);
  o.prefix_cache = false;
  auto without = RunAgentSimulation(o);
  ASSERT_TRUE(with.ok() && blocks_only.ok() && without.ok());
  for (size_t i = 0; i < with->turns.size(); ++i) {
    const AgentTurnResult& t = with->turns[i];
    if (t.turn == 0) {
      EXPECT_EQ(t.cached_tokens, 0);
      continue;
    }
    // The prefill instance holds the previous prompt's sequence (6 sessions,
    // 8 held), or, holding none, cached its full blocks (its answer was
    // decoded elsewhere).
    const int64_t prev_prompt = t.reusable_tokens - 32;
    EXPECT_EQ(t.cached_tokens, prev_prompt) << "session " << t.session;
    EXPECT_EQ(blocks_only->turns[i].cached_tokens, prev_prompt / 16 * 16);
    EXPECT_LT(t.transferred_tokens, t.prompt_tokens) << "the decode instance holds the prefix";
  }
  EXPECT_LT(with->ttft_later_p50_s, blocks_only->ttft_later_p50_s)
      << "continuing the held windows skips the encoder rebuild";
  for (const AgentTurnResult& t : without->turns) EXPECT_EQ(t.cached_tokens, 0);
  EXPECT_GT(with->hit_rate_later, 0.9);
  EXPECT_EQ(without->hit_rate_later, 0);
  EXPECT_LT(with->ttft_later_p50_s, without->ttft_later_p50_s / 2);
  EXPECT_EQ(with->by_turn[0].ttft_p50_s, without->by_turn[0].ttft_p50_s)
      << "the first turn has nothing to reuse";
}

TEST(AgentSimTest, ATinyCacheEvictsAndLosesHits) {
  AgentSimOptions o = Fleet("llama3-70b-ced", 1, 1);
  auto big = RunAgentSimulation(o);
  // Room for about two sessions' contexts per instance.
  o.kv_cache_bytes = 2.5 * 8000 * big->kv_bytes_per_token;
  auto small = RunAgentSimulation(o);
  ASSERT_TRUE(big.ok() && small.ok()) << small.status();
  EXPECT_EQ(big->evicted_blocks, 0);
  EXPECT_GT(small->evicted_blocks, 0);
  EXPECT_LT(small->hit_rate_later, big->hit_rate_later);
}

// The decode instances run the worker's scheduler: max_batch bounds the
// running batch. With one slot every decode step makes one token, so the
// steps cover every turn's answer after its first token.
TEST(AgentSimTest, TheSchedulersMaxBatchCapsTheRunningBatch) {
  AgentSimOptions o = Fleet("llama3-70b-ced", 1, 1);
  o.trace.stagger_s = 0;  // every session at once
  auto wide = RunAgentSimulation(o);
  o.max_batch = 2;
  auto two = RunAgentSimulation(o);
  o.max_batch = 1;
  auto one = RunAgentSimulation(o);
  ASSERT_TRUE(wide.ok() && two.ok() && one.ok()) << one.status();
  EXPECT_GT(wide->peak_running, 2);
  EXPECT_EQ(two->peak_running, 2);
  EXPECT_EQ(one->peak_running, 1);
  int64_t answer_steps = 0;  // tokens after the prefill instance's first one
  for (const AgentTurnResult& t : one->turns) {
    EXPECT_TRUE(t.completed);
    answer_steps += t.output_tokens - 1;
  }
  EXPECT_EQ(one->decode_steps, answer_steps);
  EXPECT_LT(wide->decode_steps, answer_steps);
  EXPECT_GT(one->makespan_s, wide->makespan_s) << "answers wait for the one slot";
  o.max_batch = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(RunAgentSimulation(o).status()));
}

// A one-token answer is made by the prefill instance; its K/V still lands on
// the decode instance (which caches it) and ends there without a decode step.
TEST(AgentSimTest, OneTokenAnswersEndWhenTheirKvLands) {
  AgentSimOptions o = Fleet("llama3-70b-ced", 1, 1);
  o.trace.output_tokens = 1;
  auto s = RunAgentSimulation(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->failed, 0);
  EXPECT_EQ(s->decode_steps, 0);
  for (const AgentTurnResult& t : s->turns) {
    EXPECT_TRUE(t.completed);
    EXPECT_GT(t.finish_s, t.first_token_s) << "after the transfer";
  }
  EXPECT_GT(s->hit_rate_later, 0.9);
}

// Two prefill and two decode instances, interleaved sessions: cache-aware
// routing (the router's default) sends each turn where the session's prefix
// is (the instances' block reports and the policy's predictions in the
// BlockIndex); load routing spreads turns by load alone and often lands on
// the instance that lacks the prefix.
TEST(AgentSimTest, CacheAwareRoutingFindsTheSessionsPrefixOnAFleet) {
  AgentSimOptions o = Fleet("llama3-70b-ced", 2, 2);
  o.trace.sessions = 8;
  o.trace.turns = 6;
  o.trace.think_time_s = 0.3;  // busy enough that load routing spreads the turns
  ASSERT_EQ(o.routing, router::Routing::kCacheAware) << "the router's default";
  auto aware = RunAgentSimulation(o);
  auto again = RunAgentSimulation(o);
  o.routing = router::Routing::kLoad;
  auto load = RunAgentSimulation(o);
  ASSERT_TRUE(aware.ok() && again.ok() && load.ok()) << aware.status() << load.status();
  EXPECT_EQ(aware->ToString(), again->ToString());
  EXPECT_EQ(aware->failed, 0);
  EXPECT_EQ(load->failed, 0);
  EXPECT_EQ(aware->evicted_blocks, 0) << "misses come from placement alone";
  EXPECT_GE(aware->hit_rate_later, 0.95);
  EXPECT_LT(load->hit_rate_later, aware->hit_rate_later - 0.1);
  EXPECT_LT(aware->ttft_later_p50_s, load->ttft_later_p50_s);
  EXPECT_LT(aware->ttft_later_p90_s, load->ttft_later_p90_s);
  // Both placements saw both instances of each pool.
  for (const auto* s : {&*aware, &*load}) {
    int local = 0;
    for (const AgentTurnResult& t : s->turns) local += t.local_prefill ? 1 : 0;
    EXPECT_EQ(local, 0) << "replay on prefill: the pool prefills";
  }
}

// Colocated (one machine per prefill + decode pair, as `ced cluster` on one
// host): a prefill runs slower while its neighbour decodes and the other way
// round. Six sessions overlap and pay for it; one session never computes on
// both instances at once (its answer is decoded before its next turn comes)
// and is unchanged.
TEST(AgentSimTest, ColocatedInstancesSlowEachOtherOnlyWhenBothCompute) {
  AgentSimOptions o = Fleet("llama3-70b-ced", 1, 1);
  o.gpu.prefill_colocated_slowdown = 2;
  o.gpu.decode_colocated_slowdown = 1.5;
  auto apart = RunAgentSimulation(o);
  o.colocated = true;
  auto together = RunAgentSimulation(o);
  ASSERT_TRUE(apart.ok() && together.ok());
  EXPECT_GT(together->ttft_later_p50_s, apart->ttft_later_p50_s);
  EXPECT_GT(together->makespan_s, apart->makespan_s);
  EXPECT_EQ(together->failed, 0);
  double ttft_apart = 0, ttft_together = 0;
  for (const AgentTurnResult& t : apart->turns) ttft_apart += t.ttft_s();
  for (const AgentTurnResult& t : together->turns) ttft_together += t.ttft_s();
  EXPECT_GT(ttft_together, ttft_apart);

  o.trace.sessions = 1;
  o.colocated = false;
  auto alone = RunAgentSimulation(o);
  o.colocated = true;
  auto alone_colocated = RunAgentSimulation(o);
  ASSERT_TRUE(alone.ok() && alone_colocated.ok());
  EXPECT_EQ(alone->ToString(), alone_colocated->ToString());
}

// refuse_when_full, as the gateway with ced-loadgen: a turn no decode
// instance has room for is refused and its session ends (the next prompt
// would need its answer); by default it waits for the room instead.
TEST(AgentSimTest, TurnsWithoutDecodeRoomAreRefusedOrWait) {
  AgentSimOptions o = Fleet("llama3-70b-ced", 1, 1);
  o.trace.sessions = 2;
  o.trace.turns = 3;
  o.trace.first_prompt_tokens = 1024;
  o.trace.tool_result_cv = 0;
  o.trace.stagger_s = 0;
  o.prefix_cache = false;  // every turn reserves its whole prompt + answer
  const double per_token = RunAgentSimulation(o)->kv_bytes_per_token;
  // Room for both first turns (2 x 1,056 tokens) and for the last turn alone
  // (3,168), not for both sessions' second turns (2 x 2,112).
  o.kv_cache_bytes = 3200 * per_token;
  const auto waited = RunAgentSimulation(o);
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ(waited->failed, 0);
  EXPECT_EQ(waited->refused, 0);

  o.refuse_when_full = true;
  const auto refused = RunAgentSimulation(o);
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_GE(refused->refused, 1);
  EXPECT_GT(refused->failed, refused->refused);  // the refused session's later turns too
  int completed = 0;
  for (const AgentTurnResult& t : refused->turns) {
    completed += t.completed;
    if (!t.refused) continue;
    EXPECT_GT(t.turn, 0);  // the first turns fit
    for (const AgentTurnResult& later : refused->turns) {
      if (later.session == t.session && later.turn >= t.turn) {
        EXPECT_FALSE(later.completed);
      }
    }
  }
  EXPECT_EQ(completed + refused->failed, 6);
  EXPECT_EQ(RunAgentSimulation(o)->ToString(), refused->ToString());

  o.reserve_retries = -1;
  EXPECT_FALSE(RunAgentSimulation(o).ok());
}

TEST(AgentSimTest, RejectsBadOptions) {
  AgentSimOptions o = Fleet("small", 1, 1);
  o.trace.turns = 20;  // past small's 8192 positions
  EXPECT_TRUE(absl::IsInvalidArgument(RunAgentSimulation(o).status()));
  o = Fleet("small", 0, 1);
  EXPECT_TRUE(absl::IsInvalidArgument(RunAgentSimulation(o).status()));
  o = Fleet("small", 1, 1);
  o.trace.sessions = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(RunAgentSimulation(o).status()));
  o = Fleet("small", 1, 1);
  o.held_sequences = -1;
  EXPECT_TRUE(absl::IsInvalidArgument(RunAgentSimulation(o).status()));
}

}  // namespace
}  // namespace ced::sim
