// Batched decode, KV formats and cache accounting (issue tests 5, 6, 8).
#include "tests/engine/test_util.h"

namespace ced::testing {
namespace {

TEST(BatchedDecodeTest, EqualsEachSequenceAlone) {
  auto engine = MakeEngine(LoadTestModel("tiny"));
  const std::vector<int> lengths = {3, 17, 40, 64, 100, 5, 33, 250, 1};
  constexpr int kSteps = 16;
  ExpectBatchedDecodeEqualsAlone(*engine, lengths, kSteps);
  EXPECT_EQ(engine->cache_stats().global_blocks_used, 0);
  EXPECT_EQ(engine->cache_stats().local_slots_used, 0);
}

TEST(BatchedDecodeTest, RejectsDuplicatesAndUnknownSequences) {
  auto engine = MakeEngine(LoadTestModel("tiny"));
  auto seq = engine->CreateSequence(20);
  ASSERT_TRUE(seq.ok());
  ASSERT_TRUE(engine->Prefill(*seq, RandomPrompt(5, 1), PrefillOptions{}).ok());
  std::vector<DecodeInput> dup = {{*seq, 1}, {*seq, 2}};
  EXPECT_EQ(engine->Decode(dup).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<DecodeInput> unknown = {{*seq + 100, 1}};
  EXPECT_EQ(engine->Decode(unknown).status().code(), absl::StatusCode::kNotFound);
  std::vector<DecodeInput> bad_token = {{*seq, 100000}};
  EXPECT_EQ(engine->Decode(bad_token).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BatchedDecodeTest, CapacityIsEnforced) {
  auto engine = MakeEngine(LoadTestModel("tiny"));
  auto seq = engine->CreateSequence(6);
  ASSERT_TRUE(seq.ok());
  ASSERT_TRUE(engine->Prefill(*seq, RandomPrompt(5, 1), PrefillOptions{}).ok());
  DecodeInput in{*seq, 1};
  ASSERT_TRUE(engine->Decode(absl::MakeConstSpan(&in, 1)).ok());
  EXPECT_EQ(engine->Decode(absl::MakeConstSpan(&in, 1)).status().code(),
            absl::StatusCode::kOutOfRange);
}

struct FormatCase {
  KvFormat format;
  double max_rel;  // logits vs the full forward, first steps
};

class KvFormatTest : public ::testing::TestWithParam<FormatCase> {};

TEST_P(KvFormatTest, GenerationRunsAndStaysClose) {
  auto engine = MakeEngine(LoadTestModel("tiny"), GetParam().format);
  const auto prompt = RandomPrompt(80, 5);
  PrefillOptions po;
  po.replay = ReplayMode::kExact;  // R = 61 < 80: any difference is the format's
  GreedyRun run = RunGreedy(*engine, prompt, 24, po);
  ASSERT_EQ(run.tokens.size(), 24u);
  auto full = engine->FullForward(prompt);
  ASSERT_TRUE(full.ok());
  const int V = engine->config().vocab_size;
  for (const auto& l : run.logits) {
    for (float v : l) ASSERT_TRUE(std::isfinite(v));
  }
  const double rel = RelDiff(run.logits[0].data(), full->data() + 79 * V, V);
  EXPECT_LE(rel, GetParam().max_rel);
  if (GetParam().format != KvFormat::kF32) {
    EXPECT_GT(rel, 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, KvFormatTest,
                         ::testing::Values(FormatCase{KvFormat::kF32, 1e-4},
                                           FormatCase{KvFormat::kBF16, 2e-2},
                                           FormatCase{KvFormat::kFP8E4M3, 1e-1},
                                           FormatCase{KvFormat::kFP4E2M1, 3e-1}));

TEST(CacheTest, ExhaustionIsAnErrorAndBlocksReturn) {
  auto w = LoadTestModel("tiny");
  auto engine = MakeEngine(w, std::nullopt, /*kv_bytes=*/1 << 20);
  const CacheStats s = engine->cache_stats();
  const int tokens_fit = s.global_blocks_total * s.block_size;
  auto big = engine->CreateSequence(tokens_fit + 1);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(engine->cache_stats().global_blocks_used, 0);
  auto a = engine->CreateSequence(tokens_fit / 2);
  auto b = engine->CreateSequence(tokens_fit / 2);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(engine->CreateSequence(s.block_size).status().code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(engine->Prefill(*a, RandomPrompt(30, 1), PrefillOptions{}).ok());
  // Cancel b during its prefill.
  PrefillOptions po;
  po.chunk_tokens = 8;
  int chunks = 0;
  po.on_chunk = [&](int, int) { ++chunks; };
  po.cancelled = [&] { return chunks >= 2; };
  auto cancelled = engine->Prefill(*b, RandomPrompt(40, 2), po);
  EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kCancelled);
  ASSERT_TRUE(engine->ReleaseSequence(*b).ok());
  ASSERT_TRUE(engine->ReleaseSequence(*a).ok());
  EXPECT_EQ(engine->cache_stats().global_blocks_used, 0);
  EXPECT_EQ(engine->cache_stats().local_slots_used, 0);
  EXPECT_EQ(engine->ReleaseSequence(*a).code(), absl::StatusCode::kNotFound);
}

TEST(CacheTest, LocalSlotsAreBounded) {
  EngineOptions o;
  o.max_sequences = 2;
  auto engine = Engine::CreateWithWeights(o, LoadTestModel("tiny"));
  ASSERT_TRUE(engine.ok());
  ASSERT_TRUE((*engine)->CreateSequence(10).ok());
  ASSERT_TRUE((*engine)->CreateSequence(10).ok());
  EXPECT_EQ((*engine)->CreateSequence(10).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*engine)->cache_stats().local_slots_used, 2);
}

TEST(CacheTest, GlobalRegionsCoverTheRangeExactly) {
  auto engine = MakeEngine(LoadTestModel("tiny-shared"));
  auto seq = engine->CreateSequence(100);
  ASSERT_TRUE(seq.ok());
  for (auto [b, e] : std::vector<std::pair<int, int>>{{0, 100}, {0, 16}, {5, 37}, {99, 100}}) {
    auto regions = engine->GlobalRegions(*seq, b, e);
    ASSERT_TRUE(regions.ok());
    size_t total = 0;
    for (const auto& r : *regions) total += r.size;
    EXPECT_EQ(total, Engine::GlobalRangeBytes(engine->config(), b, e));
  }
  auto whole = engine->GlobalRegions(*seq, 0, 32);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->size(), 2u) << "full blocks come out as one region each";
  EXPECT_FALSE(engine->GlobalRegions(*seq, 90, 101).ok());
  EXPECT_FALSE(engine->GlobalRegions(*seq, 10, 10).ok());
}

TEST(EngineTest, BadInputsAreErrors) {
  auto engine = MakeEngine(LoadTestModel("tiny"));
  EXPECT_EQ(engine->CreateSequence(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->CreateSequence(1 << 30).status().code(), absl::StatusCode::kInvalidArgument);
  auto seq = engine->CreateSequence(10);
  ASSERT_TRUE(seq.ok());
  EXPECT_EQ(engine->Prefill(*seq, {}, PrefillOptions{}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->Prefill(*seq, RandomPrompt(11, 1), PrefillOptions{}).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> bad = {1, 2, -5};
  EXPECT_EQ(engine->Prefill(*seq, bad, PrefillOptions{}).status().code(),
            absl::StatusCode::kInvalidArgument);
  PrefillOptions po;
  po.replay_window = 3;  // below W = 16
  EXPECT_EQ(engine->Prefill(*seq, RandomPrompt(5, 1), po).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(engine->Replay(*seq).ok());
  EngineOptions o;
  o.device = "no-such-device";
  EXPECT_EQ(Engine::CreateWithWeights(o, LoadTestModel("tiny")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ced::testing
