// Parameter, FLOP and K/V-byte accounting of a model shape (DESIGN.md §1).
//
// One piece of code for `ced model info` and the cluster simulator's cost
// model. Everything here is a pure function of a ModelConfig; thread-safe.
//
// Conventions:
// - "matmul parameters" are the weights a token multiplies against: no norms,
//   no embedding lookup. The LM head counts only where logits are produced.
// - The config should have passed ValidateConfig(); an empty or mis-sized
//   `global_kv_source` is read as "every layer is its own source".
// - Bytes of K/V use the cache formats of kernels/cpu/kv_codec.h (fp4
//   includes its per-16 scales).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "kernels/cpu/kv_codec.h"

namespace ced {

// Matmul parameters of one layer, by tensor group. On an MoE layer (§1.7)
// `ffn` counts what one token activates (router + k routed experts + the
// shared experts) and `ffn_held` every expert the layer holds.
struct LayerMatmulParams {
  int64_t wq = 0;
  int64_t local_kv = 0;   // local_k + local_v; 0 when W == 0
  int64_t global_kv = 0;  // global_k + global_v; 0 unless the layer is its own source
  int64_t wo = 0;
  int64_t ffn = 0;        // dense: w_gate + w_up + w_down; MoE: activated per token
  int64_t ffn_held = 0;   // dense: == ffn; MoE: router + all routed + shared experts
  int64_t expert = 0;     // one routed expert (3 F_e d); 0 on dense layers
  int64_t total() const { return wq + local_kv + global_kv + wo + ffn; }  // activated
  int64_t held() const { return wq + local_kv + global_kv + wo + ffn_held; }
};
LayerMatmulParams ComputeLayerMatmulParams(const ModelConfig& config, int layer);

struct Accounting {
  // Per prompt token (prefill without the replay).
  //   CED: encoder layers' full matmuls + decoder layers' global_k/v.
  //   Decoder-only: every layer's matmuls; decoder_kv part is 0.
  int64_t encoder_params_per_prompt_token = 0;
  int64_t decoder_kv_params_per_prompt_token = 0;
  int64_t params_per_prompt_token = 0;  // the sum of the two above
  // Replay, reported apart: per replayed token, the decoder layers' matmuls
  // except their global_k/v (0 when decoder-only).
  int64_t params_per_replayed_token = 0;
  // The LM head, run once per prompt for the first generated token.
  int64_t lm_head_params = 0;
  // Per generated (decode) token: every layer's matmuls + LM head.
  int64_t params_per_generated_token = 0;
  // params_per_prompt_token / params_per_generated_token.
  double prompt_to_generated_ratio = 0;

  // Indexed by static_cast<int>(KvFormat).
  // Global K/V stored per token: Σ over own-source layers of 2 rows of G·D.
  std::array<int64_t, kernels::kNumKvFormats> global_kv_bytes_per_token{};
  // Local K/V ring per sequence: W tokens × L layers × 2 rows (0 when W == 0).
  std::array<int64_t, kernels::kNumKvFormats> local_kv_bytes_per_sequence{};

  // All parameters (embed, norms, every matrix, every expert) held by an
  // instance; decode_params is the model's total.
  int64_t prefill_params = 0;         // WeightSet::kEncoderOnly
  int64_t prefill_replay_params = 0;  // WeightSet::kEncoderReplay (== decode_params)
  int64_t decode_params = 0;          // WeightSet::kFull
  // Of those, routed-expert parameters (0 without MoE).
  int64_t prefill_expert_params = 0;
  int64_t decode_expert_params = 0;
};

Accounting ComputeAccounting(const ModelConfig& config);

// Bytes of global K/V stored per token, and of the local ring per sequence.
int64_t GlobalKvBytesPerToken(const ModelConfig& config, KvFormat format);
int64_t LocalKvBytesPerSequence(const ModelConfig& config, KvFormat format);

// All parameters (incl. embedding and norms) in a weight set, and their bytes
// at `bytes_per_param` (4 for f32, 2 for bf16, ...).
int64_t WeightSetParams(const ModelConfig& config, WeightSet set);
int64_t WeightSetBytes(const ModelConfig& config, WeightSet set, double bytes_per_param);

// ---- Mixture of experts (§1.7) ----------------------------------------------

// Layers in [l0, l1) whose FFN is MoE.
int NumMoeLayers(const ModelConfig& config, int l0, int l1);
// Expected distinct routed experts that `tokens` tokens touch in one MoE
// layer when each picks k of n uniformly: n (1 - (1 - k/n)^tokens); k for
// one token, 0 without MoE.
double ExpectedExpertsTouched(const ModelConfig& config, int64_t tokens);
// Routed-expert parameters one MoE layer reads from memory for a step over
// `tokens` tokens beyond the k experts counted as activated:
// (ExpectedExpertsTouched - k) * expert. Weight bytes of a step = (activated
// params + NumMoeLayers x this) x bytes per param.
double MoeExtraParamsReadPerLayer(const ModelConfig& config, int64_t tokens);

// ---- FLOPs and bytes for the simulator's roofline model -------------------

// 2 FLOPs (multiply + add) per matmul parameter per token.
inline double MatmulFlops(int64_t params_per_token, int64_t tokens = 1) {
  return 2.0 * static_cast<double>(params_per_token) * static_cast<double>(tokens);
}

// Matmul parameters of prefilling `prompt_tokens` with `replayed_tokens`
// replayed, including the LM head once (for the first token).
int64_t PrefillMatmulParams(const Accounting& accounting, int64_t prompt_tokens,
                            int64_t replayed_tokens);

// Attention FLOPs of one query in one layer seeing `context` global keys
// (including itself): QK and PV = 4·H·D·context, plus 4·H·D·min(W, context)
// for the local branch. (A layer with a global branch; see
// AttentionFlopsForLayers for window-only layers.)
double AttentionFlopsPerLayer(const ModelConfig& config, int64_t context);

// Attention FLOPs of the queries at positions [begin, end) (query t sees
// context t+1), through `num_layers` layers. Closed form; use num_layers = E
// for the encoder part of a CED prefill, L - E for the replay, L for a
// decoder-only prefill.
double AttentionFlopsForPositions(const ModelConfig& config, int64_t begin, int64_t end,
                                  int num_layers);
// The same through layers [l0, l1), counting no global keys for window-only
// layers (global_kv_source = -1).
double AttentionFlopsForLayers(const ModelConfig& config, int64_t begin, int64_t end, int l0,
                               int l1);
// Layers in [l0, l1) that attend global keys (global_kv_source != -1).
int NumGlobalReadingLayers(const ModelConfig& config, int l0, int l1);

// K/V bytes one sequence reads in one decode step at `context` tokens: every
// layer with a global branch reads the global K/V of its source layer
// (context tokens; shared sources are read once per reading layer) and every
// layer its local ring (min(W, context) tokens).
double KvBytesReadPerDecodeStep(const ModelConfig& config, KvFormat format, int64_t context);

// ---- Printing -------------------------------------------------------------

// "34.9B", "671.1M", "12.0K", "512".
std::string FormatParamCount(int64_t params);
// "1.25 MiB", "288 B".
std::string FormatBytes(double bytes);
// A human-readable multi-line table of the accounting: billions to one decimal
// place, the ratio with three decimals.
std::string FormatAccounting(const ModelConfig& config, const Accounting& accounting);

}  // namespace ced
