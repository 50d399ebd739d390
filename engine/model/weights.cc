#include "engine/model/weights.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <set>
#include <string_view>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "engine/model/safetensors.h"

namespace ced {
namespace {

// absl::string_view is not std::string_view in every absl build.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Splits "layers.{l}.{suffix}"; false for any other name.
bool SplitLayerName(std::string_view name, int* layer, std::string_view* suffix) {
  constexpr std::string_view kPrefix = "layers.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return false;
  name.remove_prefix(kPrefix.size());
  size_t dot = name.find('.');
  if (dot == std::string_view::npos || dot == 0) return false;
  auto [ptr, ec] = std::from_chars(name.data(), name.data() + dot, *layer);
  if (ec != std::errc() || ptr != name.data() + dot) return false;
  *suffix = name.substr(dot + 1);
  return true;
}

Tensor* FfnTensor(FfnWeights* w, std::string_view suffix) {
  if (suffix == "w_gate") return &w->w_gate;
  if (suffix == "w_up") return &w->w_up;
  if (suffix == "w_down") return &w->w_down;
  return nullptr;
}

// "experts.{e}.{w_gate|w_up|w_down}" and "shared.{...}" of an MoE layer.
Tensor* MoeTensor(LayerWeights* w, std::string_view suffix) {
  constexpr std::string_view kShared = "shared.", kExperts = "experts.";
  if (suffix.substr(0, kShared.size()) == kShared) {
    return FfnTensor(&w->shared, suffix.substr(kShared.size()));
  }
  if (suffix.substr(0, kExperts.size()) != kExperts) return nullptr;
  suffix.remove_prefix(kExperts.size());
  const size_t dot = suffix.find('.');
  if (dot == std::string_view::npos || dot == 0) return nullptr;
  int e = 0;
  auto [ptr, ec] = std::from_chars(suffix.data(), suffix.data() + dot, e);
  if (ec != std::errc() || ptr != suffix.data() + dot || e < 0 ||
      e >= static_cast<int>(w->experts.size())) {
    return nullptr;
  }
  return FfnTensor(&w->experts[e], suffix.substr(dot + 1));
}

Tensor* LayerTensor(LayerWeights* w, std::string_view suffix) {
  if (suffix == "attn_norm") return &w->attn_norm;
  if (suffix == "wq") return &w->wq;
  if (suffix == "local_k") return &w->local_k;
  if (suffix == "local_v") return &w->local_v;
  if (suffix == "global_k") return &w->global_k;
  if (suffix == "global_v") return &w->global_v;
  if (suffix == "wo") return &w->wo;
  if (suffix == "ffn_norm") return &w->ffn_norm;
  if (suffix == "w_gate") return &w->w_gate;
  if (suffix == "w_up") return &w->w_up;
  if (suffix == "w_down") return &w->w_down;
  if (suffix == "router") return &w->router;
  return MoeTensor(w, suffix);
}

// Holds the file map (for tensors used in place) and converted buffers.
class LoadedWeights final : public ModelWeights {
 public:
  LoadedWeights(const ModelConfig& config, WeightSet set) {
    config_ = config;
    set_ = set;
    layers.resize(config.num_layers);
    for (int l = 0; l < config.num_layers; ++l) {
      if (config.IsMoeLayer(l)) layers[l].experts.resize(config.moe->num_routed_experts);
    }
  }

  Tensor* Slot(const std::string& name) {
    if (name == "embed") return &embed;
    if (name == "encoder_norm") return &encoder_norm;
    if (name == "final_norm") return &final_norm;
    if (name == "lm_head") return &lm_head;
    int layer;
    std::string_view suffix;
    if (!SplitLayerName(name, &layer, &suffix) || layer < 0 ||
        layer >= static_cast<int>(layers.size())) {
      return nullptr;
    }
    return LayerTensor(&layers[layer], suffix);
  }

  absl::Status Load(const SafetensorsFile& file, const SafetensorsEntry& entry,
                    const TensorSpec& spec) {
    Tensor* t = Slot(spec.name);
    if (t == nullptr) return absl::InternalError(absl::StrCat("no slot for ", spec.name));
    t->rows = spec.shape.size() == 2 ? spec.shape[0] : 1;
    t->cols = spec.shape.back();
    if (const float* direct = file.DirectF32(entry)) {
      t->data = direct;
      uses_map_ = true;
    } else {
      buffers_.emplace_back(static_cast<size_t>(entry.num_elements));
      RETURN_IF_ERROR(file.ReadF32(spec.name, buffers_.back().data(), entry.num_elements));
      t->data = buffers_.back().data();
    }
    resident_bytes_ += entry.num_elements * static_cast<int64_t>(sizeof(float));
    return absl::OkStatus();
  }

  void KeepFile(std::unique_ptr<SafetensorsFile> file) {
    if (uses_map_) file_ = std::move(file);
  }

 private:
  bool uses_map_ = false;
  std::unique_ptr<SafetensorsFile> file_;
  std::vector<std::vector<float>> buffers_;
};

}  // namespace

const char* WeightSetName(WeightSet set) {
  switch (set) {
    case WeightSet::kFull:
      return "full";
    case WeightSet::kEncoderOnly:
      return "encoder-only";
    case WeightSet::kEncoderReplay:
      return "encoder+replay";
  }
  return "?";
}

std::vector<TensorSpec> ExpectedTensors(const ModelConfig& c) {
  const int64_t v = c.vocab_size, d = c.hidden_size, q = c.QDim(), kv = c.KvDim(),
                f = c.intermediate_size;
  std::vector<TensorSpec> out;
  out.push_back({"embed", {v, d}});
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = absl::StrCat("layers.", l, ".");
    out.push_back({p + "attn_norm", {d}});
    out.push_back({p + "wq", {q, d}});
    if (c.sliding_window > 0) {
      out.push_back({p + "local_k", {kv, d}});
      out.push_back({p + "local_v", {kv, d}});
    }
    if (l < static_cast<int>(c.global_kv_source.size()) && c.IsGlobalSource(l)) {
      out.push_back({p + "global_k", {kv, d}});
      out.push_back({p + "global_v", {kv, d}});
    }
    out.push_back({p + "wo", {d, q}});
    out.push_back({p + "ffn_norm", {d}});
    if (!c.IsMoeLayer(l)) {
      out.push_back({p + "w_gate", {f, d}});
      out.push_back({p + "w_up", {f, d}});
      out.push_back({p + "w_down", {d, f}});
      continue;
    }
    const MoeConfig& m = *c.moe;
    const int64_t fe = m.moe_intermediate_size, fs = m.SharedWidth();
    out.push_back({p + "router", {m.num_routed_experts, d}});
    for (int e = 0; e < m.num_routed_experts; ++e) {
      const std::string pe = absl::StrCat(p, "experts.", e, ".");
      out.push_back({pe + "w_gate", {fe, d}});
      out.push_back({pe + "w_up", {fe, d}});
      out.push_back({pe + "w_down", {d, fe}});
    }
    if (fs > 0) {
      out.push_back({p + "shared.w_gate", {fs, d}});
      out.push_back({p + "shared.w_up", {fs, d}});
      out.push_back({p + "shared.w_down", {d, fs}});
    }
  }
  if (!c.IsDecoderOnly()) out.push_back({"encoder_norm", {d}});
  out.push_back({"final_norm", {d}});
  out.push_back({"lm_head", {v, d}});
  return out;
}

bool WeightSetNeeds(const ModelConfig& config, WeightSet set, const std::string& name) {
  if (set != WeightSet::kEncoderOnly || config.IsDecoderOnly()) return true;
  if (name == "embed" || name == "encoder_norm") return true;
  int layer;
  std::string_view suffix;
  if (!SplitLayerName(name, &layer, &suffix)) return false;  // final_norm, lm_head
  if (layer < config.num_encoder_layers) return true;
  return suffix == "global_k" || suffix == "global_v";
}

absl::Status CheckRunnableModel(const std::string& dir) {
  RETURN_IF_ERROR(LoadConfigFile(dir + "/config.json").status());
  std::error_code ec;
  if (!std::filesystem::exists(dir + "/model.safetensors", ec)) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir,
        ": config.json but no model.safetensors: a shape-only model (ced model make "
        "--shape-only, or a preset too large to write such as deepseek-v4.1-flash) can be "
        "inspected with `ced model info`, not run"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadModelWeights(const std::string& dir,
                                                               WeightSet set) {
  RETURN_IF_ERROR(CheckRunnableModel(dir));
  ASSIGN_OR_RETURN(ModelConfig config, LoadConfigFile(dir + "/config.json"));
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                   SafetensorsFile::Open(dir + "/model.safetensors"));
  const std::string& path = file->path();
  auto tensor_error = [&](const std::string& name, std::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "': ", Sv(what)));
  };

  const std::vector<TensorSpec> expected = ExpectedTensors(config);
  std::set<std::string_view> expected_names;
  std::vector<const SafetensorsEntry*> entries;
  for (const TensorSpec& spec : expected) {
    expected_names.insert(spec.name);
    const SafetensorsEntry* e = file->Find(spec.name);
    if (e == nullptr) return tensor_error(spec.name, "missing");
    if (e->shape != spec.shape) {
      return tensor_error(spec.name, absl::StrCat("shape ", ShapeString(e->shape), ", expected ",
                                                  ShapeString(spec.shape)));
    }
    if (!e->type) {
      return tensor_error(spec.name,
                          absl::StrCat("dtype ", e->dtype, " (expected F32, BF16 or F16)"));
    }
    entries.push_back(e);
  }
  for (const SafetensorsEntry& e : file->tensors()) {
    if (expected_names.count(e.name) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor '", absl::CHexEscape(e.name),
                       "': unexpected (not part of a model with this config)"));
    }
  }

  auto weights = std::make_unique<LoadedWeights>(config, set);
  for (size_t i = 0; i < expected.size(); ++i) {
    if (!WeightSetNeeds(config, set, expected[i].name)) continue;
    RETURN_IF_ERROR(weights->Load(*file, *entries[i], expected[i]));
  }
  weights->KeepFile(std::move(file));
  return weights;
}

}  // namespace ced
