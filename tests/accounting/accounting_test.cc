#include "engine/accounting/accounting.h"

#include <cmath>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace ced {
namespace {

using kernels::KvFormat;

ModelConfig Llama70bCed(int encoder_layers = 40) {
  ModelConfig c;
  c.vocab_size = 128256;
  c.hidden_size = 8192;
  c.num_layers = 80;
  c.num_encoder_layers = encoder_layers;
  c.num_heads = 64;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.intermediate_size = 28672;
  c.sliding_window = 0;
  c.replay_window = 1;
  c.global_kv_source.resize(c.num_layers);
  std::iota(c.global_kv_source.begin(), c.global_kv_source.end(), 0);
  return c;
}

// L=4, E=2, G=2, D=32 (rows of 64 values); layers 1 and 3 reuse the global
// K/V of layers 0 and 2, so two layers store global K/V.
ModelConfig SmallShared() {
  ModelConfig c;
  c.vocab_size = 300;
  c.hidden_size = 48;
  c.num_layers = 4;
  c.num_encoder_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.intermediate_size = 96;
  c.sliding_window = 8;
  c.replay_window = 8;
  c.global_kv_source = {0, 0, 2, 2};
  return c;
}

double Billions(int64_t p) { return static_cast<double>(p) / 1e9; }

TEST(AccountingTest, Llama70bShapedCedMatchesThePaper) {
  const ModelConfig c = Llama70bCed();
  const Accounting a = ComputeAccounting(c);
  // Per layer: wq 8192² + k,v 2·1024·8192 + wo 8192² + FFN 3·28672·8192.
  const int64_t layer = 67108864LL + 16777216LL + 67108864LL + 704643072LL;
  EXPECT_EQ(ComputeLayerMatmulParams(c, 0).total(), layer);
  EXPECT_EQ(a.encoder_params_per_prompt_token, 40 * layer);
  EXPECT_EQ(a.decoder_kv_params_per_prompt_token, 40 * 16777216LL);
  EXPECT_EQ(a.lm_head_params, 128256LL * 8192);
  EXPECT_EQ(a.params_per_generated_token, 80 * layer + 128256LL * 8192);

  EXPECT_NEAR(Billions(a.encoder_params_per_prompt_token), 34.2, 0.05);
  EXPECT_NEAR(Billions(a.decoder_kv_params_per_prompt_token), 0.67, 0.005);
  EXPECT_NEAR(Billions(a.params_per_prompt_token), 34.9, 0.05);
  EXPECT_NEAR(Billions(a.params_per_generated_token), 69.5, 0.05);
  EXPECT_NEAR(a.prompt_to_generated_ratio, 0.502, 0.0005);
  EXPECT_EQ(a.params_per_replayed_token, 40 * (layer - 16777216LL));

  const std::string table = FormatAccounting(c, a);
  EXPECT_NE(table.find("34.9B"), std::string::npos) << table;
  EXPECT_NE(table.find("69.5B"), std::string::npos) << table;
  EXPECT_NE(table.find("0.502"), std::string::npos) << table;
}

TEST(AccountingTest, DecoderOnlyTwinRatioIsOneMinusLmHeadShare) {
  const ModelConfig c = Llama70bCed(/*encoder_layers=*/80);
  const Accounting a = ComputeAccounting(c);
  EXPECT_EQ(a.decoder_kv_params_per_prompt_token, 0);
  EXPECT_EQ(a.params_per_replayed_token, 0);
  EXPECT_EQ(a.params_per_prompt_token + a.lm_head_params, a.params_per_generated_token);
  const double lm_share = static_cast<double>(a.lm_head_params) / a.params_per_generated_token;
  EXPECT_NEAR(a.prompt_to_generated_ratio, 1.0 - lm_share, 1e-12);
  EXPECT_NEAR(a.prompt_to_generated_ratio, 0.985, 0.001);
  // No split: every instance holds the whole model, and it has no encoder_norm.
  EXPECT_EQ(a.prefill_params, a.decode_params);
  EXPECT_EQ(a.decode_params, ComputeAccounting(Llama70bCed()).decode_params - 8192);
}

TEST(AccountingTest, WeightSetsOfTheCed) {
  const ModelConfig c = Llama70bCed();
  const Accounting a = ComputeAccounting(c);
  const int64_t d = 8192, v = 128256;
  const int64_t layer_matmuls = ComputeLayerMatmulParams(c, 0).total();
  const int64_t layer_all = layer_matmuls + 2 * d;
  // Full: embed + 80 layers + encoder_norm + final_norm + lm_head.
  EXPECT_EQ(a.decode_params, v * d + 80 * layer_all + d + d + v * d);
  EXPECT_EQ(a.prefill_replay_params, a.decode_params);
  // Encoder-only: embed + 40 layers + encoder_norm + decoder global K/V.
  EXPECT_EQ(a.prefill_params, v * d + 40 * layer_all + d + 40 * 2 * 1024 * d);
  EXPECT_EQ(WeightSetParams(c, WeightSet::kEncoderOnly), a.prefill_params);
  EXPECT_EQ(WeightSetBytes(c, WeightSet::kFull, 2.0), 2 * a.decode_params);
  // About half the weights on a prefill-only instance.
  EXPECT_NEAR(static_cast<double>(a.prefill_params) / a.decode_params, 0.5, 0.02);
}

TEST(AccountingTest, KvBytesPerTokenByHand) {
  const ModelConfig c = SmallShared();
  const Accounting a = ComputeAccounting(c);
  // 2 source layers × 2 rows (K, V) × 64 values.
  EXPECT_EQ(GlobalKvBytesPerToken(c, KvFormat::kF32), 2 * 2 * 64 * 4);   // 1024
  EXPECT_EQ(GlobalKvBytesPerToken(c, KvFormat::kBF16), 2 * 2 * 64 * 2);  // 512
  EXPECT_EQ(GlobalKvBytesPerToken(c, KvFormat::kFP8E4M3), 2 * 2 * 64);   // 256
  // fp4: 64 values = 32 bytes of nibbles + 4 scale bytes = 36 per row.
  EXPECT_EQ(GlobalKvBytesPerToken(c, KvFormat::kFP4E2M1), 2 * 2 * 36);  // 144
  EXPECT_EQ(a.global_kv_bytes_per_token[static_cast<int>(KvFormat::kF32)], 1024);
  EXPECT_EQ(a.global_kv_bytes_per_token[static_cast<int>(KvFormat::kFP4E2M1)], 144);
  // Local ring: W=8 tokens × 4 layers × 2 rows.
  EXPECT_EQ(LocalKvBytesPerSequence(c, KvFormat::kF32), 8 * 4 * 2 * 256);
  EXPECT_EQ(LocalKvBytesPerSequence(c, KvFormat::kFP4E2M1), 8 * 4 * 2 * 36);

  ModelConfig no_window = c;
  no_window.sliding_window = 0;
  EXPECT_EQ(LocalKvBytesPerSequence(no_window, KvFormat::kBF16), 0);

  // Without sharing every layer stores its own global K/V.
  ModelConfig own = c;
  own.global_kv_source = {0, 1, 2, 3};
  EXPECT_EQ(GlobalKvBytesPerToken(own, KvFormat::kBF16), 4 * 2 * 64 * 2);
  // An unfilled source list means "every layer is its own source".
  own.global_kv_source.clear();
  EXPECT_EQ(GlobalKvBytesPerToken(own, KvFormat::kBF16), 4 * 2 * 64 * 2);
}

TEST(AccountingTest, SmallSharedMatmulsByHand) {
  const ModelConfig c = SmallShared();
  const Accounting a = ComputeAccounting(c);
  const int64_t d = 48, q = 128, kv = 64, f = 96;
  const int64_t base = q * d + 2 * kv * d + d * q + 3 * f * d;  // wq, local k/v, wo, ffn
  const int64_t gkv = 2 * kv * d;
  // Layers 0 and 2 are sources; the decoder's only source is layer 2.
  EXPECT_EQ(a.encoder_params_per_prompt_token, 2 * base + gkv);
  EXPECT_EQ(a.decoder_kv_params_per_prompt_token, gkv);
  EXPECT_EQ(a.params_per_replayed_token, 2 * base);
  EXPECT_EQ(a.params_per_generated_token, 4 * base + 2 * gkv + 300 * d);
  EXPECT_EQ(PrefillMatmulParams(a, 100, 8),
            100 * a.params_per_prompt_token + 8 * a.params_per_replayed_token + 300 * d);
}

TEST(AccountingTest, AttentionFlopsAndKvReads) {
  ModelConfig c = SmallShared();  // H=4, D=32, W=8
  const double per_key = 4.0 * 4 * 32;
  EXPECT_DOUBLE_EQ(AttentionFlopsPerLayer(c, 5), per_key * (5 + 5));
  EXPECT_DOUBLE_EQ(AttentionFlopsPerLayer(c, 100), per_key * (100 + 8));
  EXPECT_DOUBLE_EQ(AttentionFlopsPerLayer(c, 0), 0.0);

  // The closed form equals the sum over queries.
  for (auto [b, e] : std::vector<std::pair<int, int>>{{0, 1}, {0, 50}, {3, 7}, {6, 40}, {20, 21}}) {
    double sum = 0;
    for (int t = b; t < e; ++t) sum += 3 * AttentionFlopsPerLayer(c, t + 1);
    EXPECT_DOUBLE_EQ(AttentionFlopsForPositions(c, b, e, 3), sum) << b << ".." << e;
  }
  EXPECT_DOUBLE_EQ(AttentionFlopsForPositions(c, 10, 10, 3), 0.0);

  // Decode step at context 100: 4 layers × 2 rows × (100 global + 8 local).
  EXPECT_DOUBLE_EQ(KvBytesReadPerDecodeStep(c, KvFormat::kBF16, 100), 4.0 * 2 * 128 * 108);
  c.sliding_window = 0;
  EXPECT_DOUBLE_EQ(AttentionFlopsPerLayer(c, 100), per_key * 100);
  EXPECT_DOUBLE_EQ(AttentionFlopsForPositions(c, 0, 4, 2), 2 * per_key * (1 + 2 + 3 + 4));
  EXPECT_DOUBLE_EQ(KvBytesReadPerDecodeStep(c, KvFormat::kFP4E2M1, 10), 4.0 * 2 * 36 * 10);
  EXPECT_DOUBLE_EQ(MatmulFlops(1000, 3), 6000.0);
}

TEST(AccountingTest, FormatHelpers) {
  EXPECT_EQ(FormatParamCount(34'890'000'000LL), "34.9B");
  EXPECT_EQ(FormatParamCount(671'088'640LL), "671.1M");
  EXPECT_EQ(FormatParamCount(12'000), "12.0K");
  EXPECT_EQ(FormatParamCount(512), "512");
  EXPECT_EQ(FormatBytes(288), "288 B");
  EXPECT_EQ(FormatBytes(1.5 * 1024 * 1024), "1.50 MiB");
  const std::string table = FormatAccounting(SmallShared(), ComputeAccounting(SmallShared()));
  EXPECT_NE(table.find("fp4_e2m1"), std::string::npos) << table;
  EXPECT_NE(table.find("CED"), std::string::npos) << table;
}

}  // namespace
}  // namespace ced
