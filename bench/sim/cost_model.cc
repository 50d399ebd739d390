#include "bench/sim/cost_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"

namespace ced::sim {

ModelConfig DecoderOnlyTwin(const ModelConfig& config) {
  ModelConfig twin = config;
  twin.num_encoder_layers = twin.num_layers;
  return twin;
}

absl::StatusOr<std::unique_ptr<CostModel>> CostModel::Create(const Options& options) {
  RETURN_IF_ERROR(ValidateConfig(options.config));
  if (!(options.gpu.peak_flops > 0) || !(options.gpu.hbm_bytes_per_s > 0) ||
      !(options.gpu.hbm_bytes > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cost model: GPU '", options.gpu.name, "' needs positive specs"));
  }
  if (!(options.bytes_per_param >= 0) || !(options.link_bytes_per_s > 0) ||
      !(options.kv_room_fraction > 0 && options.kv_room_fraction <= 1)) {
    return absl::InvalidArgumentError(
        "cost model: bytes_per_param must be >= 0, link bandwidth > 0, kv_room_fraction in (0, 1]");
  }
  return std::unique_ptr<CostModel>(new CostModel(options));
}

CostModel::CostModel(const Options& options)
    : options_(options), accounting_(ComputeAccounting(options.config)) {
  const ModelConfig& c = options_.config;
  bytes_per_param_ =
      options_.bytes_per_param > 0 ? options_.bytes_per_param : options_.gpu.bytes_per_param;
  kv_format_ = options_.kv_format.value_or(c.kv_cache_dtype);
  link_bytes_per_s_ = options_.gpu.link_bytes_per_s > 0 ? options_.gpu.link_bytes_per_s
                                                        : options_.link_bytes_per_s;
  kv_bytes_per_token_ = static_cast<double>(GlobalKvBytesPerToken(c, kv_format_));
  // KvBytesReadPerDecodeStep(ctx) = g * ctx + l * min(W, ctx).
  const int w = c.sliding_window;
  const double at_one = KvBytesReadPerDecodeStep(c, kv_format_, 1);
  if (w == 0) {
    kv_read_global_ = at_one;
  } else {
    kv_read_global_ = KvBytesReadPerDecodeStep(c, kv_format_, w + 1) -
                      KvBytesReadPerDecodeStep(c, kv_format_, w);
    kv_read_local_ = at_one - kv_read_global_;
  }
  // AttentionFlopsPerLayer(ctx) = 4HD * (ctx + min(W, ctx)), global keys
  // for every layer but the window-only ones (source -1), local for all.
  const double per_key = AttentionFlopsPerLayer(c, 1) / (w > 0 ? 2.0 : 1.0);
  attn_flops_global_ = per_key * NumGlobalReadingLayers(c, 0, c.num_layers);
  attn_flops_local_ = w > 0 ? per_key * c.num_layers : 0;
}

int64_t CostModel::ReplayedTokens(int64_t prompt) const {
  if (decoder_only()) return 0;
  return std::min<int64_t>(options_.config.replay_window, prompt);
}

Work CostModel::PrefillWork(int64_t prompt, bool replay_here) const {
  const ModelConfig& c = options_.config;
  const Accounting& a = accounting_;
  Work work;
  if (decoder_only()) {
    const int64_t params = PrefillMatmulParams(a, prompt, 0);
    work.attn_flops = AttentionFlopsForLayers(c, 0, prompt, 0, c.num_layers);
    work.flops = MatmulFlops(params) + work.attn_flops;
    work.bytes = (static_cast<double>(a.params_per_prompt_token + a.lm_head_params) +
                  NumMoeLayers(c, 0, c.num_layers) * MoeExtraParamsReadPerLayer(c, prompt)) *
                 bytes_per_param_;
  } else {
    const int64_t r = replay_here ? ReplayedTokens(prompt) : 0;
    const int64_t params = replay_here ? PrefillMatmulParams(a, prompt, r)
                                       : prompt * a.params_per_prompt_token;
    const int e = c.num_encoder_layers;
    work.attn_flops = AttentionFlopsForLayers(c, 0, prompt, 0, e) +
                      AttentionFlopsForLayers(c, prompt - r, prompt, e, c.num_layers);
    work.flops = MatmulFlops(params) + work.attn_flops;
    const int64_t touched =
        a.params_per_prompt_token + (replay_here ? a.params_per_replayed_token + a.lm_head_params : 0);
    // MoE: the prompt's tokens touch more routed experts than one token's k.
    const double experts = NumMoeLayers(c, 0, e) * MoeExtraParamsReadPerLayer(c, prompt) +
                           NumMoeLayers(c, e, c.num_layers) * MoeExtraParamsReadPerLayer(c, r);
    work.bytes = (static_cast<double>(touched) + experts) * bytes_per_param_;
  }
  work.bytes += static_cast<double>(prompt) * kv_bytes_per_token_;  // K/V written
  return work;
}

Work CostModel::DecodeReplayWork(int64_t prompt) const {
  Work work;
  if (decoder_only()) return work;
  const ModelConfig& c = options_.config;
  const int64_t r = ReplayedTokens(prompt);
  const int decoder_layers = c.num_layers - c.num_encoder_layers;
  work.attn_flops =
      AttentionFlopsForLayers(c, prompt - r, prompt, c.num_encoder_layers, c.num_layers);
  work.flops = MatmulFlops(r * accounting_.params_per_replayed_token + accounting_.lm_head_params) +
               work.attn_flops;
  // The decoder layers read the prompt's global K/V once (flash-style).
  work.bytes = KvBytesReadPerDecodeStep(c, kv_format_, prompt) * decoder_layers /
               c.num_layers;
  return work;
}

Work CostModel::DecodeStepBaseWork(int64_t batch, int64_t replayed) const {
  const ModelConfig& c = options_.config;
  const int e = c.IsDecoderOnly() ? c.num_layers : c.num_encoder_layers;
  const double experts =
      NumMoeLayers(c, 0, e) * MoeExtraParamsReadPerLayer(c, batch) +
      NumMoeLayers(c, e, c.num_layers) * MoeExtraParamsReadPerLayer(c, batch + replayed);
  return Work{0, (static_cast<double>(accounting_.params_per_generated_token) + experts) *
                     bytes_per_param_};
}

Work CostModel::DecodeSequenceWork(int64_t context) const {
  const int64_t local =
      options_.config.sliding_window > 0 ? std::min<int64_t>(options_.config.sliding_window, context)
                                         : 0;
  return DecodeBatchWork(1, context, local);
}

Work CostModel::DecodeBatchWork(int64_t batch, int64_t sum_context, int64_t sum_local) const {
  const double n = static_cast<double>(batch);
  const double ctx = static_cast<double>(sum_context);
  const double local = static_cast<double>(sum_local);
  Work work;
  work.attn_flops = attn_flops_global_ * ctx + attn_flops_local_ * local;
  work.flops = MatmulFlops(accounting_.params_per_generated_token, batch) + work.attn_flops;
  work.bytes = kv_read_global_ * ctx + kv_read_local_ * local + kv_bytes_per_token_ * n;
  return work;
}

double CostModel::StepSeconds(const Work& work, int gpus) const {
  const GpuSpec& g = options_.gpu;
  const double k = std::max(gpus, 1);
  // Attention at its own rate where the profile measured one (a CPU's long
  // contexts: softmax and K/V gathers around the products).
  const double attn_rate = g.attention_flops_per_s > 0 ? g.attention_flops_per_s : g.peak_flops;
  const double compute =
      (work.flops - work.attn_flops) / g.peak_flops + work.attn_flops / attn_rate;
  return std::max(compute / k, work.bytes / (g.hbm_bytes_per_s * k));
}

double CostModel::PrefillSeconds(int64_t prompt, bool replay_here, int gpus) const {
  const GpuSpec& g = options_.gpu;
  return g.prefill_scale * (StepSeconds(PrefillWork(prompt, replay_here), gpus) + g.prefill_step_s +
                            g.prefill_token_s * static_cast<double>(prompt));
}

double CostModel::DecodeStepSeconds(const Work& work, int64_t sequences, int gpus) const {
  const GpuSpec& g = options_.gpu;
  return StepSeconds(work, gpus) + g.decode_step_s + g.decode_seq_s * static_cast<double>(sequences);
}

double CostModel::TransferBytes(int64_t prompt, bool replay_on_decode) const {
  const ModelConfig& c = options_.config;
  double bytes = static_cast<double>(prompt) * kv_bytes_per_token_;
  if (replay_on_decode && !decoder_only()) {
    bytes += static_cast<double>(ReplayedTokens(prompt)) * c.hidden_size * 2.0;  // h_E, bf16
  } else {
    bytes += static_cast<double>(LocalKvBytesPerSequence(c, kv_format_));
  }
  return bytes;
}

WeightSet CostModel::PrefillWeightSet(bool replay_here) const {
  if (decoder_only()) return WeightSet::kFull;
  return replay_here ? WeightSet::kEncoderReplay : WeightSet::kEncoderOnly;
}

double CostModel::WeightBytes(WeightSet set) const {
  return static_cast<double>(WeightSetBytes(options_.config, set, bytes_per_param_));
}

double CostModel::KvRoomBytes(WeightSet set, int gpus) const {
  if (options_.gpu.kv_room_bytes > 0) return options_.gpu.kv_room_bytes;
  return options_.kv_room_fraction * options_.gpu.hbm_bytes * gpus - WeightBytes(set);
}

}  // namespace ced::sim
