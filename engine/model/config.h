// Model configuration (`config.json` beside the weights), DESIGN.md §1.1.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/kv_codec.h"

namespace ced {

using kernels::KvFormat;

// How the router turns its logits into expert probabilities (DESIGN.md §1.7).
enum class MoeScoring { kSoftmax, kSigmoid };
const char* MoeScoringName(MoeScoring scoring);

// The `moe` block of config.json (DESIGN.md §1.7): the FFN of every layer
// l >= first_dense_layers is a DeepSeekMoE mixture: n_routed experts of which
// the top k (ties: lower index) run per token, plus n_shared always-on
// experts stored as one SwiGLU of width n_shared * F_e. Defaults of the
// optional keys: num_shared_experts 0, first_dense_layers 0, scoring
// "softmax", norm_topk_prob false, routed_scaling_factor 1.
struct MoeConfig {
  int num_routed_experts = 0;     // n_routed
  int num_shared_experts = 0;     // n_shared
  int num_experts_per_tok = 0;    // k
  int moe_intermediate_size = 0;  // F_e
  int first_dense_layers = 0;     // layers below this keep the dense FFN (F)
  MoeScoring scoring = MoeScoring::kSoftmax;
  bool norm_topk_prob = false;    // divide the k gates by their sum
  double routed_scaling_factor = 1.0;

  int SharedWidth() const { return num_shared_experts * moe_intermediate_size; }
};

// Plain value type; thread-compatible.
struct ModelConfig {
  int vocab_size = 0;
  int hidden_size = 0;          // d
  int num_layers = 0;           // L
  int num_heads = 0;            // H
  int num_kv_heads = 0;         // G
  int head_dim = 0;             // D
  int intermediate_size = 0;    // F
  int num_encoder_layers = 0;   // E; E == L means decoder-only
  int sliding_window = 0;       // W; 0 = no local branch
  int replay_window = 0;        // R; config default max(W, 1)
  // Size L after parsing (defaults filled in); -1 = no global branch.
  std::vector<int> global_kv_source;
  double rope_theta = 500000.0;
  double rms_norm_eps = 1e-5;
  int max_position = 8192;
  KvFormat kv_cache_dtype = KvFormat::kF32;
  std::optional<MoeConfig> moe;  // absent: every FFN is dense

  bool IsDecoderOnly() const { return num_encoder_layers == num_layers; }
  bool IsGlobalSource(int layer) const { return global_kv_source[layer] == layer; }
  // False for a window-only layer (global_kv_source = -1): no global keys.
  bool HasGlobalBranch(int layer) const { return global_kv_source[layer] >= 0; }
  bool IsEncoderLayer(int layer) const { return layer < num_encoder_layers; }
  // The layer's FFN is a mixture of experts (§1.7).
  bool IsMoeLayer(int layer) const { return moe.has_value() && layer >= moe->first_dense_layers; }
  int NumGlobalSourceLayers() const;
  // Index of `layer` among the global source layers (its slot in a global
  // K/V block), or -1 when the layer is not its own source.
  int GlobalSlot(int layer) const;
  // Replay length that makes replay exact: (L-E)(W-1)+1, at least 1.
  int ExactReplayWindow() const;
  int KvDim() const { return num_kv_heads * head_dim; }
  int QDim() const { return num_heads * head_dim; }
};

// Checks the invariants of DESIGN.md §1.1 (positive sizes, H % G == 0,
// 1 <= E <= L, R >= max(W, 1), sources <= layer and in the same half, -1
// only with W > 0, at least one source layer, even head_dim, fp4 rows a
// multiple of 16, ...) and of the `moe` block (§1.7: k <= n_routed, ...).
// Errors name the key ("moe.num_experts_per_tok" for the block's keys).
absl::Status ValidateConfig(const ModelConfig& config);

// Parses config JSON text; `filename` only labels errors ("config.json: key
// 'num_heads': ..."). Missing optional keys get defaults; unknown keys are
// ignored. The result is validated.
absl::StatusOr<ModelConfig> ParseConfigJson(std::string_view json, std::string_view filename);
absl::StatusOr<ModelConfig> LoadConfigFile(const std::string& path);
// Serializes every key of §1.1 and, when present, the `moe` block with all
// of its keys (pretty-printed, stable key order).
std::string ConfigToJson(const ModelConfig& config);

}  // namespace ced
