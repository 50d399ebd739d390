// Prefill in one engine, export, import into a second engine, decode
// (issue test 3): token for token equal to prefill + decode in one engine.
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

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

// A decode engine holds a finished sequence whose prompt came from a prefill
// engine (its encoder windows arrived in the tail, decode steps extended
// them): the session's next turn, prefilled locally, continues from them
// (nothing rebuilt) and equals a fresh run of the whole prompt.
TEST(TransferTest, ImportedSequenceIsHeldAndTheNextTurnContinuesIt) {
  auto weights = LoadTestModel("tiny");
  auto prefill = MakeEngine(weights);
  EngineOptions o;
  o.kv_cache_bytes = 64ll << 20;
  o.max_held_sequences = 2;
  auto decode = Engine::CreateWithWeights(o, weights);
  ASSERT_TRUE(decode.ok()) << decode.status();
  auto fresh = MakeEngine(weights);
  const auto turn1 = RandomPrompt(100, 61);
  const int n = static_cast<int>(turn1.size());
  auto ps = prefill->CreateSequence(n);
  auto ds = (*decode)->CreateSequenceForPrompt(turn1, n + 10, nullptr);
  ASSERT_TRUE(ps.ok() && ds.ok());
  PrefillOptions po;
  po.defer_replay = true;
  po.on_chunk = [&](int b, int e) { CopyGlobal(*prefill, *ps, **decode, *ds, b, e); };
  ASSERT_TRUE(prefill->Prefill(*ps, turn1, po).ok());
  auto tail = prefill->ExportTail(*ps, -1);
  ASSERT_TRUE(tail.ok());
  ASSERT_TRUE((*decode)->ImportTail(*ds, *tail).ok());
  ASSERT_TRUE((*decode)->SetPromptTokens(*ds, turn1).ok());
  auto logits = (*decode)->Replay(*ds);
  ASSERT_TRUE(logits.ok()) << logits.status();
  GreedyRun answer = DecodeGreedy(**decode, *ds, *logits, 10);  // feeds 9 of the 10
  ASSERT_TRUE((*decode)->HoldSequence(*ds).ok());
  EXPECT_EQ((*decode)->cache_stats().held_sequences, 1);
  // The next turn: turn 1, its answer, a short message (a local prefill).
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), answer.tokens.begin(), answer.tokens.end());
  const auto msg = RandomPrompt(70, 62);
  turn2.insert(turn2.end(), msg.begin(), msg.end());
  int cached = -1;
  auto s2 = (*decode)->CreateSequenceForPrompt(turn2, static_cast<int>(turn2.size()) + 8, &cached);
  ASSERT_TRUE(s2.ok()) << s2.status();
  EXPECT_EQ(cached, n + 9);
  auto pre = (*decode)->Prefill(*s2, turn2, PrefillOptions{});
  ASSERT_TRUE(pre.ok()) << pre.status();
  EXPECT_EQ(pre->computed_from, n + 9);
  GreedyRun got = DecodeGreedy(**decode, *s2, pre->logits, 8);
  GreedyRun want = RunGreedy(*fresh, turn2, 8);
  ASSERT_EQ(got.tokens, want.tokens);
  for (size_t k = 0; k < want.logits.size(); ++k) {
    EXPECT_LE(RelDiff(got.logits[k].data(), want.logits[k].data(), want.logits[k].size()), 1e-5)
        << "step " << k;
  }
  ASSERT_TRUE((*decode)->ReleaseSequence(*s2).ok());
  ASSERT_TRUE(prefill->ReleaseSequence(*ps).ok());
}

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
  // Logprobs only come with a first token (replay done).
  tail->first_logprobs = {{3, -0.5f}};
  auto pending = DecodeTail(EncodeTail(*tail), engine->config());
  EXPECT_EQ(pending.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(pending.status().message().find("logprobs"), absl::string_view::npos)
      << pending.status();
}

// The first token's log-probabilities travel with the tail (the decode
// worker streams that token too); every pair is checked on the way in.
TEST(TransferTest, TailCarriesTheFirstTokensLogprobs) {
  auto engine = MakeEngine(LoadTestModel("tiny"));
  auto seq = engine->CreateSequence(64);
  ASSERT_TRUE(seq.ok());
  ASSERT_TRUE(engine->Prefill(*seq, RandomPrompt(40, 3), PrefillOptions{}).ok());
  auto tail = engine->ExportTail(*seq, 7);
  ASSERT_TRUE(tail.ok());
  ASSERT_TRUE(tail->desc.replay_done);
  const std::vector<uint8_t> plain = EncodeTail(*tail);
  tail->first_logprobs = {{7, -1.25f}, {9, -0.5f}, {7, -1.25f}, {0, -9999.0f}};
  const std::vector<uint8_t> bytes = EncodeTail(*tail);
  EXPECT_EQ(bytes.size(), plain.size() + 4 * 8);
  auto decoded = DecodeTail(bytes, engine->config());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->first_logprobs, tail->first_logprobs);
  EXPECT_EQ(decoded->desc.first_token, 7);
  auto decoded_plain = DecodeTail(plain, engine->config());
  ASSERT_TRUE(decoded_plain.ok()) << decoded_plain.status();
  EXPECT_TRUE(decoded_plain->first_logprobs.empty());

  const int vocab = engine->config().vocab_size;
  for (const auto& [pairs, what] :
       std::vector<std::pair<std::vector<std::pair<int32_t, float>>, std::string>>{
           {{{8, -1.0f}}, "first token"},
           {{{7, -1.0f}, {vocab, -2.0f}}, "out of range"},
           {{{7, 0.5f}}, "not a log-probability"},
           {{{7, std::nanf("")}}, "not a log-probability"},
           {std::vector<std::pair<int32_t, float>>(kMaxTailLogprobs + 1, {7, -1.0f}), "at most"}}) {
    tail->first_logprobs = pairs;
    auto bad = DecodeTail(EncodeTail(*tail), engine->config());
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(bad.status().message().find(what), absl::string_view::npos) << bad.status();
  }
  // A count past the bytes there are.
  std::vector<uint8_t> short_bytes = bytes;
  short_bytes.resize(bytes.size() - 8);
  EXPECT_EQ(DecodeTail(short_bytes, engine->config()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ced::testing
