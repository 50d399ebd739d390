// Model configuration (`config.json` beside the weights), DESIGN.md §1.1.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/kv_codec.h"

namespace ced {

using kernels::KvFormat;

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
  std::vector<int> global_kv_source;  // size L after parsing (defaults filled in)
  double rope_theta = 500000.0;
  double rms_norm_eps = 1e-5;
  int max_position = 8192;
  KvFormat kv_cache_dtype = KvFormat::kF32;

  bool IsDecoderOnly() const { return num_encoder_layers == num_layers; }
  bool IsGlobalSource(int layer) const { return global_kv_source[layer] == layer; }
  bool IsEncoderLayer(int layer) const { return layer < num_encoder_layers; }
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
// 1 <= E <= L, R >= max(W, 1), sources <= layer and in the same half,
// even head_dim, fp4 rows a multiple of 16, ...). Errors name the key.
absl::Status ValidateConfig(const ModelConfig& config);

// Parses config JSON text; `filename` only labels errors ("config.json: key
// 'num_heads': ..."). Missing optional keys get defaults; unknown keys are
// ignored. The result is validated.
absl::StatusOr<ModelConfig> ParseConfigJson(std::string_view json, std::string_view filename);
absl::StatusOr<ModelConfig> LoadConfigFile(const std::string& path);
// Serializes every key of §1.1 (pretty-printed, stable key order).
std::string ConfigToJson(const ModelConfig& config);

}  // namespace ced
