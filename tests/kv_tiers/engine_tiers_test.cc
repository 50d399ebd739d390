// The KV tiers under a real engine: a session evicted from the hot cache is
// reloaded from host memory, disk or a shared store (not recomputed), and the
// resumed request equals the full forward (exact replay); what is at rest per
// token is the global K/V of `ced model info` plus one fixed header a block.
#include <unistd.h>

#include <filesystem>

#include "engine/accounting/accounting.h"
#include "engine/kv/host_tier.h"
#include "tests/engine/test_util.h"

namespace ced::testing {
namespace {

constexpr int kSteps = 12;

struct Resumed {
  GreedyRun run;
  int cached = -1;
};

Resumed RunPrompt(Engine& e, const std::vector<int32_t>& prompt, int steps) {
  Resumed out;
  auto seq =
      e.CreateSequenceForPrompt(prompt, static_cast<int>(prompt.size()) + steps, &out.cached);
  EXPECT_TRUE(seq.ok()) << seq.status();
  if (!seq.ok()) return out;
  PrefillOptions po;
  po.replay = ReplayMode::kExact;
  po.chunk_tokens = 64;
  auto pre = e.Prefill(*seq, prompt, po);
  EXPECT_TRUE(pre.ok()) << pre.status();
  if (!pre.ok()) return out;
  EXPECT_EQ(pre->cached_tokens, out.cached);
  out.run = DecodeGreedy(e, *seq, std::move(pre->logits), steps);
  EXPECT_TRUE(e.ReleaseSequence(*seq).ok());
  return out;
}

std::unique_ptr<Engine> TieredEngine(const std::string& preset, EngineOptions o) {
  auto e = Engine::CreateWithWeights(o, LoadTestModel(preset));
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

const KvTierStats* Tier(const std::vector<KvTierStats>& all, const std::string& name) {
  for (const KvTierStats& s : all) {
    if (s.tier == name) return &s;
  }
  return nullptr;
}

std::string FreshDir(const std::string& name) {
  const std::string d =
      ::testing::TempDir() + "/engine_tiers_" + std::to_string(getpid()) + "_" + name;
  std::filesystem::remove_all(d);
  return d;
}

class EngineTiersTest : public ::testing::TestWithParam<std::string> {};

// Turn 1 fills the cache; everything is evicted (to the host tier); turn 2
// (turn 1 + more) gets P from the tier and equals the full forward.
TEST_P(EngineTiersTest, EvictedSessionIsReloadedFromHostMemory) {
  EngineOptions o;
  o.kv_cache_bytes = 64ll << 20;
  o.kv_host_bytes = 64ll << 20;
  auto e = TieredEngine(GetParam(), o);
  ASSERT_NE(e, nullptr);
  const int bs = e->cache_stats().block_size;
  const auto turn1 = RandomPrompt(230, 41);
  Resumed r1 = RunPrompt(*e, turn1, kSteps);
  EXPECT_EQ(r1.cached, 0);
  const int cached_blocks = e->cache_stats().cached_blocks;
  ASSERT_GT(cached_blocks, 0);
  EXPECT_EQ(e->EvictCachedBlocks(), cached_blocks);
  e->FlushKvTiers();
  EXPECT_EQ(e->cache_stats().cached_blocks, 0);
  EXPECT_EQ(e->CachedPrefixTokens(turn1), 0) << "nothing left in the hot cache";
  const KvTierStats* host = Tier(e->kv_tier_stats(), "host");
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->resident_blocks, cached_blocks);

  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), r1.run.tokens.begin(), r1.run.tokens.end());
  const auto tool = RandomPrompt(37, 42);
  turn2.insert(turn2.end(), tool.begin(), tool.end());
  Resumed r2 = RunPrompt(*e, turn2, kSteps);
  // Turn 1's prompt and its answer (all but the last token's K/V), full blocks.
  const int expected = (230 + kSteps - 1) / bs * bs;
  EXPECT_EQ(r2.cached, expected) << "P comes from the host tier";
  EXPECT_EQ(Tier(e->kv_tier_stats(), "host")->hit_blocks, expected / bs);
  ExpectMatchesFullForward(*e, turn2, r2.run, 1e-5);
}

// The operator's flush of a cache larger than the tiers' write queue: one
// eviction of everything may drop the spills the queue cannot hold (whether it
// does depends on how fast the writer drains); FlushPrefixCache evicts in
// batches of at most half the queue and waits for each, so the host tier gets
// every block and the next turn finds the whole prefix there.
TEST_P(EngineTiersTest, FlushOfACacheLargerThanTheWriteQueueDropsNothing) {
  const auto turn1 = RandomPrompt(230, 45);
  int blocks = 0;
  int64_t block_bytes = 0;
  {  // how many blocks the turn caches, and their size
    EngineOptions o;
    o.kv_cache_bytes = 64ll << 20;
    o.kv_host_bytes = 64ll << 20;
    auto probe = TieredEngine(GetParam(), o);
    ASSERT_NE(probe, nullptr);
    RunPrompt(*probe, turn1, kSteps);
    blocks = probe->cache_stats().cached_blocks;
    block_bytes = Engine::GlobalRangeBytes(probe->config(), 0, probe->cache_stats().block_size);
  }
  ASSERT_GT(blocks, 4);
  EngineOptions o;
  o.kv_cache_bytes = 64ll << 20;
  o.kv_host_bytes = 64ll << 20;
  o.kv_tier_queue_bytes = 2 * block_bytes;  // the queue holds 2 of the blocks
  auto e = TieredEngine(GetParam(), o);
  ASSERT_NE(e, nullptr);
  const int bs = e->cache_stats().block_size;
  Resumed r1 = RunPrompt(*e, turn1, kSteps);
  EXPECT_EQ(e->FlushPrefixCache(), blocks);
  e->FlushKvTiers();
  EXPECT_EQ(e->cache_stats().cached_blocks, 0);
  const KvTierStats* host = Tier(e->kv_tier_stats(), "host");
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(host->dropped_writes, 0);
  EXPECT_EQ(host->resident_blocks, blocks);
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), r1.run.tokens.begin(), r1.run.tokens.end());
  const auto tool = RandomPrompt(20, 46);
  turn2.insert(turn2.end(), tool.begin(), tool.end());
  Resumed r2 = RunPrompt(*e, turn2, kSteps);
  EXPECT_EQ(r2.cached, (230 + kSteps - 1) / bs * bs) << "the whole prefix from the host tier";
  ExpectMatchesFullForward(*e, turn2, r2.run, 1e-5);
}

// Disk only: the blocks survive the engine (a worker restart) and a new
// engine on the same directory resumes from them.
TEST_P(EngineTiersTest, SessionOutlivesTheEngineOnDisk) {
  const std::string dir = FreshDir("disk_" + GetParam());
  EngineOptions o;
  o.kv_disk_dir = dir;
  o.kv_disk_bytes = 256ll << 20;
  const auto turn1 = RandomPrompt(170, 43);
  int blocks = 0;
  {
    auto e = TieredEngine(GetParam(), o);
    ASSERT_NE(e, nullptr);
    RunPrompt(*e, turn1, 2);
    blocks = e->EvictCachedBlocks();
    ASSERT_GT(blocks, 0);
  }  // destruction finishes the queued writes
  auto e = TieredEngine(GetParam(), o);
  ASSERT_NE(e, nullptr);
  const int bs = e->cache_stats().block_size;
  EXPECT_EQ(Tier(e->kv_tier_stats(), "disk")->resident_blocks, blocks);
  std::vector<int32_t> turn2(turn1.begin(), turn1.begin() + 150);
  const auto more = RandomPrompt(30, 44);
  turn2.insert(turn2.end(), more.begin(), more.end());
  Resumed r = RunPrompt(*e, turn2, kSteps);
  EXPECT_EQ(r.cached, 150 / bs * bs);
  ExpectMatchesFullForward(*e, turn2, r.run, 1e-5);
  std::filesystem::remove_all(dir);
}

// A shared store (here an in-process one standing in for Redis): engine A
// writes its finished sequence's blocks; engine B, empty, resumes from them.
TEST_P(EngineTiersTest, AnotherEngineResumesFromTheSharedStore) {
  HostBlockStore::Options so;
  so.capacity_bytes = 256ll << 20;
  auto store = std::make_shared<HostBlockStore>(so);
  EngineOptions o;
  o.kv_shared_store = store;
  const auto turn1 = RandomPrompt(200, 45);
  std::vector<int32_t> turn2;
  {
    auto a = TieredEngine(GetParam(), o);
    ASSERT_NE(a, nullptr);
    Resumed r1 = RunPrompt(*a, turn1, kSteps);
    a->FlushKvTiers();
    turn2 = turn1;
    turn2.insert(turn2.end(), r1.run.tokens.begin(), r1.run.tokens.end());
    const auto tool = RandomPrompt(21, 46);
    turn2.insert(turn2.end(), tool.begin(), tool.end());
    // A second release of the same blocks writes nothing new.
    const int64_t written = store->counters().written_blocks.load();
    RunPrompt(*a, turn1, 2);
    a->FlushKvTiers();
    EXPECT_EQ(store->counters().written_blocks.load(), written);
  }
  auto b = TieredEngine(GetParam(), o);
  ASSERT_NE(b, nullptr);
  const int bs = b->cache_stats().block_size;
  Resumed r2 = RunPrompt(*b, turn2, kSteps);
  EXPECT_EQ(r2.cached, (200 + kSteps - 1) / bs * bs);
  ExpectMatchesFullForward(*b, turn2, r2.run, 1e-5);
  const KvTierStats* shared = Tier(b->kv_tier_stats(), "host");
  ASSERT_NE(shared, nullptr);
  EXPECT_EQ(shared->hit_blocks, r2.cached / bs);
}

// The tiers read ahead of the engine's lock (PrefetchFromTiers, as the
// decode worker does): used, the prefetched blocks give the same P and the
// same tokens as the blocking read; taken before the hot cache lost the
// blocks it started after, they cannot continue it and are not used (the
// prefix is recomputed, still exactly).
TEST_P(EngineTiersTest, PrefetchedBlocksResumeLikeTheBlockingRead) {
  EngineOptions o;
  o.kv_cache_bytes = 64ll << 20;
  o.kv_host_bytes = 64ll << 20;
  auto e = TieredEngine(GetParam(), o);
  ASSERT_NE(e, nullptr);
  const int bs = e->cache_stats().block_size;
  const auto turn1 = RandomPrompt(230, 51);
  Resumed r1 = RunPrompt(*e, turn1, kSteps);
  ASSERT_GT(e->EvictCachedBlocks(), 0);
  e->FlushKvTiers();
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), r1.run.tokens.begin(), r1.run.tokens.end());
  const auto tool = RandomPrompt(37, 52);
  turn2.insert(turn2.end(), tool.begin(), tool.end());
  const int expected = (230 + kSteps - 1) / bs * bs;

  const TierPrefetch prefetched = e->PrefetchFromTiers(turn2);
  EXPECT_EQ(prefetched.first_block, 0u);
  EXPECT_EQ(static_cast<int>(prefetched.payloads.size()), expected / bs);
  const int64_t hits = Tier(e->kv_tier_stats(), "host")->hit_blocks;
  int cached = -1;
  auto seq = e->CreateSequenceForPrompt(turn2, static_cast<int>(turn2.size()) + kSteps, &cached, -1,
                                        &prefetched);
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_EQ(cached, expected) << "P from the prefetched blocks";
  EXPECT_EQ(Tier(e->kv_tier_stats(), "host")->hit_blocks, hits) << "no second read";
  PrefillOptions po;
  po.replay = ReplayMode::kExact;
  po.chunk_tokens = 64;
  auto pre = e->Prefill(*seq, turn2, po);
  ASSERT_TRUE(pre.ok()) << pre.status();
  GreedyRun run = DecodeGreedy(*e, *seq, std::move(pre->logits), kSteps);
  ASSERT_TRUE(e->ReleaseSequence(*seq).ok());
  ExpectMatchesFullForward(*e, turn2, run, 1e-5);

  // Now the hot cache holds all of turn 2's cacheable blocks: a prefetch
  // starts after them and reads nothing.
  const TierPrefetch after = e->PrefetchFromTiers(turn2);
  EXPECT_EQ(after.first_block, (turn2.size() - 1) / bs);
  EXPECT_TRUE(after.payloads.empty());
  // A prefetch that starts after blocks the hot cache then loses is unusable.
  const TierPrefetch stale = e->PrefetchFromTiers(turn2);
  ASSERT_GT(stale.first_block, 0u);
  e->EvictCachedBlocks();
  e->FlushKvTiers();
  seq = e->CreateSequenceForPrompt(turn2, static_cast<int>(turn2.size()) + kSteps, &cached, -1,
                                   &stale);
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_EQ(cached, 0) << "the stale prefetch has a gap before its blocks";
  pre = e->Prefill(*seq, turn2, po);
  ASSERT_TRUE(pre.ok()) << pre.status();
  run = DecodeGreedy(*e, *seq, std::move(pre->logits), kSteps);
  ASSERT_TRUE(e->ReleaseSequence(*seq).ok());
  ExpectMatchesFullForward(*e, turn2, run, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Presets, EngineTiersTest,
                         ::testing::Values("tiny", "tiny-dec", "tiny-shared"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

// Bytes at rest per token = the global K/V bytes per token `ced model info`
// prints (engine/accounting), for every cache format; plus 64 bytes a block.
TEST(EngineTiersBytesTest, BytesAtRestAreTheGlobalKvBytesPerToken) {
  for (KvFormat f : {KvFormat::kF32, KvFormat::kBF16, KvFormat::kFP8E4M3, KvFormat::kFP4E2M1}) {
    SCOPED_TRACE(std::string(kernels::KvFormatName(f)));
    EngineOptions o;
    o.kv_format = f;
    o.kv_host_bytes = 64ll << 20;
    auto e = TieredEngine("tiny", o);
    ASSERT_NE(e, nullptr);
    const int bs = e->cache_stats().block_size;
    const auto prompt = RandomPrompt(10 * bs + 3, 47);
    RunPrompt(*e, prompt, 1);
    const int blocks = e->EvictCachedBlocks();
    ASSERT_EQ(blocks, 10);
    e->FlushKvTiers();
    const KvTierStats* host = Tier(e->kv_tier_stats(), "host");
    ASSERT_NE(host, nullptr);
    const int64_t per_token = GlobalKvBytesPerToken(e->config(), f);
    EXPECT_EQ(host->resident_blocks, blocks);
    EXPECT_EQ(host->resident_bytes,
              blocks * (static_cast<int64_t>(kKvBlockHeaderBytes) + bs * per_token));
    EXPECT_EQ(static_cast<int64_t>(e->cache_stats().block_bytes), bs * per_token);
    // And the blocks come back, in this format, exactly.
    Resumed r = RunPrompt(*e, prompt, 1);
    EXPECT_EQ(r.cached, 10 * bs);
  }
}

TEST(EngineTiersOptionsTest, BadTierOptionsAreRefused) {
  EngineOptions o;
  o.kv_disk_dir = FreshDir("bad");
  o.kv_disk_bytes = 0;
  EXPECT_FALSE(Engine::CreateWithWeights(o, LoadTestModel("tiny")).ok());
  EngineOptions p;
  p.kv_host_bytes = 1 << 20;
  p.prefix_cache = false;
  EXPECT_FALSE(Engine::CreateWithWeights(p, LoadTestModel("tiny")).ok());
  EngineOptions n;
  n.kv_host_bytes = -1;
  EXPECT_FALSE(Engine::CreateWithWeights(n, LoadTestModel("tiny")).ok());
}

}  // namespace
}  // namespace ced::testing
