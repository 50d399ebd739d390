// Prefill with replay against the full forward (issue tests 1, 2 and 4).
#include "tests/engine/test_util.h"

namespace ced::testing {
namespace {

constexpr int kSteps = 64;

struct ReplayCase {
  std::string preset;
  int prompt_len;
  int chunk;
};

class ExactReplayTest : public ::testing::TestWithParam<ReplayCase> {};

TEST_P(ExactReplayTest, EqualsFullForward) {
  const ReplayCase& p = GetParam();
  auto engine = MakeEngine(LoadTestModel(p.preset));
  const auto prompt = RandomPrompt(p.prompt_len, p.prompt_len);
  PrefillOptions po;
  po.replay = ReplayMode::kExact;
  po.chunk_tokens = p.chunk;
  GreedyRun run = RunGreedy(*engine, prompt, kSteps, po);
  ASSERT_EQ(run.tokens.size(), static_cast<size_t>(kSteps));
  ExpectMatchesFullForward(*engine, prompt, run, 1e-4);
  EXPECT_EQ(engine->cache_stats().global_blocks_used, 0);
}

// tiny: W = 16, L - E = 4, so R_exact = 61.
INSTANTIATE_TEST_SUITE_P(
    Prompts, ExactReplayTest,
    ::testing::Values(ReplayCase{"tiny", 5, 64},         // shorter than W
                      ReplayCase{"tiny", 40, 16},        // between W and R_exact
                      ReplayCase{"tiny", 300, 64},       // far longer than R_exact
                      ReplayCase{"tiny", 300, 7},        // odd chunking
                      ReplayCase{"tiny-shared", 40, 32},  // global_kv_source sharing
                      ReplayCase{"tiny-shared", 300, 64}),
    [](const auto& info) {
      std::string name = info.param.preset + "_n" + std::to_string(info.param.prompt_len) +
                         "_c" + std::to_string(info.param.chunk);
      for (char& ch : name) {
        if (ch == '-') ch = '_';
      }
      return name;
    });

TEST(BoundedReplayTest, IdenticalWhenPromptFitsTheWindow) {
  auto engine = MakeEngine(LoadTestModel("tiny"));
  const int r = engine->config().replay_window;
  for (int n : {1, r / 2, r}) {
    const auto prompt = RandomPrompt(n, 100 + n);
    GreedyRun run = RunGreedy(*engine, prompt, 32);
    ExpectMatchesFullForward(*engine, prompt, run, 1e-4);
  }
}

TEST(BoundedReplayTest, ApproximateButSaneWhenPromptExceedsTheWindow) {
  auto engine = MakeEngine(LoadTestModel("tiny"));
  const auto prompt = RandomPrompt(200, 11);
  auto seq = engine->CreateSequence(201);
  ASSERT_TRUE(seq.ok());
  auto pre = engine->Prefill(*seq, prompt, PrefillOptions{});
  ASSERT_TRUE(pre.ok()) << pre.status();
  EXPECT_EQ(pre->replay_start, 200 - engine->config().replay_window);
  auto full = engine->FullForward(prompt);
  ASSERT_TRUE(full.ok());
  const int V = engine->config().vocab_size;
  const float* ref = full->data() + static_cast<size_t>(199) * V;
  for (float v : pre->logits) ASSERT_TRUE(std::isfinite(v));
  const double diff = RelDiff(pre->logits.data(), ref, V);
  EXPECT_GT(diff, 1e-6) << "bounded replay should differ from the full forward here";
  EXPECT_LT(diff, 10.0);
}

TEST(DecoderOnlyTest, PrefillAndDecodeEqualFullForward) {
  auto engine = MakeEngine(LoadTestModel("tiny-dec"));
  for (int n : {3, 50, 200}) {
    const auto prompt = RandomPrompt(n, 7 + n);
    PrefillOptions po;
    po.chunk_tokens = 48;
    GreedyRun run = RunGreedy(*engine, prompt, kSteps, po);
    ExpectMatchesFullForward(*engine, prompt, run, 1e-4);
  }
}

TEST(NoLocalWindowTest, CedWithWZeroEqualsFullForward) {
  auto edit = [](ModelConfig* c) {
    c->sliding_window = 0;
    c->replay_window = 1;
  };
  auto engine = MakeEngine(LoadTestModel("tiny", WeightSet::kFull, edit, "w0"));
  ASSERT_EQ(engine->config().ExactReplayWindow(), 1);
  for (int n : {1, 30, 150}) {
    const auto prompt = RandomPrompt(n, 3 + n);
    GreedyRun run = RunGreedy(*engine, prompt, kSteps);  // bounded R = 1 is exact for W = 0
    ExpectMatchesFullForward(*engine, prompt, run, 1e-4);
  }
}

TEST(NoLocalWindowTest, DecoderOnlyWithWZeroEqualsFullForward) {
  auto edit = [](ModelConfig* c) {
    c->sliding_window = 0;
    c->replay_window = 1;
    c->num_encoder_layers = c->num_layers;
  };
  auto engine = MakeEngine(LoadTestModel("tiny", WeightSet::kFull, edit, "w0dec"));
  const auto prompt = RandomPrompt(70, 5);
  GreedyRun run = RunGreedy(*engine, prompt, kSteps);
  ExpectMatchesFullForward(*engine, prompt, run, 1e-4);
}

}  // namespace
}  // namespace ced::testing
