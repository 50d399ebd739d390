// Preset models for the bench: deterministic synthetic weights written once
// to a scratch directory and loaded as f32, plus a matching engine factory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/weights.h"
#include "engine/runtime/engine.h"

namespace ced::bench {

// Writes preset `name` (seed `seed`) under `scratch_dir/name` when missing and
// loads its full weight set. A "-dec" twin made with the same seed shares
// every tensor with its CED preset.
absl::StatusOr<std::shared_ptr<const ModelWeights>> LoadPreset(const std::string& scratch_dir,
                                                               const std::string& name,
                                                               uint64_t seed);

// An engine over `weights` with a global K/V budget of `kv_cache_bytes` and
// room for `max_sequences` running sequences.
absl::StatusOr<std::unique_ptr<Engine>> MakeBenchEngine(std::shared_ptr<const ModelWeights> weights,
                                                        int64_t kv_cache_bytes, int max_sequences);

// Where a bench writes its preset models: `dir` when given (kept), else a new
// temporary directory named after `tool` and the process, removed with this.
class ScratchDir {
 public:
  ScratchDir(const std::string& dir, const std::string& tool);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool owned_ = false;
};

// Deterministic pseudo-random byte tokens (xorshift), ids in [0, 256).
std::vector<int32_t> RandomPrompt(int n, uint64_t seed);

int Argmax(const float* v, int n);

}  // namespace ced::bench
