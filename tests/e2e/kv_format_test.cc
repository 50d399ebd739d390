// Every lossy KV cache format end to end: a `ced cluster` (gateway, router,
// prefill and decode workers as processes, K/V over UCX between them) started
// with `--kv-format F` serves exactly the tokens of the colocated engine with
// the same cache format, with the replay on the prefill worker and on the
// decode worker, greedy and sampled; and the K/V that crossed the wire is in
// format F (its byte count is the format's, smaller than f32's). f32 is
// covered by cluster_test.cc. One cluster per format, on `tiny`.
#include <string>
#include <vector>

#include "engine/runtime/engine.h"
#include "engine/sampling/sampler.h"
#include "kernels/cpu/kv_codec.h"
#include "tests/e2e/cluster_fixture.h"
#include "tests/e2e/e2e_util.h"

namespace ced::testing {
namespace {

class E2eKvFormatTest : public ::testing::TestWithParam<std::string> {};

double KvBytesIn(const LocalCluster& cluster) {
  return ScrapeMetric(cluster.addresses().at("decode-0").at("metrics"),
                      "ced_kv_transfer_bytes_total{direction=\"in\"}")
      .value_or(0.0);
}

TEST_P(E2eKvFormatTest, DisaggregatedEqualsColocatedForBothReplayPlacements) {
  const std::string name = GetParam();
  KvFormat format;
  ASSERT_TRUE(kernels::ParseKvFormat(name, &format)) << name;
  const std::string model = MakeModelDir("tiny");
  LocalCluster cluster(model, {"--prefill", "1", "--decode", "1", "--kv-format", name});
  ASSERT_TRUE(cluster.ready()) << cluster.Log();
  ColocatedEngine colocated(model, format);
  ASSERT_TRUE(colocated.ok());
  ASSERT_EQ(colocated.engine().kv_format(), format);
  const ModelConfig& config = colocated.engine().config();

  // Greedy, bounded replay; the prompt is longer than R so the replay matters.
  // Each placement gets prompts of its own: the workers' prefix caches would
  // otherwise hold the first run's blocks, and less would cross the wire.
  constexpr int kPrompt = 150, kTokens = 24;
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.top_k = 40;
  sp.seed = 4321;

  for (auto on : {ced::v1::REPLAY_ON_PREFILL, ced::v1::REPLAY_ON_DECODE}) {
    const int salt = on == ced::v1::REPLAY_ON_PREFILL ? 0 : 100;
    const std::vector<int32_t> prompt = Prompt(kPrompt, 11 + salt);
    const std::vector<int32_t> greedy = colocated.Run(prompt, kTokens);
    // Sampled, exact replay.
    const std::vector<int32_t> sampled_prompt = Prompt(90, 12 + salt);
    const std::vector<int32_t> sampled =
        colocated.Run(sampled_prompt, 16, ReplayMode::kExact, sp);
    const double bytes_before = KvBytesIn(cluster);
    const GenResult r = Generate(cluster.gateway(), Request(prompt, kTokens, on));
    ASSERT_TRUE(r.status.ok()) << name << " replay_on " << on << ": " << r.status.error_message()
                               << "\n"
                               << cluster.Log();
    EXPECT_EQ(r.tokens, greedy) << name << " replay_on " << on;
    EXPECT_EQ(r.last.placement().replay_on(), on) << name;
    EXPECT_FALSE(r.last.placement().local_prefill()) << name << ": K/V must cross the wire";
    // The global K/V of the prompt arrived over the KV transport in this
    // format: at least its size, and (lossy formats) less than f32's would be.
    const double moved = KvBytesIn(cluster) - bytes_before;
    ModelConfig f32 = config;
    f32.kv_cache_dtype = KvFormat::kF32;
    EXPECT_GE(moved, static_cast<double>(Engine::GlobalRangeBytes(config, 0, kPrompt)))
        << name << " replay_on " << on;
    EXPECT_LT(moved, static_cast<double>(Engine::GlobalRangeBytes(f32, 0, kPrompt)))
        << name << " replay_on " << on;

    ced::v1::GenerateRequest req = Request(sampled_prompt, 16, on);
    req.set_replay_mode(ced::v1::REPLAY_MODE_EXACT);
    req.set_temperature(sp.temperature);
    req.set_top_k(sp.top_k);
    req.set_seed(sp.seed);
    const GenResult s = Generate(cluster.gateway(), req);
    ASSERT_TRUE(s.status.ok()) << name << ": " << s.status.error_message();
    EXPECT_EQ(s.tokens, sampled) << name << " sampled, replay_on " << on;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, E2eKvFormatTest,
                         ::testing::Values("bf16", "fp8_e4m3", "fp4_e2m1"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace ced::testing
