#include "bench/sim/prefix_cache_model.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

#include "bench/sim/cost_model.h"
#include "engine/model/presets.h"
#include "gtest/gtest.h"

namespace ced::sim {
namespace {

TEST(PrefixCacheModelTest, FullBlocksAtMostPromptMinusOne) {
  PrefixCacheModel c(100, 16);
  EXPECT_EQ(c.CachedTokens(1, 500), 0);
  c.Store(1, 200);  // 12 full blocks
  EXPECT_EQ(c.cached_blocks(), 12);
  EXPECT_EQ(c.CachedTokens(1, 500), 192);
  EXPECT_EQ(c.CachedTokens(1, 193), 192);
  EXPECT_EQ(c.CachedTokens(1, 192), 176) << "the last prompt token is always computed";
  EXPECT_EQ(c.CachedTokens(2, 500), 0) << "another session shares nothing";
  c.Store(1, 100);  // shorter: nothing dropped
  EXPECT_EQ(c.cached_blocks(), 12);
}

TEST(PrefixCacheModelTest, EvictsTheLeastRecentlyUsedSessionsTailFirst) {
  PrefixCacheModel c(10, 16);
  c.Store(1, 4 * 16);
  c.Store(2, 4 * 16);
  c.Touch(1);  // 2 is now the least recently used
  c.Store(3, 4 * 16);  // needs 2 more blocks than free
  EXPECT_EQ(c.cached_blocks(), 10);
  EXPECT_EQ(c.evicted_blocks(), 2);
  EXPECT_EQ(c.CachedTokens(2, 1000), 2 * 16) << "session 2 lost its tail";
  EXPECT_EQ(c.CachedTokens(1, 1000), 4 * 16);
  EXPECT_EQ(c.CachedTokens(3, 1000), 4 * 16);
}

TEST(PrefixCacheModelTest, ReservationsEvictAndFailOnlyWhenTooBig) {
  PrefixCacheModel c(10, 16);
  c.Store(1, 8 * 16);
  EXPECT_TRUE(c.Reserve(5));
  EXPECT_EQ(c.reserved_blocks(), 5);
  EXPECT_EQ(c.cached_blocks(), 5) << "cached blocks make room for running ones";
  EXPECT_FALSE(c.Reserve(6)) << "more than the pool minus reservations";
  EXPECT_EQ(c.reserved_blocks(), 5);
  c.Release(5);
  EXPECT_EQ(c.free_blocks(), 5);
  c.Store(2, 20 * 16);  // larger than the pool: keeps what fits
  EXPECT_LE(c.cached_blocks(), 10);
  EXPECT_GE(c.free_blocks(), 0);
}

// The events the agent simulator reports to the router's block index:
// stored blocks extend a session's chain, evictions take its tail.
TEST(PrefixCacheModelTest, ListenerSeesStoredAndEvictedBlockRanges) {
  PrefixCacheModel c(10, 16);
  std::vector<std::string> events;
  c.set_block_listener([&](int session, int64_t begin, int64_t end, bool stored) {
    events.push_back(absl::StrCat(stored ? "+" : "-", session, ":", begin, "-", end));
  });
  c.Store(1, 4 * 16 + 5);  // 4 full blocks
  c.Store(1, 6 * 16);      // 2 more
  c.Store(1, 3 * 16);      // shorter: nothing
  c.Store(2, 3 * 16);
  c.Touch(1);                 // 2 is the least recently used
  ASSERT_TRUE(c.Reserve(3));  // 1 free: evicts 2 of session 2's blocks
  c.Store(3, 16);             // evicts session 2's last block
  EXPECT_EQ(events,
            (std::vector<std::string>{"+1:0-4", "+1:4-6", "+2:0-3", "-2:1-3", "-2:0-1", "+3:0-1"}));
  EXPECT_EQ(c.evicted_blocks(), 3);
}

// Held sequences (a prefill worker's --held-sequences): the session's next
// prompt continues the held one unless the cached blocks reach further; at
// most max_held are kept; their blocks are in use, so eviction takes other
// sessions' first and drops held sequences only when nothing else is left.
TEST(PrefixCacheModelTest, HeldSequencesAreContinuedAndGiveWayLast) {
  PrefixCacheModel c(12, 16);
  c.set_max_held(2);
  c.Store(1, 50);  // 3 full blocks
  c.Hold(1, 50);
  EXPECT_EQ(c.HeldTokens(1, 200), 50);
  EXPECT_EQ(c.HeldTokens(1, 50), 0) << "the last prompt token is always computed";
  EXPECT_EQ(c.HeldTokens(2, 200), 0);
  c.Store(1, 100);  // blocks now reach 96 > 50: the blocks win
  EXPECT_EQ(c.HeldTokens(1, 200), 0);
  c.Hold(1, 100);
  EXPECT_EQ(c.HeldTokens(1, 200), 100);
  c.Store(2, 64);
  c.Hold(2, 64);
  c.Store(3, 32);
  c.Hold(3, 32);  // the third: session 1's (the oldest) is dropped
  EXPECT_EQ(c.held_sequences(), 2);
  EXPECT_EQ(c.HeldTokens(1, 200), 0);
  EXPECT_EQ(c.HeldTokens(2, 200), 64);
  c.TakeHeld(2);
  EXPECT_EQ(c.HeldTokens(2, 200), 0);
  c.Hold(2, 64);
  // 6 + 4 + 2 = 12 blocks cached, none free: a reservation of 7 evicts
  // session 1 (not held) first, then drops the older held sequence (3) and
  // takes its blocks; session 2 stays held with its blocks.
  ASSERT_TRUE(c.Reserve(7));
  EXPECT_EQ(c.CachedTokens(1, 200), 0);
  EXPECT_EQ(c.CachedTokens(3, 200), 16);
  EXPECT_EQ(c.HeldTokens(3, 200), 0);
  EXPECT_EQ(c.HeldTokens(2, 200), 64);
  EXPECT_EQ(c.CachedTokens(2, 200), 64);
  EXPECT_EQ(c.held_sequences(), 1);
}

TEST(ResumeCostTest, EncoderStartFollowsSection16) {
  ModelConfig c = *PresetConfig("small");  // W = R = 64, E = 6 of 12
  EXPECT_EQ(ResumeEncoderStart(c, 1000, 0), 0);
  EXPECT_EQ(ResumeEncoderStart(c, 1000, 960), 1000 - 64 - 64);  // min(P, N - R_d) - R_e
  EXPECT_EQ(ResumeEncoderStart(c, 1000, 512), 512 - 64);
  EXPECT_EQ(ResumeEncoderStart(c, 1000, 32), 0);
  c.num_encoder_layers = c.num_layers;  // decoder-only: R_d = 1
  EXPECT_EQ(ResumeEncoderStart(c, 1000, 992), 992 - 64);
}

TEST(ResumeCostTest, AContinuedHeldSequenceSkipsTheRebuild) {
  ModelConfig c = *PresetConfig("small");  // W = R = 64
  EXPECT_EQ(ResumeEncoderStart(c, 1000, 900, true), 900);
  EXPECT_EQ(ResumeEncoderStart(c, 1000, 960, true), ResumeEncoderStart(c, 1000, 960))
      << "the replay needs h_E rows before P: rebuilt";
  EXPECT_EQ(ResumeEncoderStart(c, 1000, 0, true), 0);
  CostModel::Options o;
  o.config = c;
  o.gpu = *GpuByName("h100");
  auto cost = *CostModel::Create(o);
  EXPECT_LT(ResumedPrefillSeconds(*cost, 8000, 7000, false, 1, true),
            ResumedPrefillSeconds(*cost, 8000, 7000, false, 1, false));
  c.num_encoder_layers = c.num_layers;  // decoder-only: always continued
  EXPECT_EQ(ResumeEncoderStart(c, 1000, 999, true), 999);
}

TEST(ResumeCostTest, FreshEqualsPrefillAndHitsCostLess) {
  CostModel::Options o;
  o.config = *PresetConfig("llama3-70b-ced");
  o.gpu = *GpuByName("h100");
  auto cost = *CostModel::Create(o);
  EXPECT_DOUBLE_EQ(ResumedPrefillSeconds(*cost, 8192, 0, true, 4),
                   cost->PrefillSeconds(8192, true, 4));
  const double fresh = ResumedPrefillSeconds(*cost, 8192, 0, true, 4);
  const double half = ResumedPrefillSeconds(*cost, 8192, 4096, true, 4);
  const double most = ResumedPrefillSeconds(*cost, 8192, 7168, true, 4);
  EXPECT_LT(half, fresh);
  EXPECT_LT(most, half);
  EXPECT_LT(most, fresh / 4) << "a 1k-token suffix on an 8k prompt";
  const Work w = ResumedPrefillWork(*cost, 8192, 7168, true);
  EXPECT_GT(w.flops, 0);
}

}  // namespace
}  // namespace ced::sim
