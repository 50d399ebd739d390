// Named model shapes and a generator of deterministic random weights for
// them, so that tests, benches and demos need no downloaded checkpoint.
//
// Presets (V = 260 is the byte tokenizer's vocabulary, rounded up):
//   tiny            V 260, d 128, L 8 (E 4), H 4, G 2, D 32, F 384, W 16, R 16
//   tiny-dec        tiny with E = L (decoder-only baseline)
//   tiny-shared     tiny with global K/V shared by layer pairs (0,0,2,2,4,4,6,6)
//   small           V 260, d 512, L 12 (E 6), H 8, G 4, D 64, F 1536, W 64, R 64 (~41M params)
//   small-dec       small with E = L
//   tiny-moe        tiny with MoE FFNs from layer 1 (8 routed, 2 active, 1
//                   shared, F_e 64, sigmoid, normalised gates x 2.5) and
//                   sources (-1, 1, 1, 3, 4, 4, 4, 4): layer 0 window-only
//   tiny-moe-dec    tiny-moe with E = L
//   small-moe       small with MoE FFNs from layer 1 (16 routed, 2 active, 1
//                   shared, F_e 256, softmax, normalised) and sources
//                   (-1, 1, 1, 3, 3, 3, 6, ...) (~95M params)
//   small-moe-dec   small-moe with E = L
//   llama3-70b-ced  Llama-3-70B shape split 40 + 40, W 0 (shape only)
//   llama3-70b      the same with E = L (shape only)
//   deepseek-v4.1-flash      DeepSeek-V4.1-Flash (DESIGN.md §1.7; shape only):
//                   40 layers 20 + 20, d 5120, 384 routed + 1 shared experts
//                   of width 2304, 6 active, W = R = 128, sources 2/8/14/20,
//                   layers 0-1 window-only; attention H 64, G 8, D 192 and
//                   V 129280 chosen here (see presets.cc)
//   deepseek-v4.1-flash-dec  the same with E = L (shape only)
// A "-dec" twin has exactly the tensors and bytes of its CED preset, minus
// encoder_norm: every tensor is drawn from its own generator seeded by
// (seed, tensor name), so comparisons run on the same weights.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/config.h"

namespace ced {

// Error (naming the known presets) when `name` is not a preset.
absl::StatusOr<ModelConfig> PresetConfig(std::string_view name);
// Every preset name, in the order listed above.
std::vector<std::string> PresetNames();
// True for presets too large to materialize (only config.json is written).
bool PresetIsShapeOnly(std::string_view name);

struct MakeModelOptions {
  std::string preset;                 // one of PresetNames(), unless `config` is set
  std::optional<ModelConfig> config;  // custom shape; used instead of `preset`
  uint64_t seed = 0;
  std::string out_dir;        // created when missing
  std::string dtype = "f32";  // stored weight type: "f32" (or empty), "bf16", "f16"
  bool shape_only = false;    // write only config.json
};

// Writes `out_dir/config.json` and, unless shape-only (by option or by
// preset), `out_dir/model.safetensors` with deterministic random weights:
// the same options give byte-identical files. Files are replaced atomically.
// Scales keep activations in range over many layers: linear weights
// N(0,1)/sqrt(fan_in), wo and w_down further scaled by 1/sqrt(2L), norms
// 1 + N(0, 0.05^2), embed N(0,1).
absl::Status MakeModel(const MakeModelOptions& options);

}  // namespace ced
