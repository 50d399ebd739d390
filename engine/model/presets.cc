// Built with -ffp-contract=off so that the generated values do not depend on
// whether the compiler fuses multiply-adds for this CPU.
#include "engine/model/presets.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"
#include "kernels/cpu/kv_codec.h"

namespace ced {
namespace {

struct Preset {
  const char* name;
  bool shape_only;
  ModelConfig (*make)();
};

ModelConfig Tiny() {
  ModelConfig c;
  c.vocab_size = 260;
  c.hidden_size = 128;
  c.num_layers = 8;
  c.num_encoder_layers = 4;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.intermediate_size = 384;
  c.sliding_window = 16;
  c.replay_window = 16;
  c.max_position = 4096;
  for (int l = 0; l < c.num_layers; ++l) c.global_kv_source.push_back(l);
  return c;
}

ModelConfig Small() {
  ModelConfig c;
  c.vocab_size = 260;
  c.hidden_size = 512;
  c.num_layers = 12;
  c.num_encoder_layers = 6;
  c.num_heads = 8;
  c.num_kv_heads = 4;
  c.head_dim = 64;
  c.intermediate_size = 1536;
  c.sliding_window = 64;
  c.replay_window = 64;
  c.max_position = 8192;
  for (int l = 0; l < c.num_layers; ++l) c.global_kv_source.push_back(l);
  return c;
}

ModelConfig Llama70bCed() {
  ModelConfig c;
  c.vocab_size = 128256;
  c.hidden_size = 8192;
  c.num_layers = 80;
  c.num_encoder_layers = 40;
  c.num_heads = 64;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.intermediate_size = 28672;
  c.sliding_window = 0;
  c.replay_window = 1;
  c.rope_theta = 500000.0;
  c.max_position = 131072;
  c.kv_cache_dtype = KvFormat::kBF16;
  for (int l = 0; l < c.num_layers; ++l) c.global_kv_source.push_back(l);
  return c;
}

// tiny with the DeepSeekMoE FFN from layer 1 on and a V4.1-Flash-like source
// layout: layer 0 window-only, 1-2 -> 1, 3 -> 3, decoder 4-7 -> 4.
ModelConfig TinyMoe() {
  ModelConfig c = Tiny();
  c.global_kv_source = {-1, 1, 1, 3, 4, 4, 4, 4};
  MoeConfig m;
  m.num_routed_experts = 8;
  m.num_shared_experts = 1;
  m.num_experts_per_tok = 2;
  m.moe_intermediate_size = 64;
  m.first_dense_layers = 1;
  m.scoring = MoeScoring::kSigmoid;
  m.norm_topk_prob = true;
  m.routed_scaling_factor = 2.5;
  c.moe = m;
  return c;
}

// small with 16 routed experts (2 active) + 1 shared of width 256 from layer
// 1 on; layer 0 window-only, encoder sources 1 and 3, decoder source 6.
ModelConfig SmallMoe() {
  ModelConfig c = Small();
  c.global_kv_source = {-1, 1, 1, 3, 3, 3, 6, 6, 6, 6, 6, 6};
  MoeConfig m;
  m.num_routed_experts = 16;
  m.num_shared_experts = 1;
  m.num_experts_per_tok = 2;
  m.moe_intermediate_size = 256;
  m.first_dense_layers = 1;
  m.scoring = MoeScoring::kSoftmax;
  m.norm_topk_prob = true;
  m.routed_scaling_factor = 1.0;
  c.moe = m;
  return c;
}

// DeepSeek-V4.1-Flash as the seed describes it (DESIGN.md §1.1, §1.7):
// 40 layers split 20 + 20, d 5120, 1 shared + 384 routed experts, 6 active,
// expert width 2304, W = R = 128, layers 0-1 window-only, global K/V from
// source layers 2 (2-7), 8 (8-13), 14 (14-19) and 20 (20-39: the first
// decoder layer, projected from h_E like every decoder source).
// Not given by the seed, chosen here: attention H 64, G 8, D 192 (a GQA
// stand-in for V4's compressed attention); vocabulary 129280 (DeepSeek-V3's
// tokenizer); every layer MoE (first_dense_layers 0; intermediate_size is
// then unused); sigmoid scoring with normalised top-k gates scaled by 2.5
// (DeepSeek-V3's router); fp8_e4m3 K/V. The attention shape is tuned so that
// total (552B), per prompt token (8B) and per generated token (16B) all land
// within 2.5% of the seed's numbers.
ModelConfig DeepSeekV41Flash() {
  ModelConfig c;
  c.vocab_size = 129280;
  c.hidden_size = 5120;
  c.num_layers = 40;
  c.num_encoder_layers = 20;
  c.num_heads = 64;
  c.num_kv_heads = 8;
  c.head_dim = 192;
  c.intermediate_size = 18432;
  c.sliding_window = 128;
  c.replay_window = 128;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6;
  c.max_position = 1 << 20;
  c.kv_cache_dtype = KvFormat::kFP8E4M3;
  for (int l = 0; l < c.num_layers; ++l) {
    int src = -1;
    if (l >= 20) {
      src = 20;
    } else if (l >= 2) {
      src = 2 + (l - 2) / 6 * 6;
    }
    c.global_kv_source.push_back(src);
  }
  MoeConfig m;
  m.num_routed_experts = 384;
  m.num_shared_experts = 1;
  m.num_experts_per_tok = 6;
  m.moe_intermediate_size = 2304;
  m.first_dense_layers = 0;
  m.scoring = MoeScoring::kSigmoid;
  m.norm_topk_prob = true;
  m.routed_scaling_factor = 2.5;
  c.moe = m;
  return c;
}

ModelConfig DecoderOnly(ModelConfig c) {
  c.num_encoder_layers = c.num_layers;
  return c;
}

constexpr Preset kPresets[] = {
    {"tiny", false, [] { return Tiny(); }},
    {"tiny-dec", false, [] { return DecoderOnly(Tiny()); }},
    {"tiny-shared", false,
     [] {
       ModelConfig c = Tiny();
       for (int l = 0; l < c.num_layers; ++l) c.global_kv_source[l] = l - l % 2;
       return c;
     }},
    {"small", false, [] { return Small(); }},
    {"small-dec", false, [] { return DecoderOnly(Small()); }},
    {"tiny-moe", false, [] { return TinyMoe(); }},
    {"tiny-moe-dec", false, [] { return DecoderOnly(TinyMoe()); }},
    {"small-moe", false, [] { return SmallMoe(); }},
    {"small-moe-dec", false, [] { return DecoderOnly(SmallMoe()); }},
    {"llama3-70b-ced", true, [] { return Llama70bCed(); }},
    {"llama3-70b", true, [] { return DecoderOnly(Llama70bCed()); }},
    {"deepseek-v4.1-flash", true, [] { return DeepSeekV41Flash(); }},
    {"deepseek-v4.1-flash-dec", true, [] { return DecoderOnly(DeepSeekV41Flash()); }},
};

const Preset* FindPreset(std::string_view name) {
  for (const Preset& p : kPresets) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t Fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ULL;
  return h;
}

// xoshiro256** seeded through splitmix64; Box-Muller normals.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& s : s_) s = seed = SplitMix64(seed);
  }
  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }
  // Fills `out` with n standard normal values.
  void Normals(float* out, size_t n) {
    constexpr double kTwoPi = 6.283185307179586476925;
    constexpr double kUnit = 1.0 / 9007199254740992.0;  // 2^-53
    for (size_t i = 0; i < n; i += 2) {
      const double u1 = static_cast<double>((Next() >> 11) + 1) * kUnit;  // (0, 1]
      const double u2 = static_cast<double>(Next() >> 11) * kUnit;        // [0, 1)
      const double r = std::sqrt(-2.0 * std::log(u1));
      const double a = kTwoPi * u2;
      out[i] = static_cast<float>(r * std::cos(a));
      if (i + 1 < n) out[i + 1] = static_cast<float>(r * std::sin(a));
    }
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Values of one tensor: a pure function of (seed, name, shape, L).
std::vector<float> TensorValues(const ModelConfig& c, uint64_t seed, const TensorSpec& spec) {
  int64_t count = 1;
  for (int64_t d : spec.shape) count *= d;
  std::vector<float> v(static_cast<size_t>(count));
  Rng rng(SplitMix64(seed) ^ Fnv1a64(spec.name));
  rng.Normals(v.data(), v.size());
  const std::string_view name = spec.name;
  if (EndsWith(name, "norm")) {
    for (float& x : v) x = 1.0f + 0.05f * x;
    return v;
  }
  if (name == "embed") return v;
  double scale = 1.0 / std::sqrt(static_cast<double>(spec.shape[1]));  // fan-in
  if (EndsWith(name, ".wo") || EndsWith(name, ".w_down")) {
    scale /= std::sqrt(2.0 * c.num_layers);
  }
  const float s = static_cast<float>(scale);
  for (float& x : v) x *= s;
  return v;
}

std::vector<uint8_t> Encode(const std::vector<float>& v, StDtype dtype) {
  std::vector<uint8_t> out(v.size() * StDtypeSize(dtype));
  switch (dtype) {
    case StDtype::kF32:
      if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
      break;
    case StDtype::kBF16:
    case StDtype::kF16:
      for (size_t i = 0; i < v.size(); ++i) {
        const uint16_t h =
            dtype == StDtype::kBF16 ? kernels::FloatToBf16(v[i]) : kernels::FloatToFp16(v[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      break;
  }
  return out;
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid(), ".", counter++);
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(tmp, ": cannot create: ", std::strerror(errno)));
  }
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat(path, ": write failed: ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> PresetConfig(std::string_view name) {
  const Preset* p = FindPreset(name);
  if (p == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown preset '", std::string(name),
                                            "' (known: ", absl::StrJoin(PresetNames(), ", "), ")"));
  }
  return p->make();
}

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.push_back(p.name);
  return names;
}

bool PresetIsShapeOnly(std::string_view name) {
  const Preset* p = FindPreset(name);
  return p != nullptr && p->shape_only;
}

absl::Status MakeModel(const MakeModelOptions& options) {
  ModelConfig config;
  bool shape_only = options.shape_only;
  if (options.config) {
    config = *options.config;
    RETURN_IF_ERROR(ValidateConfig(config));
  } else {
    ASSIGN_OR_RETURN(config, PresetConfig(options.preset));
    shape_only |= PresetIsShapeOnly(options.preset);
  }
  StDtype dtype;
  if (options.dtype == "f32" || options.dtype.empty()) {
    dtype = StDtype::kF32;
  } else if (options.dtype == "bf16") {
    dtype = StDtype::kBF16;
  } else if (options.dtype == "f16") {
    dtype = StDtype::kF16;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype '", options.dtype, "' is not one of f32, bf16, f16"));
  }
  if (options.out_dir.empty()) return absl::InvalidArgumentError("out_dir is empty");
  std::error_code ec;
  std::filesystem::create_directories(options.out_dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.out_dir, ": cannot create directory: ", ec.message()));
  }
  if (!shape_only) {
    std::vector<TensorToWrite> tensors;
    for (const TensorSpec& spec : ExpectedTensors(config)) {
      tensors.push_back(
          {spec.name, dtype, spec.shape, Encode(TensorValues(config, options.seed, spec), dtype)});
    }
    RETURN_IF_ERROR(WriteSafetensors(options.out_dir + "/model.safetensors", tensors,
                                     {{"format", "pt"}, {"seed", std::to_string(options.seed)}}));
  }
  return WriteTextFile(options.out_dir + "/config.json", ConfigToJson(config));
}

}  // namespace ced
