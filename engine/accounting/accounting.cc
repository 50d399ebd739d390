#include "engine/accounting/accounting.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ced {
namespace {

int64_t I64(int v) { return static_cast<int64_t>(v); }

// Tolerates an unfilled source list (hand-built configs in tests and tools).
bool OwnGlobalSource(const ModelConfig& c, int layer) {
  if (static_cast<int>(c.global_kv_source.size()) != c.num_layers) return true;
  return c.global_kv_source[layer] == layer;
}
bool ReadsGlobal(const ModelConfig& c, int layer) {
  if (static_cast<int>(c.global_kv_source.size()) != c.num_layers) return true;
  return c.global_kv_source[layer] >= 0;
}

int NumEncoderLayers(const ModelConfig& c) {
  return std::clamp(c.num_encoder_layers, 0, c.num_layers);
}

int64_t KvRowBytesOf(const ModelConfig& c, KvFormat format) {
  return static_cast<int64_t>(
      kernels::KvRowBytes(format, static_cast<size_t>(std::max(0, c.KvDim()))));
}

// Norm parameters of one layer (attn_norm + ffn_norm).
int64_t LayerNormParams(const ModelConfig& c) { return 2 * I64(c.hidden_size); }

// Sum of min(W, c) for c in [lo, hi] (inclusive, lo >= 1).
double SumMinWindow(int64_t window, int64_t lo, int64_t hi) {
  if (hi < lo) return 0;
  double sum = 0;
  int64_t ramp_hi = std::min(hi, window);  // c <= W contributes c
  if (ramp_hi >= lo) sum += static_cast<double>(lo + ramp_hi) * (ramp_hi - lo + 1) / 2.0;
  int64_t flat_lo = std::max(lo, window + 1);  // c > W contributes W
  if (hi >= flat_lo) sum += static_cast<double>(window) * (hi - flat_lo + 1);
  return sum;
}

}  // namespace

LayerMatmulParams ComputeLayerMatmulParams(const ModelConfig& c, int layer) {
  const int64_t d = c.hidden_size, q = c.QDim(), kv = c.KvDim(), f = c.intermediate_size;
  LayerMatmulParams p;
  p.wq = q * d;
  p.local_kv = c.sliding_window > 0 ? 2 * kv * d : 0;
  p.global_kv = OwnGlobalSource(c, layer) ? 2 * kv * d : 0;
  p.wo = d * q;
  if (c.IsMoeLayer(layer)) {
    const MoeConfig& m = *c.moe;
    const int64_t router = I64(m.num_routed_experts) * d;
    const int64_t shared = 3 * I64(m.SharedWidth()) * d;
    p.expert = 3 * I64(m.moe_intermediate_size) * d;
    p.ffn = router + m.num_experts_per_tok * p.expert + shared;
    p.ffn_held = router + m.num_routed_experts * p.expert + shared;
  } else {
    p.ffn = p.ffn_held = 3 * f * d;
  }
  return p;
}

int NumMoeLayers(const ModelConfig& c, int l0, int l1) {
  int n = 0;
  for (int l = std::max(0, l0); l < std::min(l1, c.num_layers); ++l) n += c.IsMoeLayer(l);
  return n;
}

double ExpectedExpertsTouched(const ModelConfig& c, int64_t tokens) {
  if (!c.moe.has_value() || tokens <= 0) return 0;
  const double n = c.moe->num_routed_experts, k = c.moe->num_experts_per_tok;
  if (k >= n) return n;
  return n * (1.0 - std::pow(1.0 - k / n, static_cast<double>(tokens)));
}

double MoeExtraParamsReadPerLayer(const ModelConfig& c, int64_t tokens) {
  if (!c.moe.has_value() || tokens <= 0) return 0;
  const double expert = 3.0 * c.moe->moe_intermediate_size * c.hidden_size;
  return std::max(0.0, ExpectedExpertsTouched(c, tokens) - c.moe->num_experts_per_tok) * expert;
}

int NumGlobalReadingLayers(const ModelConfig& c, int l0, int l1) {
  int n = 0;
  for (int l = std::max(0, l0); l < std::min(l1, c.num_layers); ++l) n += ReadsGlobal(c, l);
  return n;
}

int64_t GlobalKvBytesPerToken(const ModelConfig& c, KvFormat format) {
  int64_t sources = 0;
  for (int l = 0; l < c.num_layers; ++l) sources += OwnGlobalSource(c, l) ? 1 : 0;
  return sources * 2 * KvRowBytesOf(c, format);
}

int64_t LocalKvBytesPerSequence(const ModelConfig& c, KvFormat format) {
  if (c.sliding_window <= 0) return 0;
  return I64(c.sliding_window) * c.num_layers * 2 * KvRowBytesOf(c, format);
}

int64_t WeightSetParams(const ModelConfig& c, WeightSet set) {
  const int64_t d = c.hidden_size;
  const int e = NumEncoderLayers(c);
  const bool ced = e < c.num_layers;
  // Decoder-only models have no split: every instance holds everything.
  const bool full = set != WeightSet::kEncoderOnly || !ced;
  int64_t params = I64(c.vocab_size) * d;  // embed
  for (int l = 0; l < c.num_layers; ++l) {
    LayerMatmulParams m = ComputeLayerMatmulParams(c, l);
    if (full || l < e) {
      params += m.held() + LayerNormParams(c);
    } else {
      params += m.global_kv;
    }
  }
  if (ced) params += d;                           // encoder_norm
  if (full) params += d + I64(c.vocab_size) * d;  // final_norm + lm_head
  return params;
}

int64_t WeightSetBytes(const ModelConfig& c, WeightSet set, double bytes_per_param) {
  return static_cast<int64_t>(
      std::llround(static_cast<double>(WeightSetParams(c, set)) * bytes_per_param));
}

Accounting ComputeAccounting(const ModelConfig& c) {
  Accounting a;
  const int e = NumEncoderLayers(c);
  const bool ced = e < c.num_layers;
  a.lm_head_params = I64(c.vocab_size) * c.hidden_size;
  int64_t all_layers = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    LayerMatmulParams m = ComputeLayerMatmulParams(c, l);
    all_layers += m.total();
    if (!ced || l < e) {
      a.encoder_params_per_prompt_token += m.total();
    } else {
      a.decoder_kv_params_per_prompt_token += m.global_kv;
      a.params_per_replayed_token += m.total() - m.global_kv;
    }
  }
  a.params_per_prompt_token =
      a.encoder_params_per_prompt_token + a.decoder_kv_params_per_prompt_token;
  a.params_per_generated_token = all_layers + a.lm_head_params;
  a.prompt_to_generated_ratio =
      a.params_per_generated_token > 0
          ? static_cast<double>(a.params_per_prompt_token) / a.params_per_generated_token
          : 0.0;
  for (int i = 0; i < kernels::kNumKvFormats; ++i) {
    auto format = static_cast<KvFormat>(i);
    a.global_kv_bytes_per_token[i] = GlobalKvBytesPerToken(c, format);
    a.local_kv_bytes_per_sequence[i] = LocalKvBytesPerSequence(c, format);
  }
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerMatmulParams m = ComputeLayerMatmulParams(c, l);
    const int64_t experts = c.IsMoeLayer(l) ? c.moe->num_routed_experts * m.expert : 0;
    a.decode_expert_params += experts;
    if (!ced || l < e) a.prefill_expert_params += experts;
  }
  a.prefill_params = WeightSetParams(c, WeightSet::kEncoderOnly);
  a.prefill_replay_params = WeightSetParams(c, WeightSet::kEncoderReplay);
  a.decode_params = WeightSetParams(c, WeightSet::kFull);
  return a;
}

int64_t PrefillMatmulParams(const Accounting& a, int64_t prompt_tokens, int64_t replayed_tokens) {
  return prompt_tokens * a.params_per_prompt_token + replayed_tokens * a.params_per_replayed_token +
         a.lm_head_params;
}

double AttentionFlopsPerLayer(const ModelConfig& c, int64_t context) {
  if (context <= 0) return 0;
  const double per_key = 4.0 * c.num_heads * c.head_dim;
  int64_t local = c.sliding_window > 0 ? std::min<int64_t>(c.sliding_window, context) : 0;
  return per_key * static_cast<double>(context + local);
}

double AttentionFlopsForPositions(const ModelConfig& c, int64_t begin, int64_t end,
                                  int num_layers) {
  begin = std::max<int64_t>(begin, 0);
  if (end <= begin || num_layers <= 0) return 0;
  const double per_key = 4.0 * c.num_heads * c.head_dim;
  // Query t sees context t+1: contexts run over [begin+1, end].
  double keys = static_cast<double>(begin + 1 + end) * (end - begin) / 2.0;
  if (c.sliding_window > 0) keys += SumMinWindow(c.sliding_window, begin + 1, end);
  return per_key * keys * num_layers;
}

double AttentionFlopsForLayers(const ModelConfig& c, int64_t begin, int64_t end, int l0,
                               int l1) {
  l0 = std::max(0, l0);
  l1 = std::min(l1, c.num_layers);
  begin = std::max<int64_t>(begin, 0);
  if (end <= begin || l1 <= l0) return 0;
  const int readers = NumGlobalReadingLayers(c, l0, l1);
  // Every layer reads global keys: the uniform form, bit for bit.
  if (readers == l1 - l0) return AttentionFlopsForPositions(c, begin, end, l1 - l0);
  const double per_key = 4.0 * c.num_heads * c.head_dim;
  const double global = static_cast<double>(begin + 1 + end) * (end - begin) / 2.0;
  const double local =
      c.sliding_window > 0 ? SumMinWindow(c.sliding_window, begin + 1, end) : 0.0;
  return per_key * (global * readers + local * (l1 - l0));
}

double KvBytesReadPerDecodeStep(const ModelConfig& c, KvFormat format, int64_t context) {
  if (context <= 0) return 0;
  const double row = static_cast<double>(KvRowBytesOf(c, format));
  int64_t local = c.sliding_window > 0 ? std::min<int64_t>(c.sliding_window, context) : 0;
  const int readers = NumGlobalReadingLayers(c, 0, c.num_layers);
  if (readers == c.num_layers) {
    return 2.0 * row * c.num_layers * static_cast<double>(context + local);
  }
  return 2.0 * row *
         (static_cast<double>(readers) * context + static_cast<double>(c.num_layers) * local);
}

std::string FormatParamCount(int64_t params) {
  const double p = static_cast<double>(params);
  const double a = std::fabs(p);
  if (a >= 1e9) return absl::StrFormat("%.1fB", p / 1e9);
  if (a >= 1e6) return absl::StrFormat("%.1fM", p / 1e6);
  if (a >= 1e3) return absl::StrFormat("%.1fK", p / 1e3);
  return absl::StrCat(params);
}

std::string FormatBytes(double bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (std::fabs(bytes) < 1024) return absl::StrFormat("%.0f B", bytes);
  int unit = -1;
  while (std::fabs(bytes) >= 1024 && unit < 3) {
    bytes /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.2f %s", bytes, kUnits[unit]);
}

std::string FormatAccounting(const ModelConfig& c, const Accounting& a) {
  const bool ced = NumEncoderLayers(c) < c.num_layers;
  std::string out;
  absl::StrAppendFormat(&out, "shape: L=%d E=%d (%s) d=%d H=%d G=%d D=%d F=%d V=%d W=%d R=%d\n",
                        c.num_layers, c.num_encoder_layers, ced ? "CED" : "decoder-only",
                        c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, c.intermediate_size,
                        c.vocab_size, c.sliding_window, c.replay_window);
  if (c.moe.has_value()) {
    const MoeConfig& m = *c.moe;
    absl::StrAppendFormat(
        &out, "moe: %d routed (%d active) + %d shared experts, F_e=%d, %s%s x%g, layers %d..%d\n",
        m.num_routed_experts, m.num_experts_per_tok, m.num_shared_experts,
        m.moe_intermediate_size, MoeScoringName(m.scoring),
        m.norm_topk_prob ? ", normalised gates" : "", m.routed_scaling_factor,
        m.first_dense_layers, c.num_layers - 1);
  }
  if (static_cast<int>(c.global_kv_source.size()) == c.num_layers) {
    std::string sources, window_only;
    for (int l = 0; l < c.num_layers; ++l) {
      if (c.global_kv_source[l] == l) absl::StrAppend(&sources, sources.empty() ? "" : " ", l);
      if (c.global_kv_source[l] < 0) {
        absl::StrAppend(&window_only, window_only.empty() ? "" : " ", l);
      }
    }
    absl::StrAppendFormat(&out, "global K/V source layers: %s%s\n", sources,
                          window_only.empty() ? "" : " (window-only: " + window_only + ")");
  }
  auto row = [&out](const char* name, int64_t v) {
    absl::StrAppendFormat(&out, "  %-34s %10s\n", name, FormatParamCount(v));
  };
  absl::StrAppendFormat(&out, "parameters in all: %s", FormatParamCount(a.decode_params));
  if (a.decode_expert_params > 0) {
    absl::StrAppendFormat(&out, " (routed experts %s)", FormatParamCount(a.decode_expert_params));
  }
  out += "\n";
  out += c.moe.has_value() ? "matmul parameters touched (activated: k routed + shared + router)\n"
                           : "matmul parameters touched\n";
  row("per prompt token", a.params_per_prompt_token);
  row(ced ? "  encoder layers" : "  all layers", a.encoder_params_per_prompt_token);
  if (ced) row("  decoder global K/V projections", a.decoder_kv_params_per_prompt_token);
  if (ced) row("per replayed token (decoder)", a.params_per_replayed_token);
  row("LM head (once per prompt)", a.lm_head_params);
  row("per generated token", a.params_per_generated_token);
  absl::StrAppendFormat(&out, "  %-34s %10.3f\n", "prompt / generated",
                        a.prompt_to_generated_ratio);
  out += "parameters held (all tensors)          params   bf16 bytes    fp8 bytes\n";
  auto held = [&out](const char* name, int64_t v, int64_t experts) {
    absl::StrAppendFormat(&out, "  %-34s %10s %12s %12s", name, FormatParamCount(v),
                          FormatBytes(2.0 * static_cast<double>(v)),
                          FormatBytes(static_cast<double>(v)));
    if (experts > 0) absl::StrAppendFormat(&out, "  (routed experts %s)", FormatParamCount(experts));
    out += "\n";
  };
  if (ced) {
    held("prefill instance (encoder-only)", a.prefill_params, a.prefill_expert_params);
    held("prefill instance with replay", a.prefill_replay_params, a.decode_expert_params);
  } else {
    held("prefill instance", a.prefill_params, a.decode_expert_params);
  }
  held("decode instance", a.decode_params, a.decode_expert_params);
  out += "K/V cache           global/token   local/sequence\n";
  for (int i = 0; i < kernels::kNumKvFormats; ++i) {
    auto format = static_cast<KvFormat>(i);
    absl::StrAppendFormat(&out, "  %-16s %14s %16s%s\n", kernels::KvFormatName(format),
                          FormatBytes(static_cast<double>(a.global_kv_bytes_per_token[i])),
                          FormatBytes(static_cast<double>(a.local_kv_bytes_per_sequence[i])),
                          format == c.kv_cache_dtype ? "  (configured)" : "");
  }
  return out;
}

}  // namespace ced
