// Model weights resident in memory (DESIGN.md §1.2), loaded from
// `model.safetensors`. Tensors are held as f32 for the CPU backend.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/config.h"

namespace ced {

// Which tensors an instance holds.
enum class WeightSet {
  kFull,            // everything: a decode instance
  kEncoderOnly,     // embed, encoder layers, encoder_norm, decoder global_k/v
  kEncoderReplay,   // kEncoderOnly + decoder layers + final_norm + lm_head
};
const char* WeightSetName(WeightSet set);

// A 2-D (or 1-D, rows == 1) f32 tensor. `data` is null when not loaded.
struct Tensor {
  const float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  bool loaded() const { return data != nullptr; }
};

// One SwiGLU FFN (DESIGN.md §1.3): w_gate, w_up [F, d], w_down [d, F].
struct FfnWeights {
  Tensor w_gate, w_up, w_down;
};

struct LayerWeights {
  // w_gate / w_up / w_down: the dense FFN (not loaded on MoE layers).
  Tensor attn_norm, wq, local_k, local_v, global_k, global_v, wo, ffn_norm, w_gate, w_up, w_down;
  // MoE layers (§1.7): router [n_routed, d], the routed experts, and the
  // shared experts as one FFN of width n_shared * F_e (when n_shared > 0).
  Tensor router;
  std::vector<FfnWeights> experts;
  FfnWeights shared;
};

// Owns the memory behind every Tensor (a memory map for f32 files, converted
// buffers for bf16/f16). Immutable after load; safe to share across threads.
class ModelWeights {
 public:
  virtual ~ModelWeights() = default;
  const ModelConfig& config() const { return config_; }
  WeightSet set() const { return set_; }
  Tensor embed, encoder_norm, final_norm, lm_head;
  std::vector<LayerWeights> layers;
  // Bytes of weights resident in memory for this set.
  int64_t resident_bytes() const { return resident_bytes_; }

 protected:
  ModelConfig config_;
  WeightSet set_ = WeightSet::kFull;
  int64_t resident_bytes_ = 0;
};

// A model folder that can be run: config.json parses and model.safetensors
// exists. FAILED_PRECONDITION saying so when the folder holds a shape-only
// model (config.json alone), NOT_FOUND / INVALID_ARGUMENT from the config.
absl::Status CheckRunnableModel(const std::string& dir);

// Loads `dir/config.json` and the tensors of `set` from `dir/model.safetensors`,
// validating names, shapes, dtypes (F32, BF16, F16) and offsets. Tensors the
// set does not need are skipped (never read). Errors name the file and tensor.
absl::StatusOr<std::unique_ptr<ModelWeights>> LoadModelWeights(const std::string& dir,
                                                               WeightSet set);

// Whether `set` includes the tensor of that name for this config.
bool WeightSetNeeds(const ModelConfig& config, WeightSet set, const std::string& name);

// Every tensor name a model of this config must contain, with its
// safetensors shape ([rows, cols]; [d] for norms), in canonical order.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<TensorSpec> ExpectedTensors(const ModelConfig& config);

}  // namespace ced
