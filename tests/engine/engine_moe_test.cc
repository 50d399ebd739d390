// Mixture of experts (DESIGN.md §1.7) and window-only layers
// (global_kv_source = -1, §1.1) in the engine: routing rules on their own,
// then prefill + replay + decode (the fast path: router GEMM, tokens grouped
// by expert, one product per touched expert) against the full forward, whose
// MoE is a token-by-token scalar loop sharing no code with it
// (engine/runtime/reference.cc); exact replay, disaggregated = colocated,
// batched decode across sequences.
#include <cstring>
#include <numeric>

#include "engine/runtime/moe.h"
#include "tests/engine/test_util.h"

namespace ced::testing {
namespace {

MoeConfig Moe(int n, int k, MoeScoring scoring, bool norm, double scale) {
  MoeConfig m;
  m.num_routed_experts = n;
  m.num_experts_per_tok = k;
  m.moe_intermediate_size = 8;
  m.scoring = scoring;
  m.norm_topk_prob = norm;
  m.routed_scaling_factor = scale;
  return m;
}

// ---- Routing ---------------------------------------------------------------

TEST(MoeRoutingTest, TopKByProbabilityTiesGoToTheLowerIndex) {
  for (MoeScoring scoring : {MoeScoring::kSoftmax, MoeScoring::kSigmoid}) {
    const MoeConfig m = Moe(6, 3, scoring, false, 1.0);
    // Experts 1, 3 and 4 tie for first; 0 and 5 tie below them.
    const float logits[6] = {0.5f, 2.0f, -1.0f, 2.0f, 2.0f, 0.5f};
    MoeRouting r = RouteTokens(m, logits, 1);
    EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 3, 4})) << MoeScoringName(scoring);
    // The tie at the k-th place: 0 beats 5.
    const float second[6] = {0.5f, 2.0f, -1.0f, 2.0f, -3.0f, 0.5f};
    r = RouteTokens(m, second, 1);
    EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 3, 0})) << MoeScoringName(scoring);
    // All equal: the first k.
    const float flat[6] = {0, 0, 0, 0, 0, 0};
    r = RouteTokens(m, flat, 1);
    EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 1, 2})) << MoeScoringName(scoring);
  }
}

TEST(MoeRoutingTest, SoftmaxGatesWithAndWithoutNormalisation) {
  const float logits[4] = {1.0f, 3.0f, 0.0f, 2.0f};
  double e[4], sum = 0;
  for (int i = 0; i < 4; ++i) sum += (e[i] = std::exp(logits[i]));
  const double p1 = e[1] / sum, p3 = e[3] / sum;

  MoeRouting r = RouteTokens(Moe(4, 2, MoeScoring::kSoftmax, false, 1.0), logits, 1);
  ASSERT_EQ(r.experts, (std::vector<int32_t>{1, 3}));
  EXPECT_NEAR(r.gates[0], p1, 1e-6);  // p itself: gates sum to less than 1
  EXPECT_NEAR(r.gates[1], p3, 1e-6);

  r = RouteTokens(Moe(4, 2, MoeScoring::kSoftmax, true, 1.0), logits, 1);
  EXPECT_NEAR(r.gates[0], p1 / (p1 + p3), 1e-6);
  EXPECT_NEAR(r.gates[1], p3 / (p1 + p3), 1e-6);
  EXPECT_NEAR(r.gates[0] + r.gates[1], 1.0, 1e-6);

  r = RouteTokens(Moe(4, 2, MoeScoring::kSoftmax, true, 2.5), logits, 1);
  EXPECT_NEAR(r.gates[0], 2.5 * p1 / (p1 + p3), 1e-6);
  EXPECT_NEAR(r.gates[0] + r.gates[1], 2.5, 1e-6);
}

TEST(MoeRoutingTest, SigmoidGatesAreNotASoftmax) {
  const float logits[3] = {0.0f, 2.0f, -1.0f};
  const double s0 = 0.5, s1 = 1.0 / (1.0 + std::exp(-2.0));
  MoeRouting r = RouteTokens(Moe(3, 2, MoeScoring::kSigmoid, false, 1.0), logits, 1);
  ASSERT_EQ(r.experts, (std::vector<int32_t>{1, 0}));
  EXPECT_NEAR(r.gates[0], s1, 1e-6);
  EXPECT_NEAR(r.gates[1], s0, 1e-6);  // the sum exceeds 1: no implicit normalisation
  r = RouteTokens(Moe(3, 2, MoeScoring::kSigmoid, true, 2.0), logits, 1);
  EXPECT_NEAR(r.gates[0], 2.0 * s1 / (s0 + s1), 1e-6);
  EXPECT_NEAR(r.gates[1], 2.0 * s0 / (s0 + s1), 1e-6);
}

TEST(MoeRoutingTest, EveryExpertWhenKEqualsN) {
  const float logits[2 * 3] = {0.1f, 0.3f, 0.2f, 5.0f, 5.0f, -5.0f};
  MoeRouting r = RouteTokens(Moe(3, 3, MoeScoring::kSoftmax, false, 1.0), logits, 2);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 2, 0, 0, 1, 2}));
  EXPECT_NEAR(r.gates[0] + r.gates[1] + r.gates[2], 1.0, 1e-6);  // softmax sums to 1
}

TEST(MoeRoutingTest, GroupsListTokensExpertByExpert) {
  MoeRouting r;
  r.rows = 3;
  r.k = 2;
  r.experts = {2, 0, 0, 3, 2, 3};  // token 0: 2, 0; token 1: 0, 3; token 2: 2, 3
  r.gates = {1, 1, 1, 1, 1, 1};
  ExpertGroups g = GroupByExpert(r, 4);
  EXPECT_EQ(g.offsets, (std::vector<int32_t>{0, 2, 2, 4, 6}));
  EXPECT_EQ(g.order, (std::vector<int32_t>{0, 1, 0, 2, 1, 2}));
  for (size_t q = 0; q < r.experts.size(); ++q) {
    const int row = g.slot[q];
    EXPECT_EQ(g.order[row], static_cast<int>(q / 2)) << q;
    EXPECT_GE(row, g.offsets[r.experts[q]]);
    EXPECT_LT(row, g.offsets[r.experts[q] + 1]);
  }
}

// ---- The engine against the full forward -----------------------------------

struct MoeCase {
  std::string preset;
  std::string variant;  // a config edit, see Edit()
  int prompt_len;
  int chunk;
};

void PrintTo(const MoeCase& c, std::ostream* os) {
  *os << c.preset << " " << c.variant << " n=" << c.prompt_len << " chunk=" << c.chunk;
}

std::function<void(ModelConfig*)> Edit(const std::string& variant) {
  if (variant == "softmax") {  // softmax scoring, raw gates, every layer MoE
    return [](ModelConfig* c) {
      c->moe->scoring = MoeScoring::kSoftmax;
      c->moe->norm_topk_prob = false;
      c->moe->routed_scaling_factor = 1.0;
      c->moe->first_dense_layers = 0;
    };
  }
  if (variant == "noshared") {  // no shared expert, k = 3
    return [](ModelConfig* c) {
      c->moe->num_shared_experts = 0;
      c->moe->num_experts_per_tok = 3;
    };
  }
  if (variant == "windowonly") {  // dense tiny with window-only layers 0, 1 and 5
    return [](ModelConfig* c) { c->global_kv_source = {-1, -1, 2, 2, 4, -1, 4, 4}; };
  }
  return nullptr;
}

std::string CaseName(const MoeCase& c) {
  std::string name = c.preset + (c.variant.empty() ? "" : "_" + c.variant) + "_n" +
                     std::to_string(c.prompt_len) + "_c" + std::to_string(c.chunk);
  for (char& ch : name) {
    if (ch == '-') ch = '_';
  }
  return name;
}

class MoeExactReplayTest : public ::testing::TestWithParam<MoeCase> {};

TEST_P(MoeExactReplayTest, EqualsFullForward) {
  const MoeCase& p = GetParam();
  auto engine = MakeEngine(LoadTestModel(p.preset, WeightSet::kFull, Edit(p.variant), p.variant));
  const auto prompt = RandomPrompt(p.prompt_len, p.prompt_len + 3);
  PrefillOptions po;
  po.replay = ReplayMode::kExact;
  po.chunk_tokens = p.chunk;
  GreedyRun run = RunGreedy(*engine, prompt, 32, po);
  ASSERT_EQ(run.tokens.size(), 32u);
  ExpectMatchesFullForward(*engine, prompt, run, 1e-4);
  EXPECT_EQ(engine->cache_stats().global_blocks_used, 0);
}

// tiny-moe: W = 16, L - E = 4, so R_exact = 61.
INSTANTIATE_TEST_SUITE_P(
    Prompts, MoeExactReplayTest,
    ::testing::Values(MoeCase{"tiny-moe", "", 5, 64},    // shorter than W
                      MoeCase{"tiny-moe", "", 40, 16},   // between W and R_exact
                      MoeCase{"tiny-moe", "", 200, 64},  // longer than R_exact
                      MoeCase{"tiny-moe", "", 130, 7},   // odd chunks: few tokens per expert
                      MoeCase{"tiny-moe-dec", "", 120, 32}, MoeCase{"tiny-moe", "softmax", 120, 48},
                      MoeCase{"tiny-moe", "noshared", 90, 32},
                      MoeCase{"tiny", "windowonly", 150, 32},
                      MoeCase{"tiny-dec", "windowonly", 150, 32}),
    [](const auto& info) { return CaseName(info.param); });

TEST(MoeEngineTest, WindowOnlyLayersStoreNoGlobalKv) {
  // tiny-moe: sources (-1, 1, 1, 3, 4, 4, 4, 4): three own-source layers.
  auto engine = MakeEngine(LoadTestModel("tiny-moe"));
  const ModelConfig& c = engine->config();
  EXPECT_FALSE(c.HasGlobalBranch(0));
  EXPECT_EQ(c.NumGlobalSourceLayers(), 3);
  EXPECT_EQ(Engine::GlobalRangeBytes(c, 0, 10), 10u * 3 * 2 * c.KvDim() * sizeof(float));
  auto seq = engine->CreateSequence(64);
  ASSERT_TRUE(seq.ok());
  ASSERT_TRUE(engine->Prefill(*seq, RandomPrompt(40, 1), PrefillOptions{}).ok());
  size_t bytes = 0;
  auto regions = engine->GlobalRegions(*seq, 0, 40);
  ASSERT_TRUE(regions.ok());
  for (const ByteRegion& r : *regions) bytes += r.size;
  EXPECT_EQ(bytes, Engine::GlobalRangeBytes(c, 0, 40));
}

TEST(MoeEngineTest, EncoderOnlyInstanceHoldsNoDecoderExperts) {
  auto enc = LoadTestModel("tiny-moe", WeightSet::kEncoderOnly);
  auto full = LoadTestModel("tiny-moe");
  const ModelConfig& c = full->config();
  for (int l = 0; l < c.num_layers; ++l) {
    const bool moe = c.IsMoeLayer(l);
    ASSERT_EQ(full->layers[l].router.loaded(), moe) << l;
    ASSERT_EQ(full->layers[l].w_gate.loaded(), !moe) << l;
    if (!moe) continue;
    EXPECT_TRUE(full->layers[l].experts.back().w_down.loaded()) << l;
    EXPECT_TRUE(full->layers[l].shared.w_up.loaded()) << l;
    const bool enc_layer = l < c.num_encoder_layers;
    EXPECT_EQ(enc->layers[l].router.loaded(), enc_layer) << l;
    EXPECT_EQ(enc->layers[l].experts[0].w_gate.loaded(), enc_layer) << l;
    EXPECT_EQ(enc->layers[l].shared.w_gate.loaded(), enc_layer) << l;
  }
  EXPECT_LT(enc->resident_bytes(), full->resident_bytes() * 0.6);
}

TEST(MoeEngineTest, BatchedDecodeEqualsEachSequenceAlone) {
  // One decode step groups every sequence's tokens by expert: each expert's
  // product then covers rows of several sequences.
  auto engine = MakeEngine(LoadTestModel("tiny-moe"));
  const std::vector<int> lengths = {3, 17, 40, 100, 5, 33, 70, 1};
  constexpr int kSteps = 12;
  ExpectBatchedDecodeEqualsAlone(*engine, lengths, kSteps);
}

// A resumed prompt (§1.6) on tiny-moe: its first P tokens' global K/V come from
// the prefix cache (the source layers only; window-only layer 0 has none),
// the encoder's local windows are rebuilt, and in exact mode the result
// equals the full forward.
TEST(MoeEngineTest, ExactResumeFromThePrefixCacheEqualsFullForward) {
  auto engine = MakeEngine(LoadTestModel("tiny-moe"));
  const auto base = RandomPrompt(200, 17);
  PrefillOptions po;
  po.replay = ReplayMode::kExact;
  po.chunk_tokens = 48;
  RunGreedy(*engine, base, 2, po);  // fills the cache
  for (int k : {64, 150, 200}) {
    std::vector<int32_t> prompt(base.begin(), base.begin() + k);
    const auto tail = RandomPrompt(30, 1000 + k);
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    int cached = 0;
    auto seq =
        engine->CreateSequenceForPrompt(prompt, static_cast<int>(prompt.size()) + 8, &cached);
    ASSERT_TRUE(seq.ok()) << seq.status();
    EXPECT_EQ(cached, k / 16 * 16) << k;
    auto pre = engine->Prefill(*seq, prompt, po);
    ASSERT_TRUE(pre.ok()) << pre.status();
    GreedyRun run;
    std::vector<float> logits = pre->logits;
    for (int i = 0; i < 8; ++i) {
      run.tokens.push_back(Argmax(logits.data(), static_cast<int>(logits.size())));
      run.logits.push_back(logits);
      if (i == 7) break;
      DecodeInput in{*seq, run.tokens.back()};
      auto next = engine->Decode(absl::MakeConstSpan(&in, 1));
      ASSERT_TRUE(next.ok()) << next.status();
      logits = *next;
    }
    ASSERT_TRUE(engine->ReleaseSequence(*seq).ok());
    SCOPED_TRACE("k=" + std::to_string(k));
    ExpectMatchesFullForward(*engine, prompt, run, 1e-4);
  }
}

// ---- Disaggregated = colocated ---------------------------------------------

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

struct TransferCase {
  std::string preset;
  bool defer_replay;  // replay on decode (encoder-only prefill instance)
  KvFormat format;
};

void PrintTo(const TransferCase& c, std::ostream* os) {
  *os << c.preset << (c.defer_replay ? " replay on decode " : " replay on prefill ")
      << kernels::KvFormatName(c.format);
}

class MoeTransferTest : public ::testing::TestWithParam<TransferCase> {};

TEST_P(MoeTransferTest, DisaggregatedEqualsColocated) {
  const TransferCase& c = GetParam();
  constexpr int kSteps = 24;
  const auto prompt = RandomPrompt(110, 42);
  PrefillOptions po;
  po.chunk_tokens = 32;
  po.replay = ReplayMode::kExact;
  auto colocated = MakeEngine(LoadTestModel(c.preset), c.format);
  GreedyRun expected = RunGreedy(*colocated, prompt, kSteps, po);

  auto prefill = MakeEngine(
      LoadTestModel(c.preset, c.defer_replay ? WeightSet::kEncoderOnly : WeightSet::kFull),
      c.format);
  auto decode = MakeEngine(LoadTestModel(c.preset), c.format);
  const int n = static_cast<int>(prompt.size());
  auto ps = prefill->CreateSequence(n);
  auto ds = decode->CreateSequence(n + kSteps);
  ASSERT_TRUE(ps.ok() && ds.ok());
  po.defer_replay = c.defer_replay;
  po.on_chunk = [&](int begin, int end) { CopyGlobal(*prefill, *ps, *decode, *ds, begin, end); };
  auto pre = prefill->Prefill(*ps, prompt, po);
  ASSERT_TRUE(pre.ok()) << pre.status();
  int32_t first = pre->replay_done ? Argmax(pre->logits.data(), pre->logits.size()) : -1;
  auto tail = prefill->ExportTail(*ps, first);
  ASSERT_TRUE(tail.ok()) << tail.status();
  auto decoded = DecodeTail(EncodeTail(*tail), decode->config());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_TRUE(decode->ImportTail(*ds, *decoded).ok());
  std::vector<float> logits = pre->logits;
  if (!decoded->desc.replay_done) {
    auto r = decode->Replay(*ds);
    ASSERT_TRUE(r.ok()) << r.status();
    logits = *r;
    first = Argmax(logits.data(), logits.size());
  }
  EXPECT_LE(RelDiff(logits.data(), expected.logits[0].data(), logits.size()), 1e-5);
  std::vector<int32_t> got = {first};
  for (int i = 1; i < kSteps; ++i) {
    DecodeInput in{*ds, got.back()};
    auto next = decode->Decode(absl::MakeConstSpan(&in, 1));
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_LE(RelDiff(next->data(), expected.logits[i].data(), next->size()), 1e-5) << i;
    got.push_back(Argmax(next->data(), next->size()));
  }
  EXPECT_EQ(got, expected.tokens);
}

INSTANTIATE_TEST_SUITE_P(Cases, MoeTransferTest,
                         ::testing::Values(TransferCase{"tiny-moe", false, KvFormat::kF32},
                                           TransferCase{"tiny-moe", true, KvFormat::kF32},
                                           TransferCase{"tiny-moe", true, KvFormat::kFP8E4M3},
                                           TransferCase{"tiny-moe-dec", false, KvFormat::kBF16}),
                         [](const auto& info) {
                           std::string name = info.param.preset +
                                              (info.param.defer_replay ? "_replay_on_decode"
                                                                       : "_replay_on_prefill") +
                                              "_" +
                                              std::string(kernels::KvFormatName(info.param.format));
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace ced::testing
