#include "bench/engine/bench_models.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "engine/common/status.h"
#include "engine/model/presets.h"

namespace ced::bench {

ScratchDir::ScratchDir(const std::string& dir, const std::string& tool) : path_(dir) {
  if (path_.empty()) {
    path_ =
        (std::filesystem::temp_directory_path() / (tool + "_" + std::to_string(getpid()))).string();
    owned_ = true;
  }
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  if (owned_) std::filesystem::remove_all(path_, ec);
}

absl::StatusOr<std::shared_ptr<const ModelWeights>> LoadPreset(const std::string& scratch_dir,
                                                               const std::string& name,
                                                               uint64_t seed) {
  const std::string dir = scratch_dir + "/" + name + "_seed" + std::to_string(seed);
  std::error_code ec;
  if (!std::filesystem::exists(dir + "/model.safetensors", ec)) {
    MakeModelOptions mo;
    mo.preset = name;
    mo.seed = seed;
    mo.out_dir = dir;
    RETURN_IF_ERROR(MakeModel(mo));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ModelWeights> weights, LoadModelWeights(dir, WeightSet::kFull));
  return std::shared_ptr<const ModelWeights>(std::move(weights));
}

absl::StatusOr<std::unique_ptr<Engine>> MakeBenchEngine(std::shared_ptr<const ModelWeights> weights,
                                                        int64_t kv_cache_bytes, int max_sequences) {
  EngineOptions o;
  o.kv_cache_bytes = kv_cache_bytes;
  o.max_sequences = max_sequences;
  return Engine::CreateWithWeights(o, std::move(weights));
}

std::vector<int32_t> RandomPrompt(int n, uint64_t seed) {
  std::vector<int32_t> out(n);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    out[i] = static_cast<int32_t>(s % 256);
  }
  return out;
}

int Argmax(const float* v, int n) { return static_cast<int>(std::max_element(v, v + n) - v); }

}  // namespace ced::bench
