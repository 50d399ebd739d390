#include "bench/sim/cost_model.h"

#include <memory>

#include "bench/sim/admission.h"
#include "bench/sim/prefix_cache_model.h"
#include "engine/model/presets.h"
#include "gtest/gtest.h"

namespace ced::sim {
namespace {

std::unique_ptr<CostModel> Make(const std::string& preset, const std::string& gpu = "h100") {
  CostModel::Options options;
  options.config = *PresetConfig(preset);
  options.gpu = *GpuByName(gpu);
  return *CostModel::Create(options);
}

TEST(CostModelTest, ReproducesSeedParameterCounts) {
  std::unique_ptr<CostModel> ced = Make("llama3-70b-ced");
  const Accounting& a = ced->accounting();
  EXPECT_EQ(FormatParamCount(a.params_per_prompt_token), "34.9B");
  EXPECT_EQ(FormatParamCount(a.params_per_generated_token), "69.5B");
  EXPECT_NEAR(a.prompt_to_generated_ratio, 0.502, 5e-4);
  // The decoder-only twin the simulator derives is the engine's own preset.
  std::unique_ptr<CostModel> dec = Make("llama3-70b");
  EXPECT_EQ(ComputeAccounting(DecoderOnlyTwin(ced->config())).params_per_prompt_token,
            dec->accounting().params_per_prompt_token);
  // Decoder-only prefill: every layer, no LM head (the 69.5B per generated
  // token include the 1.05B LM head).
  EXPECT_EQ(FormatParamCount(dec->accounting().params_per_prompt_token), "68.5B");
}

TEST(CostModelTest, CedPrefillOfALongPromptIsAboutTwiceAsFast) {
  std::unique_ptr<CostModel> ced = Make("llama3-70b-ced");
  std::unique_ptr<CostModel> dec = Make("llama3-70b");
  for (int64_t n : {8192, 32768}) {
    const double speedup = dec->PrefillSeconds(n, true, 4) / ced->PrefillSeconds(n, true, 4);
    EXPECT_GT(speedup, 1.9) << n;
    EXPECT_LT(speedup, 2.05) << n;
  }
}

TEST(CostModelTest, PrefillIsTheRooflineOfAccountingFigures) {
  std::unique_ptr<CostModel> ced = Make("llama3-70b-ced");
  const Accounting& a = ced->accounting();
  const ModelConfig& c = ced->config();
  const int64_t n = 4096;
  const double flops =
      2.0 * (n * a.params_per_prompt_token + 1 * a.params_per_replayed_token + a.lm_head_params) +
      AttentionFlopsForPositions(c, 0, n, 40) + AttentionFlopsForPositions(c, n - 1, n, 40);
  // Compute-bound at 4096 tokens: FLOPs / (4 x 989 TFLOP/s).
  EXPECT_DOUBLE_EQ(ced->PrefillSeconds(n, true, 4), flops / (4 * 989e12));
}

TEST(CostModelTest, DecodeBatchWorkIsTheSumOfSequences) {
  for (const char* preset : {"tiny", "llama3-70b-ced"}) {
    std::unique_ptr<CostModel> m = Make(preset);
    const ModelConfig& c = m->config();
    Work sum;
    int64_t ctx_sum = 0, local_sum = 0;
    for (int64_t ctx : {1, 5, 16, 17, 300}) {
      const Work w = m->DecodeSequenceWork(ctx);
      EXPECT_NEAR(w.bytes,
                  KvBytesReadPerDecodeStep(c, c.kv_cache_dtype, ctx) +
                      GlobalKvBytesPerToken(c, c.kv_cache_dtype),
                  1e-6 * w.bytes)
          << preset << " " << ctx;
      EXPECT_NEAR(w.flops,
                  2.0 * m->accounting().params_per_generated_token +
                      c.num_layers * AttentionFlopsPerLayer(c, ctx),
                  1e-9 * w.flops)
          << preset << " " << ctx;
      sum += w;
      ctx_sum += ctx;
      local_sum += c.sliding_window > 0 ? std::min<int64_t>(c.sliding_window, ctx) : 0;
    }
    const Work batch = m->DecodeBatchWork(5, ctx_sum, local_sum);
    EXPECT_NEAR(batch.flops, sum.flops, 1e-9 * sum.flops) << preset;
    EXPECT_NEAR(batch.bytes, sum.bytes, 1e-9 * sum.bytes) << preset;
  }
}

TEST(CostModelTest, KvRoomIsNinetyPercentOfHbmMinusWeights) {
  std::unique_ptr<CostModel> ced = Make("llama3-70b-ced");
  const double full = WeightSetBytes(ced->config(), WeightSet::kFull, 2);
  const double encoder = WeightSetBytes(ced->config(), WeightSet::kEncoderOnly, 2);
  EXPECT_DOUBLE_EQ(ced->KvRoomBytes(WeightSet::kFull, 4), 0.9 * 4 * 80e9 - full);
  EXPECT_DOUBLE_EQ(ced->KvRoomBytes(ced->PrefillWeightSet(false), 2), 0.9 * 2 * 80e9 - encoder);
  EXPECT_LT(encoder, 0.55 * full);
  std::unique_ptr<CostModel> h200 = Make("llama3-70b-ced", "h200");
  EXPECT_DOUBLE_EQ(h200->KvRoomBytes(WeightSet::kFull, 4), 0.9 * 4 * 141e9 - full);
}

TEST(CostModelTest, TransferCarriesGlobalKvAndHiddenStatesForDecodeReplay) {
  std::unique_ptr<CostModel> ced = Make("llama3-70b-ced");
  const double per_token = GlobalKvBytesPerToken(ced->config(), KvFormat::kBF16);
  EXPECT_DOUBLE_EQ(ced->TransferBytes(1000, false), 1000 * per_token);  // W = 0: no local ring
  EXPECT_DOUBLE_EQ(ced->TransferBytes(1000, true), 1000 * per_token + 1 * 8192 * 2);
  EXPECT_DOUBLE_EQ(ced->TransferSeconds(1000, false), 1000 * per_token / 50e9);
}

TEST(CostModelTest, RejectsUnknownGpuAndBadModel) {
  EXPECT_FALSE(GpuByName("a100").ok());
  CostModel::Options options;
  options.config = *PresetConfig("tiny");
  options.config.num_encoder_layers = 99;
  options.gpu = *GpuByName("h100");
  EXPECT_FALSE(CostModel::Create(options).ok());
}

TEST(AdmissionTest, ReservesPromptPlusMaxTokens) {
  EXPECT_EQ(BlocksForRequest(100, 60, 16), 10);
  DecodeKvPool pool(10, 16);
  std::vector<int> a, b;
  EXPECT_TRUE(pool.TryAdmit(100, 60, &a));
  EXPECT_EQ(a.size(), 10u);
  EXPECT_EQ(pool.free_blocks(), 0);
  EXPECT_FALSE(pool.TryAdmit(1, 1, &b));  // all-or-nothing, pool unchanged
  EXPECT_TRUE(b.empty());
  pool.Release(&a);
  EXPECT_EQ(pool.free_blocks(), 10);
  EXPECT_TRUE(pool.TryAdmit(100, 44, &b));  // 144 tokens: 9 blocks
  EXPECT_EQ(pool.free_blocks(), 1);
  DecodeKvPool small(9, 16);
  std::vector<int> c;
  EXPECT_FALSE(small.TryAdmit(100, 60, &c));  // can never fit
  EXPECT_EQ(small.free_blocks(), 9);
}

TEST(DeviceProfileTest, ParsesAndRoundTrips) {
  const std::string text =
      "# measured\nname cpu-test\npeak_flops 1.5e11\nhbm_bytes_per_s 2e10\n"
      "hbm_bytes 8e9\nbytes_per_param 4\ndecode_step_s 0.001  # fixed\nkv_room_bytes 268435456\n"
      "decode_colocated_slowdown 1.5\n";
  absl::StatusOr<GpuSpec> spec = ParseDeviceProfile(text, "p.txt");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "cpu-test");
  EXPECT_DOUBLE_EQ(spec->peak_flops, 1.5e11);
  EXPECT_DOUBLE_EQ(spec->bytes_per_param, 4);
  EXPECT_DOUBLE_EQ(spec->decode_step_s, 0.001);
  EXPECT_DOUBLE_EQ(spec->decode_colocated_slowdown, 1.5);
  EXPECT_DOUBLE_EQ(spec->prefill_colocated_slowdown, 1);  // not given: no effect
  absl::StatusOr<GpuSpec> again = ParseDeviceProfile(DeviceProfileText(*spec), "q.txt");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(DeviceProfileText(*again), DeviceProfileText(*spec));
}

TEST(DeviceProfileTest, BadInputNamesTheKey) {
  absl::StatusOr<GpuSpec> s = ParseDeviceProfile("peak_flops 1e11\nwarp_speed 3\n", "p.txt");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("warp_speed"), std::string::npos);
  s = ParseDeviceProfile("peak_flops fast\nhbm_bytes_per_s 1\nhbm_bytes 1\n", "p.txt");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("peak_flops"), std::string::npos);
  s = ParseDeviceProfile("peak_flops 1e11\n", "p.txt");  // missing required keys
  EXPECT_FALSE(s.ok());
  // A prefill scale of 0 would make every prefill free.
  s = ParseDeviceProfile("peak_flops 1e11\nhbm_bytes_per_s 1\nhbm_bytes 1\nprefill_scale 0\n",
                         "p.txt");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("prefill_scale"), std::string::npos);
  s = ParseDeviceProfile("peak_flops 1e11\nhbm_bytes_per_s 1\nhbm_bytes 1\nprefill_scale -2\n",
                         "p.txt");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("prefill_scale"), std::string::npos);
}

// `small` on a CPU-like profile (f32 weights) of the given rates.
CostModel::Options SmallOnCpu(double peak_flops, double bytes_per_s) {
  CostModel::Options options;
  options.config = *PresetConfig("small");
  options.gpu = GpuSpec{"cpu", peak_flops, bytes_per_s, 8e9};
  options.gpu.bytes_per_param = 4;
  return options;
}

// A device profile's costs beyond the roofline add to each step as stated.
TEST(DeviceProfileTest, OverheadsAddToSteps) {
  CostModel::Options options = SmallOnCpu(1e11, 2e10);
  std::unique_ptr<CostModel> bare = *CostModel::Create(options);
  options.gpu.prefill_step_s = 0.003;
  options.gpu.prefill_token_s = 1e-5;
  options.gpu.decode_step_s = 0.002;
  options.gpu.decode_seq_s = 0.0005;
  options.gpu.kv_room_bytes = 256 << 20;
  std::unique_ptr<CostModel> cpu = *CostModel::Create(options);
  EXPECT_NEAR(cpu->PrefillSeconds(512, true, 1) - bare->PrefillSeconds(512, true, 1),
              0.003 + 512e-5, 1e-12);
  const Work w = cpu->DecodeStepBaseWork();
  EXPECT_NEAR(cpu->DecodeStepSeconds(w, 4, 1) - bare->DecodeStepSeconds(w, 4, 1), 0.004, 1e-12);
  EXPECT_DOUBLE_EQ(cpu->KvRoomBytes(WeightSet::kFull, 1), 256 << 20);
  // f32 weights: the decode step reads 4 bytes per parameter.
  EXPECT_DOUBLE_EQ(w.bytes, 4.0 * cpu->accounting().params_per_generated_token);
  // The model's cache format (small: f32) sets the K/V bytes.
  EXPECT_DOUBLE_EQ(cpu->kv_bytes_per_token(),
                   GlobalKvBytesPerToken(options.config, KvFormat::kF32));
}

// prefill_scale multiplies every prefill's whole compute (roofline and the
// fixed and per-token costs), fresh or resumed, and no decode step.
TEST(DeviceProfileTest, PrefillScaleMultipliesPrefillsOnly) {
  CostModel::Options options = SmallOnCpu(1e11, 2e10);
  options.gpu.prefill_step_s = 0.003;
  options.gpu.prefill_token_s = 1e-5;
  options.gpu.decode_step_s = 0.002;
  std::unique_ptr<CostModel> base = *CostModel::Create(options);
  options.gpu.prefill_scale = 1.25;
  std::unique_ptr<CostModel> scaled = *CostModel::Create(options);
  EXPECT_NEAR(scaled->PrefillSeconds(512, true, 1), 1.25 * base->PrefillSeconds(512, true, 1),
              1e-12);
  EXPECT_NEAR(scaled->PrefillSeconds(2048, false, 1), 1.25 * base->PrefillSeconds(2048, false, 1),
              1e-12);
  EXPECT_NEAR(ResumedPrefillSeconds(*scaled, 4096, 3072, true, 1),
              1.25 * ResumedPrefillSeconds(*base, 4096, 3072, true, 1), 1e-12);
  EXPECT_NEAR(ResumedPrefillSeconds(*scaled, 4096, 4000, true, 1, /*continued=*/true),
              1.25 * ResumedPrefillSeconds(*base, 4096, 4000, true, 1, true), 1e-12);
  const Work w = scaled->DecodeStepBaseWork();
  EXPECT_DOUBLE_EQ(scaled->DecodeStepSeconds(w, 4, 1), base->DecodeStepSeconds(w, 4, 1));
  // Not given: 1; the key round-trips through the profile text.
  absl::StatusOr<GpuSpec> plain = ParseDeviceProfile(DeviceProfileText(base->gpu()), "p.txt");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_DOUBLE_EQ(plain->prefill_scale, 1);
  absl::StatusOr<GpuSpec> again = ParseDeviceProfile(DeviceProfileText(options.gpu), "p.txt");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_DOUBLE_EQ(again->prefill_scale, 1.25);
}

// A measured attention rate: attention's FLOPs at that rate, the matmuls'
// at peak_flops, in prefill and in a resumed prefill (hand arithmetic from
// the accounting figures).
TEST(DeviceProfileTest, AttentionRunsAtItsOwnRate) {
  CostModel::Options options = SmallOnCpu(2e11, 3e10);
  std::unique_ptr<CostModel> bare = *CostModel::Create(options);
  options.gpu.attention_flops_per_s = 5e10;
  std::unique_ptr<CostModel> cpu = *CostModel::Create(options);
  const ModelConfig& c = options.config;
  const Accounting& a = cpu->accounting();
  const int64_t n = 4096;
  const int64_t r = c.replay_window;
  const int e = c.num_encoder_layers;
  const double attn = AttentionFlopsForPositions(c, 0, n, e) +
                      AttentionFlopsForPositions(c, n - r, n, c.num_layers - e);
  const double matmul =
      2.0 * (n * a.params_per_prompt_token + r * a.params_per_replayed_token + a.lm_head_params);
  const Work w = cpu->PrefillWork(n, true);
  EXPECT_DOUBLE_EQ(w.attn_flops, attn);
  EXPECT_DOUBLE_EQ(w.flops, matmul + attn);
  EXPECT_NEAR(cpu->PrefillSeconds(n, true, 1), matmul / 2e11 + attn / 5e10, 1e-12);
  EXPECT_NEAR(bare->PrefillSeconds(n, true, 1), (matmul + attn) / 2e11, 1e-12);
  // A turn that resumes after 3,072 cached tokens: the new positions' work.
  const int64_t p = 3072;
  const Work resumed = ResumedPrefillWork(*cpu, n, p, true);
  const int64_t begin = ResumeEncoderStart(c, n, p);
  EXPECT_DOUBLE_EQ(resumed.attn_flops, AttentionFlopsForPositions(c, begin, n, e) +
                                           AttentionFlopsForPositions(c, n - r, n, c.num_layers - e));
  EXPECT_GT(ResumedPrefillSeconds(*cpu, n, p, true, 1),
            ResumedPrefillSeconds(*bare, n, p, true, 1) * 1.5)
      << "attention is most of a long resumed turn's work";
  // The key round-trips through the profile text.
  absl::StatusOr<GpuSpec> again = ParseDeviceProfile(DeviceProfileText(options.gpu), "p.txt");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_DOUBLE_EQ(again->attention_flops_per_s, 5e10);
}

}  // namespace
}  // namespace ced::sim
