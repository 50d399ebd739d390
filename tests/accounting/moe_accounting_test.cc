// Accounting of MoE layers and window-only layers (DESIGN.md §1.7, §1.1):
// activated parameters (k routed + shared + router), held parameters per
// weight set, global K/V bytes against hand arithmetic, and the
// DeepSeek-V4.1-Flash shape against the seed's numbers.
#include <cmath>

#include "engine/accounting/accounting.h"
#include "engine/model/presets.h"
#include "gtest/gtest.h"

namespace ced {
namespace {

using kernels::KvFormat;

TEST(MoeAccountingTest, TinyMoeByHand) {
  const ModelConfig c = *PresetConfig("tiny-moe");
  // d 128, H 4, G 2, D 32 (q 128, kv 64), W 16; 8 experts of F_e 64, k 2,
  // 1 shared; layer 0 dense (F 384), window-only; sources 1, 3, 4.
  const int64_t d = 128, attn = 2 * 128 * d + 2 * 64 * d, gkv = 2 * 64 * d;
  const int64_t expert = 3 * 64 * d, router = 8 * d, shared = expert;
  LayerMatmulParams l0 = ComputeLayerMatmulParams(c, 0);
  EXPECT_EQ(l0.global_kv, 0);
  EXPECT_EQ(l0.ffn, 3 * 384 * d);
  EXPECT_EQ(l0.expert, 0);
  LayerMatmulParams l1 = ComputeLayerMatmulParams(c, 1);
  EXPECT_EQ(l1.global_kv, gkv);
  EXPECT_EQ(l1.expert, expert);
  EXPECT_EQ(l1.ffn, router + 2 * expert + shared);
  EXPECT_EQ(l1.ffn_held, router + 8 * expert + shared);
  EXPECT_EQ(l1.total(), attn + gkv + router + 3 * expert);
  EXPECT_EQ(ComputeLayerMatmulParams(c, 2).global_kv, 0);  // reads layer 1

  const Accounting a = ComputeAccounting(c);
  const int64_t moe_act = router + 3 * expert;
  // Encoder: layer 0 dense, 1-3 MoE, sources 1 and 3; decoder K/V: layer 4.
  EXPECT_EQ(a.encoder_params_per_prompt_token, 4 * attn + 3 * 384 * d + 3 * moe_act + 2 * gkv);
  EXPECT_EQ(a.decoder_kv_params_per_prompt_token, gkv);
  EXPECT_EQ(a.params_per_replayed_token, 4 * (attn + moe_act));
  EXPECT_EQ(a.params_per_generated_token, 8 * attn + 3 * 384 * d + 7 * moe_act + 3 * gkv + 260 * d);
  EXPECT_EQ(a.decode_expert_params, 7 * 8 * expert);
  EXPECT_EQ(a.prefill_expert_params, 3 * 8 * expert);
  // Held: every expert, embed, norms (2 per layer), encoder/final norms, LM head.
  const int64_t held_layers = 8 * attn + 3 * 384 * d + 7 * (router + 9 * expert) + 3 * gkv;
  EXPECT_EQ(a.decode_params, held_layers + 16 * d + 2 * d + 2 * 260 * d);
  // Global K/V per token: 3 source layers x K and V x 64 values.
  EXPECT_EQ(a.global_kv_bytes_per_token[static_cast<int>(KvFormat::kF32)], 3 * 2 * 64 * 4);
  EXPECT_EQ(a.global_kv_bytes_per_token[static_cast<int>(KvFormat::kBF16)], 3 * 2 * 64 * 2);
  EXPECT_EQ(a.global_kv_bytes_per_token[static_cast<int>(KvFormat::kFP4E2M1)],
            3 * 2 * (32 + 4 * 1));
}

TEST(MoeAccountingTest, WindowOnlyLayersReadAndComputeNoGlobalKeys) {
  const ModelConfig c = *PresetConfig("tiny-moe");  // layer 0 window-only
  EXPECT_EQ(NumGlobalReadingLayers(c, 0, 8), 7);
  const double per_key = 4.0 * 4 * 32;
  // Position 99 (context 100): 7 layers of 100 global keys, 8 of 16 local.
  EXPECT_DOUBLE_EQ(AttentionFlopsForLayers(c, 99, 100, 0, 8), per_key * (7 * 100 + 8 * 16));
  EXPECT_DOUBLE_EQ(AttentionFlopsForLayers(c, 99, 100, 1, 8),
                   AttentionFlopsForPositions(c, 99, 100, 7));
  EXPECT_DOUBLE_EQ(KvBytesReadPerDecodeStep(c, KvFormat::kBF16, 100),
                   2.0 * 128 * (7 * 100 + 8 * 16));
}

TEST(MoeAccountingTest, ExpertsTouchedByAStep) {
  const ModelConfig c = *PresetConfig("small-moe");  // 16 experts, k 2
  EXPECT_DOUBLE_EQ(ExpectedExpertsTouched(c, 0), 0.0);
  EXPECT_NEAR(ExpectedExpertsTouched(c, 1), 2.0, 1e-12);
  EXPECT_NEAR(ExpectedExpertsTouched(c, 2), 16 * (1 - std::pow(14.0 / 16, 2)), 1e-12);
  EXPECT_NEAR(ExpectedExpertsTouched(c, 10000), 16.0, 1e-9);
  EXPECT_DOUBLE_EQ(MoeExtraParamsReadPerLayer(c, 1), 0.0);
  EXPECT_NEAR(MoeExtraParamsReadPerLayer(c, 10000), 14.0 * 3 * 256 * 512, 1e-3);
  EXPECT_EQ(NumMoeLayers(c, 0, 12), 11);
  EXPECT_EQ(ExpectedExpertsTouched(*PresetConfig("small"), 5), 0.0);
}

// The seed's numbers for DeepSeek-V4.1-Flash: ~552B in all, ~8B activated
// per prompt token, ~16B per generated token (each within 5%).
TEST(MoeAccountingTest, DeepSeekV41FlashMatchesTheSeed) {
  const ModelConfig c = *PresetConfig("deepseek-v4.1-flash");
  const Accounting a = ComputeAccounting(c);
  EXPECT_NEAR(a.decode_params / 552e9, 1.0, 0.05) << a.decode_params;
  EXPECT_NEAR(a.params_per_prompt_token / 8e9, 1.0, 0.05) << a.params_per_prompt_token;
  EXPECT_NEAR(a.params_per_generated_token / 16e9, 1.0, 0.05) << a.params_per_generated_token;
  // Global K/V: 4 source layers (2, 8, 14, 20) x K and V x G*D = 1536 values.
  EXPECT_EQ(a.global_kv_bytes_per_token[static_cast<int>(KvFormat::kFP8E4M3)], 4 * 2 * 1536);
  EXPECT_EQ(a.global_kv_bytes_per_token[static_cast<int>(KvFormat::kBF16)], 4 * 2 * 1536 * 2);
  EXPECT_EQ(a.global_kv_bytes_per_token[static_cast<int>(KvFormat::kFP4E2M1)], 4 * 2 * (768 + 96));
  // A prefill instance holds the encoder's 20 layers of experts and the
  // decoder's single global K/V projection: about half.
  EXPECT_NEAR(static_cast<double>(a.prefill_params) / a.decode_params, 0.5, 0.01);
  EXPECT_EQ(a.prefill_replay_params, a.decode_params);
  EXPECT_EQ(a.decode_expert_params, 40LL * 384 * 3 * 2304 * 5120);
  // The decoder-only twin: every layer per prompt token.
  const Accounting dec = ComputeAccounting(*PresetConfig("deepseek-v4.1-flash-dec"));
  EXPECT_EQ(dec.decode_params, a.decode_params - 5120);  // no encoder_norm
  EXPECT_EQ(dec.params_per_prompt_token + dec.lm_head_params, dec.params_per_generated_token);
  const std::string table = FormatAccounting(c, a);
  EXPECT_NE(table.find("384 routed (6 active) + 1 shared"), std::string::npos) << table;
  EXPECT_NE(table.find("global K/V source layers: 2 8 14 20 (window-only: 0 1)"), std::string::npos)
      << table;
  EXPECT_NE(table.find("prefill instance (encoder-only)"), std::string::npos) << table;
}

}  // namespace
}  // namespace ced
