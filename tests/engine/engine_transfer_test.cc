// Prefill in one engine, export, import into a second engine, decode
// (issue test 3): token for token equal to prefill + decode in one engine.
#include <cstring>

#include "tests/engine/test_util.h"

namespace ced::testing {
namespace {

constexpr int kSteps = 40;

// Copies global K/V [begin, end) from `src` into `dst` region by region, the
// way the transport lands them (sizes must agree exactly).
void CopyGlobal(Engine& src, SeqId s, Engine& dst, SeqId d, int begin, int end) {
  auto from = src.GlobalRegions(s, begin, end);
  auto to = dst.GlobalRegions(d, begin, end);
  ASSERT_TRUE(from.ok() && to.ok());
  std::vector<uint8_t> wire;
  for (const ByteRegion& r : *from) wire.insert(wire.end(), r.data, r.data + r.size);
  ASSERT_EQ(wire.size(), Engine::GlobalRangeBytes(src.config(), begin, end));
  size_t off = 0;
  for (const ByteRegion& r : *to) {
    std::memcpy(r.data, wire.data() + off, r.size);
    off += r.size;
  }
  ASSERT_EQ(off, wire.size());
}

struct Case {
  std::string preset;
  bool defer_replay;
  int prompt_len;
  KvFormat format;
};

class TransferTest : public ::testing::TestWithParam<Case> {};

TEST_P(TransferTest, DisaggregatedEqualsColocated) {
  const Case& c = GetParam();
  const auto prompt = RandomPrompt(c.prompt_len, 42);
  auto colocated = MakeEngine(LoadTestModel(c.preset), c.format);
  PrefillOptions po;
  po.chunk_tokens = 32;
  GreedyRun expected = RunGreedy(*colocated, prompt, kSteps, po);

  // The prefill instance holds encoder-only weights when the replay is deferred.
  auto prefill = MakeEngine(
      LoadTestModel(c.preset, c.defer_replay ? WeightSet::kEncoderOnly : WeightSet::kFull),
      c.format);
  auto decode = MakeEngine(LoadTestModel(c.preset), c.format);
  const int n = static_cast<int>(prompt.size());
  auto ps = prefill->CreateSequence(n);
  auto ds = decode->CreateSequence(n + kSteps);
  ASSERT_TRUE(ps.ok() && ds.ok());
  po.defer_replay = c.defer_replay;
  // Stream each finished chunk, as the prefill worker does.
  po.on_chunk = [&](int begin, int end) { CopyGlobal(*prefill, *ps, *decode, *ds, begin, end); };
  auto pre = prefill->Prefill(*ps, prompt, po);
  ASSERT_TRUE(pre.ok()) << pre.status();
  ASSERT_EQ(pre->replay_done, !c.defer_replay || colocated->config().IsDecoderOnly());
  int32_t first = pre->replay_done ? Argmax(pre->logits.data(), pre->logits.size()) : -1;
  auto tail = prefill->ExportTail(*ps, first);
  ASSERT_TRUE(tail.ok()) << tail.status();
  // Through the wire form, as the transport carries it.
  auto decoded = DecodeTail(EncodeTail(*tail), decode->config());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_TRUE(prefill->ReleaseSequence(*ps).ok());
  ASSERT_TRUE(decode->ImportTail(*ds, *decoded).ok());
  std::vector<float> logits;
  if (!decoded->desc.replay_done) {
    auto r = decode->Replay(*ds);
    ASSERT_TRUE(r.ok()) << r.status();
    logits = *r;
    first = Argmax(logits.data(), logits.size());
  } else {
    logits = pre->logits;
  }
  std::vector<int32_t> got = {first};
  EXPECT_LE(RelDiff(logits.data(), expected.logits[0].data(), logits.size()), 1e-5);
  for (int i = 1; i < kSteps; ++i) {
    DecodeInput in{*ds, got.back()};
    auto next = decode->Decode(absl::MakeConstSpan(&in, 1));
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_LE(RelDiff(next->data(), expected.logits[i].data(), next->size()), 1e-5) << i;
    got.push_back(Argmax(next->data(), next->size()));
  }
  EXPECT_EQ(got, expected.tokens);
  ASSERT_TRUE(decode->ReleaseSequence(*ds).ok());
  EXPECT_EQ(decode->cache_stats().global_blocks_used, 0);
  EXPECT_EQ(prefill->cache_stats().global_blocks_used, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Placements, TransferTest,
    ::testing::Values(Case{"tiny", false, 100, KvFormat::kF32},
                      Case{"tiny", true, 100, KvFormat::kF32},
                      Case{"tiny", true, 9, KvFormat::kF32},
                      Case{"tiny-shared", true, 77, KvFormat::kF32},
                      Case{"tiny", false, 100, KvFormat::kBF16},
                      Case{"tiny", true, 100, KvFormat::kFP8E4M3},
                      Case{"tiny", true, 100, KvFormat::kFP4E2M1},
                      Case{"tiny-dec", false, 100, KvFormat::kF32}));

TEST(TransferTest, ReplayOnPrefillAndOnDecodeGiveTheSameTokens) {
  const auto prompt = RandomPrompt(150, 9);
  std::vector<int32_t> tokens[2];
  for (int defer = 0; defer < 2; ++defer) {
    auto engine = MakeEngine(LoadTestModel("tiny"));
    PrefillOptions po;
    po.defer_replay = defer == 1;
    auto seq = engine->CreateSequence(200);
    ASSERT_TRUE(seq.ok());
    auto pre = engine->Prefill(*seq, prompt, po);
    ASSERT_TRUE(pre.ok());
    std::vector<float> logits = pre->logits;
    if (defer) {
      auto r = engine->Replay(*seq);
      ASSERT_TRUE(r.ok());
      logits = *r;
    }
    for (int i = 0; i < 20; ++i) {
      tokens[defer].push_back(Argmax(logits.data(), logits.size()));
      DecodeInput in{*seq, tokens[defer].back()};
      auto next = engine->Decode(absl::MakeConstSpan(&in, 1));
      ASSERT_TRUE(next.ok());
      logits = *next;
    }
  }
  EXPECT_EQ(tokens[0], tokens[1]);
}

TEST(TransferTest, EncoderOnlyInstanceRefusesToReplay) {
  auto engine = MakeEngine(LoadTestModel("tiny", WeightSet::kEncoderOnly));
  auto seq = engine->CreateSequence(64);
  ASSERT_TRUE(seq.ok());
  auto pre = engine->Prefill(*seq, RandomPrompt(20, 1), PrefillOptions{});
  EXPECT_EQ(pre.status().code(), absl::StatusCode::kFailedPrecondition);
  DecodeInput in{*seq, 1};
  EXPECT_FALSE(engine->Decode(absl::MakeConstSpan(&in, 1)).ok());
}

TEST(TransferTest, TailRejectsMismatchedBytes) {
  auto engine = MakeEngine(LoadTestModel("tiny"));
  auto seq = engine->CreateSequence(64);
  ASSERT_TRUE(seq.ok());
  PrefillOptions po;
  po.defer_replay = true;
  ASSERT_TRUE(engine->Prefill(*seq, RandomPrompt(40, 2), po).ok());
  auto tail = engine->ExportTail(*seq, -1);
  ASSERT_TRUE(tail.ok());
  std::vector<uint8_t> bytes = EncodeTail(*tail);
  auto truncated = DecodeTail(absl::MakeConstSpan(bytes.data(), bytes.size() - 1),
                              engine->config());
  EXPECT_EQ(truncated.status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<uint8_t> bad = bytes;
  bad[16] = 0xff;  // num_tokens
  bad[17] = 0xff;
  EXPECT_FALSE(DecodeTail(bad, engine->config()).ok());
  ModelConfig other = engine->config();
  other.kv_cache_dtype = KvFormat::kBF16;
  EXPECT_FALSE(DecodeTail(bytes, other).ok());
}

}  // namespace
}  // namespace ced::testing
