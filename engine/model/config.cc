#include "engine/model/config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "engine/model/json_limits.h"
#include "nlohmann/json.hpp"

namespace ced {
namespace {

using Json = nlohmann::ordered_json;

// Upper bounds that keep every derived product (H*D, V*d, (L-E)*(W-1), ...)
// well inside int / int64 and every default-filled vector small.
constexpr int kMaxLayers = 1024;
constexpr int kMaxHeads = 1024;
constexpr int kMaxHeadDim = 1024;
constexpr int kMaxWidth = 1 << 20;     // vocab, hidden, intermediate
constexpr int kMaxPosition = 1 << 24;  // max_position, windows
constexpr int kMinVocab = 258;         // 256 bytes + BOS + EOS
constexpr int64_t kMaxConfigFileBytes = 16 << 20;
constexpr int kMaxJsonDepth = 16;  // a valid config nests 2 deep
constexpr int kMaxExperts = 4096;

// absl::string_view is not std::string_view in every absl build.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

absl::Status KeyError(std::string_view key, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("key '", Sv(key), "': ", Sv(what)));
}

absl::Status CheckRange(std::string_view key, int value, int lo, int hi) {
  if (value < lo || value > hi) {
    return KeyError(key, absl::StrCat(value, " is out of range [", lo, ", ", hi, "]"));
  }
  return absl::OkStatus();
}

// Reads an integer that fits in `int`. Returns false (no error) when absent
// or null.
absl::StatusOr<bool> ReadInt(const Json& obj, const char* key, int* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return false;
  if (it->is_number_unsigned()) {
    uint64_t v = it->get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
      return KeyError(key, absl::StrCat(v, " does not fit in a 32-bit integer"));
    }
    *out = static_cast<int>(v);
    return true;
  }
  if (it->is_number_integer()) {
    int64_t v = it->get<int64_t>();
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
      return KeyError(key, absl::StrCat(v, " does not fit in a 32-bit integer"));
    }
    *out = static_cast<int>(v);
    return true;
  }
  return KeyError(key, absl::StrCat("expected an integer, got ", it->type_name()));
}

absl::Status ReadRequiredInt(const Json& obj, const char* key, int* out) {
  ASSIGN_OR_RETURN(bool present, ReadInt(obj, key, out));
  if (!present) return KeyError(key, "missing (required)");
  return absl::OkStatus();
}

absl::StatusOr<bool> ReadDouble(const Json& obj, const char* key, double* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return false;
  if (!it->is_number()) {
    return KeyError(key, absl::StrCat("expected a number, got ", it->type_name()));
  }
  *out = it->get<double>();
  return true;
}

absl::StatusOr<bool> ReadBool(const Json& obj, const char* key, bool* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return false;
  if (!it->is_boolean()) {
    return KeyError(key, absl::StrCat("expected true or false, got ", it->type_name()));
  }
  *out = it->get<bool>();
  return true;
}

// The `moe` block (§1.7). Errors name the key inside the block; the caller
// prefixes "moe.".
absl::Status ParseMoe(const Json& obj, MoeConfig* m) {
  RETURN_IF_ERROR(ReadRequiredInt(obj, "num_routed_experts", &m->num_routed_experts));
  RETURN_IF_ERROR(ReadRequiredInt(obj, "num_experts_per_tok", &m->num_experts_per_tok));
  RETURN_IF_ERROR(ReadRequiredInt(obj, "moe_intermediate_size", &m->moe_intermediate_size));
  ASSIGN_OR_RETURN(bool has_shared, ReadInt(obj, "num_shared_experts", &m->num_shared_experts));
  if (!has_shared) m->num_shared_experts = 0;
  ASSIGN_OR_RETURN(bool has_dense, ReadInt(obj, "first_dense_layers", &m->first_dense_layers));
  if (!has_dense) m->first_dense_layers = 0;
  ASSIGN_OR_RETURN(bool has_norm, ReadBool(obj, "norm_topk_prob", &m->norm_topk_prob));
  if (!has_norm) m->norm_topk_prob = false;
  ASSIGN_OR_RETURN(bool has_scale,
                   ReadDouble(obj, "routed_scaling_factor", &m->routed_scaling_factor));
  if (!has_scale) m->routed_scaling_factor = 1.0;
  m->scoring = MoeScoring::kSoftmax;
  auto it = obj.find("scoring");
  if (it != obj.end() && !it->is_null()) {
    if (!it->is_string()) {
      return KeyError("scoring", absl::StrCat("expected a string, got ", it->type_name()));
    }
    const std::string& name = it->get_ref<const std::string&>();
    if (name == "softmax") {
      m->scoring = MoeScoring::kSoftmax;
    } else if (name == "sigmoid") {
      m->scoring = MoeScoring::kSigmoid;
    } else {
      return KeyError("scoring",
                      absl::StrCat("unknown scoring '", name, "' (expected softmax or sigmoid)"));
    }
  }
  return absl::OkStatus();
}

absl::Status PrefixKey(absl::Status s, std::string_view block) {
  if (s.ok()) return s;
  std::string_view msg(s.message().data(), s.message().size());
  constexpr std::string_view kKey = "key '";
  if (msg.substr(0, kKey.size()) == kKey) {
    return absl::Status(s.code(),
                        absl::StrCat(Sv(kKey), Sv(block), ".", Sv(msg.substr(kKey.size()))));
  }
  return absl::Status(s.code(), absl::StrCat(Sv(block), ": ", Sv(msg)));
}

absl::Status ValidateMoe(const ModelConfig& c, const MoeConfig& m) {
  RETURN_IF_ERROR(CheckRange("num_routed_experts", m.num_routed_experts, 1, kMaxExperts));
  RETURN_IF_ERROR(
      CheckRange("num_experts_per_tok", m.num_experts_per_tok, 1, m.num_routed_experts));
  RETURN_IF_ERROR(CheckRange("num_shared_experts", m.num_shared_experts, 0, kMaxExperts));
  RETURN_IF_ERROR(CheckRange("moe_intermediate_size", m.moe_intermediate_size, 1, kMaxWidth));
  if (static_cast<int64_t>(m.num_shared_experts) * m.moe_intermediate_size > kMaxWidth) {
    return KeyError("num_shared_experts",
                    absl::StrCat(m.num_shared_experts, " shared experts of width ",
                                 m.moe_intermediate_size, " exceed ", kMaxWidth, " in all"));
  }
  RETURN_IF_ERROR(CheckRange("first_dense_layers", m.first_dense_layers, 0, c.num_layers));
  if (!std::isfinite(m.routed_scaling_factor) || m.routed_scaling_factor <= 0) {
    return KeyError("routed_scaling_factor",
                    absl::StrCat(m.routed_scaling_factor, " is not a positive number"));
  }
  return absl::OkStatus();
}

absl::Status ParseObject(const Json& obj, ModelConfig* c) {
  RETURN_IF_ERROR(ReadRequiredInt(obj, "vocab_size", &c->vocab_size));
  RETURN_IF_ERROR(ReadRequiredInt(obj, "hidden_size", &c->hidden_size));
  RETURN_IF_ERROR(ReadRequiredInt(obj, "num_layers", &c->num_layers));
  RETURN_IF_ERROR(ReadRequiredInt(obj, "num_heads", &c->num_heads));
  RETURN_IF_ERROR(ReadRequiredInt(obj, "num_kv_heads", &c->num_kv_heads));
  RETURN_IF_ERROR(ReadRequiredInt(obj, "head_dim", &c->head_dim));
  RETURN_IF_ERROR(ReadRequiredInt(obj, "intermediate_size", &c->intermediate_size));
  // Bound L before it sizes any default below.
  RETURN_IF_ERROR(CheckRange("num_layers", c->num_layers, 1, kMaxLayers));

  ASSIGN_OR_RETURN(bool has_e, ReadInt(obj, "num_encoder_layers", &c->num_encoder_layers));
  if (!has_e) c->num_encoder_layers = std::max(1, c->num_layers / 2);
  ASSIGN_OR_RETURN(bool has_w, ReadInt(obj, "sliding_window", &c->sliding_window));
  if (!has_w) c->sliding_window = 0;
  ASSIGN_OR_RETURN(bool has_r, ReadInt(obj, "replay_window", &c->replay_window));
  if (!has_r) c->replay_window = std::max(c->sliding_window, 1);

  c->global_kv_source.clear();
  auto src = obj.find("global_kv_source");
  if (src == obj.end() || src->is_null()) {
    for (int l = 0; l < c->num_layers; ++l) c->global_kv_source.push_back(l);
  } else {
    if (!src->is_array()) {
      return KeyError("global_kv_source",
                      absl::StrCat("expected a list of layer indices, got ", src->type_name()));
    }
    if (src->size() > static_cast<size_t>(kMaxLayers)) {
      return KeyError("global_kv_source", absl::StrCat("has ", src->size(), " entries"));
    }
    for (size_t i = 0; i < src->size(); ++i) {
      const Json& v = (*src)[i];
      const bool fits = v.is_number_unsigned()
                            ? v.get<uint64_t>() <= static_cast<uint64_t>(kMaxLayers)
                            : v.is_number_integer() && v.get<int64_t>() >= -kMaxLayers &&
                                  v.get<int64_t>() <= kMaxLayers;
      if (!fits) {
        return KeyError("global_kv_source",
                        absl::StrCat("entry ", i, " is not a layer index: ", v.dump()));
      }
      c->global_kv_source.push_back(static_cast<int>(v.get<int64_t>()));
    }
  }

  ASSIGN_OR_RETURN(bool has_theta, ReadDouble(obj, "rope_theta", &c->rope_theta));
  if (!has_theta) c->rope_theta = 500000.0;
  ASSIGN_OR_RETURN(bool has_eps, ReadDouble(obj, "rms_norm_eps", &c->rms_norm_eps));
  if (!has_eps) c->rms_norm_eps = 1e-5;
  ASSIGN_OR_RETURN(bool has_pos, ReadInt(obj, "max_position", &c->max_position));
  if (!has_pos) c->max_position = 8192;

  c->kv_cache_dtype = KvFormat::kF32;
  auto kv = obj.find("kv_cache_dtype");
  if (kv != obj.end() && !kv->is_null()) {
    if (!kv->is_string()) {
      return KeyError("kv_cache_dtype", absl::StrCat("expected a string, got ", kv->type_name()));
    }
    const std::string& name = kv->get_ref<const std::string&>();
    if (!kernels::ParseKvFormat(name, &c->kv_cache_dtype)) {
      return KeyError(
          "kv_cache_dtype",
          absl::StrCat("unknown format '", name, "' (expected f32, bf16, fp8_e4m3 or fp4_e2m1)"));
    }
  }

  c->moe.reset();
  auto moe = obj.find("moe");
  if (moe != obj.end() && !moe->is_null()) {
    if (!moe->is_object()) {
      return KeyError("moe", absl::StrCat("expected an object, got ", moe->type_name()));
    }
    MoeConfig m;
    RETURN_IF_ERROR(PrefixKey(ParseMoe(*moe, &m), "moe"));
    c->moe = m;
  }
  return absl::OkStatus();
}

}  // namespace

const char* MoeScoringName(MoeScoring scoring) {
  return scoring == MoeScoring::kSigmoid ? "sigmoid" : "softmax";
}

int ModelConfig::NumGlobalSourceLayers() const {
  int n = 0;
  for (int l = 0; l < static_cast<int>(global_kv_source.size()); ++l) n += IsGlobalSource(l);
  return n;
}

int ModelConfig::GlobalSlot(int layer) const {
  if (layer < 0 || layer >= static_cast<int>(global_kv_source.size())) return -1;
  if (!IsGlobalSource(layer)) return -1;
  int slot = 0;
  for (int l = 0; l < layer; ++l) slot += IsGlobalSource(l);
  return slot;
}

int ModelConfig::ExactReplayWindow() const {
  if (sliding_window <= 1) return 1;
  int64_t r = static_cast<int64_t>(num_layers - num_encoder_layers) * (sliding_window - 1) + 1;
  return static_cast<int>(std::clamp<int64_t>(r, 1, std::numeric_limits<int>::max()));
}

absl::Status ValidateConfig(const ModelConfig& c) {
  RETURN_IF_ERROR(CheckRange("vocab_size", c.vocab_size, kMinVocab, kMaxWidth));
  RETURN_IF_ERROR(CheckRange("hidden_size", c.hidden_size, 1, kMaxWidth));
  RETURN_IF_ERROR(CheckRange("num_layers", c.num_layers, 1, kMaxLayers));
  RETURN_IF_ERROR(CheckRange("num_heads", c.num_heads, 1, kMaxHeads));
  RETURN_IF_ERROR(CheckRange("num_kv_heads", c.num_kv_heads, 1, kMaxHeads));
  RETURN_IF_ERROR(CheckRange("head_dim", c.head_dim, 2, kMaxHeadDim));
  RETURN_IF_ERROR(CheckRange("intermediate_size", c.intermediate_size, 1, kMaxWidth));
  RETURN_IF_ERROR(CheckRange("max_position", c.max_position, 1, kMaxPosition));
  if (c.num_heads % c.num_kv_heads != 0) {
    return KeyError("num_kv_heads",
                    absl::StrCat(c.num_kv_heads, " does not divide num_heads (", c.num_heads, ")"));
  }
  if (c.head_dim % 2 != 0) {
    return KeyError("head_dim", absl::StrCat(c.head_dim, " is odd (rotary embedding needs pairs)"));
  }
  RETURN_IF_ERROR(CheckRange("num_encoder_layers", c.num_encoder_layers, 1, c.num_layers));
  RETURN_IF_ERROR(CheckRange("sliding_window", c.sliding_window, 0, c.max_position));
  const int min_replay = std::max(c.sliding_window, 1);
  if (c.replay_window < min_replay) {
    return KeyError(
        "replay_window",
        absl::StrCat(c.replay_window, " is less than max(sliding_window, 1) = ", min_replay));
  }
  RETURN_IF_ERROR(CheckRange("replay_window", c.replay_window, min_replay, c.max_position));
  if (!std::isfinite(c.rope_theta) || c.rope_theta <= 0) {
    return KeyError("rope_theta", absl::StrCat(c.rope_theta, " is not a positive number"));
  }
  if (!std::isfinite(c.rms_norm_eps) || c.rms_norm_eps <= 0) {
    return KeyError("rms_norm_eps", absl::StrCat(c.rms_norm_eps, " is not a positive number"));
  }
  if (c.kv_cache_dtype == KvFormat::kFP4E2M1 && c.KvDim() % kernels::kFp4GroupSize != 0) {
    return KeyError("kv_cache_dtype",
                    absl::StrCat("fp4_e2m1 needs num_kv_heads * head_dim (", c.KvDim(),
                                 ") to be a multiple of ", kernels::kFp4GroupSize));
  }
  const auto& src = c.global_kv_source;
  if (static_cast<int>(src.size()) != c.num_layers) {
    return KeyError(
        "global_kv_source",
        absl::StrCat("has ", src.size(), " entries, expected num_layers = ", c.num_layers));
  }
  const int e = c.num_encoder_layers;
  int sources = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    const int s = src[l];
    if (s == -1) {  // window-only layer
      if (c.sliding_window == 0) {
        return KeyError("global_kv_source",
                        absl::StrCat("layer ", l, " has no global branch (-1), which needs a "
                                     "local window (sliding_window > 0)"));
      }
      continue;
    }
    if (s < 0 || s > l) {
      return KeyError("global_kv_source",
                      absl::StrCat("layer ", l, " reads layer ", s, "; a source must be in [0, ",
                                   l, "], or -1 for none"));
    }
    if ((s < e) != (l < e)) {
      return KeyError("global_kv_source",
                      absl::StrCat("layer ", l, " reads layer ", s,
                                   ", which is in the other half (num_encoder_layers = ", e, ")"));
    }
    if (src[s] != s) {
      return KeyError("global_kv_source", absl::StrCat("layer ", l, " reads layer ", s,
                                                       ", which is not its own source"));
    }
    sources += s == l;
  }
  if (sources == 0) {
    return KeyError("global_kv_source",
                    "no layer is its own source: the global K/V cache (what prefill sends and "
                    "the prefix cache keeps) would be empty");
  }
  if (c.moe.has_value()) RETURN_IF_ERROR(PrefixKey(ValidateMoe(c, *c.moe), "moe"));
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseConfigJson(std::string_view json, std::string_view filename) {
  if (!model_internal::JsonDepthWithin(json, kMaxJsonDepth)) {
    return absl::InvalidArgumentError(absl::StrCat(Sv(filename), ": JSON nests too deeply"));
  }
  Json obj;
  try {
    obj = Json::parse(json.begin(), json.end());
  } catch (const nlohmann::json::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(filename), ": invalid JSON at byte ", e.byte, ": ", e.what()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(Sv(filename), ": invalid JSON: ", e.what()));
  }
  if (!obj.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(filename), ": expected a JSON object, got ", obj.type_name()));
  }
  ModelConfig config;
  absl::Status status;
  try {
    status = ParseObject(obj, &config);
    if (status.ok()) status = ValidateConfig(config);
  } catch (const std::exception& e) {  // defensive: type checks above should prevent this
    status = absl::InvalidArgumentError(e.what());
  }
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat(Sv(filename), ": ", status.message()));
  }
  return config;
}

absl::StatusOr<ModelConfig> LoadConfigFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::InvalidArgumentError(msg);
  }
  std::string text;
  char buf[1 << 14];
  size_t n;
  bool too_large = false;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
    text.append(buf, n);
    if (static_cast<int64_t>(text.size()) > kMaxConfigFileBytes) {
      too_large = true;
      break;
    }
  }
  const bool read_error = std::ferror(f) != 0;
  std::fclose(f);
  if (read_error) return absl::InvalidArgumentError(absl::StrCat(path, ": read error"));
  if (too_large) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": larger than ", kMaxConfigFileBytes, " bytes"));
  }
  return ParseConfigJson(text, path);
}

std::string ConfigToJson(const ModelConfig& c) {
  Json j;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["num_layers"] = c.num_layers;
  j["num_heads"] = c.num_heads;
  j["num_kv_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["intermediate_size"] = c.intermediate_size;
  j["num_encoder_layers"] = c.num_encoder_layers;
  j["sliding_window"] = c.sliding_window;
  j["replay_window"] = c.replay_window;
  j["global_kv_source"] = Json::array();
  for (int s : c.global_kv_source) j["global_kv_source"].push_back(s);
  j["rope_theta"] = c.rope_theta;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["max_position"] = c.max_position;
  j["kv_cache_dtype"] = std::string(kernels::KvFormatName(c.kv_cache_dtype));
  if (c.moe.has_value()) {
    const MoeConfig& m = *c.moe;
    Json moe;
    moe["num_routed_experts"] = m.num_routed_experts;
    moe["num_shared_experts"] = m.num_shared_experts;
    moe["num_experts_per_tok"] = m.num_experts_per_tok;
    moe["moe_intermediate_size"] = m.moe_intermediate_size;
    moe["first_dense_layers"] = m.first_dense_layers;
    moe["scoring"] = std::string(MoeScoringName(m.scoring));
    moe["norm_topk_prob"] = m.norm_topk_prob;
    moe["routed_scaling_factor"] = m.routed_scaling_factor;
    j["moe"] = std::move(moe);
  }
  return j.dump(2) + "\n";
}

}  // namespace ced
