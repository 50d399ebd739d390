// Roofline cost model of one model shape on instances of k tensor-parallel
// GPUs: a step costs max(FLOPs / (peak * k), bytes / (bandwidth * k)).
// Parameter counts, attention FLOPs and K/V bytes all come from
// engine/accounting, so the simulator and `ced model info` cannot disagree.
//
// Units: seconds, bytes, FLOPs. Weights are counted at the device's
// bytes_per_param (2 = bf16 on the GPUs, 4 = f32 on a CPU profile); K/V in
// the model's kv_cache_dtype. A device profile may add measured per-step,
// per-token and per-sequence costs on top of the roofline (0 on the GPU
// kinds). Immutable after Create; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "bench/sim/hardware.h"
#include "engine/accounting/accounting.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"

namespace ced::sim {

// FLOPs and HBM bytes of one step (or part of one: parts add up).
struct Work {
  double flops = 0;
  double bytes = 0;
  double attn_flops = 0;  // the part of `flops` that is attention (scores, values)
  Work& operator+=(const Work& other) {
    flops += other.flops;
    bytes += other.bytes;
    attn_flops += other.attn_flops;
    return *this;
  }
};

// The same shape with E = L (every layer its own global source kept as is).
ModelConfig DecoderOnlyTwin(const ModelConfig& config);

class CostModel {
 public:
  struct Options {
    ModelConfig config;  // validated by Create
    GpuSpec gpu;
    double bytes_per_param = 0;          // 0: the device's (gpu.bytes_per_param)
    std::optional<KvFormat> kv_format = std::nullopt;  // unset: the model's kv_cache_dtype
    double kv_room_fraction = 0.9;       // of HBM, before weights
    double link_bytes_per_s = 50e9;      // K/V link per prefill instance (unless the device sets one)
  };
  static absl::StatusOr<std::unique_ptr<CostModel>> Create(const Options& options);

  const ModelConfig& config() const { return options_.config; }
  const Accounting& accounting() const { return accounting_; }
  const GpuSpec& gpu() const { return options_.gpu; }
  bool decoder_only() const { return options_.config.IsDecoderOnly(); }

  // Prompt tokens the decoder replays: min(R, prompt); 0 when decoder-only.
  int64_t ReplayedTokens(int64_t prompt) const;

  // The prefill instance's step for one prompt: encoder (all layers when
  // decoder-only) + decoder K/V projections, and the replay + LM head when
  // `replay_here` (always true for decoder-only, which makes the first token).
  Work PrefillWork(int64_t prompt, bool replay_here) const;
  // The decode instance's replay of a prompt (replay on decode): decoder
  // layers over the last R positions and the LM head; weights are counted
  // by the decode step it rides in.
  Work DecodeReplayWork(int64_t prompt) const;
  // One decode step's fixed part: the weights read once. On MoE layers
  // (DESIGN.md §1.7) a step of `batch` sequences reads the shared experts,
  // the router and the routed experts its tokens are expected to touch
  // (engine/accounting ExpectedExpertsTouched): k of them at batch 1; in
  // the decoder layers also those of the `replayed` positions of the replays
  // riding in the step.
  Work DecodeStepBaseWork(int64_t batch = 1, int64_t replayed = 0) const;
  // One sequence's part of a decode step at `context` tokens (including the
  // new one): matmuls, attention and K/V reads.
  Work DecodeSequenceWork(int64_t context) const;
  // Same, summed over a batch from its size, Σcontext and Σmin(W, context)
  // (exactly DecodeSequenceWork summed; the accounting is linear in both).
  Work DecodeBatchWork(int64_t batch, int64_t sum_context, int64_t sum_local) const;

  // The roofline alone: max(FLOPs / (peak x gpus), bytes / (bandwidth x gpus)).
  double StepSeconds(const Work& work, int gpus) const;
  // One prefill step: the roofline plus the device's fixed and per-token costs.
  double PrefillSeconds(int64_t prompt, bool replay_here, int gpus) const;
  // One decode iteration of `work` over `sequences` sequences (replays
  // included): the roofline plus the device's fixed and per-sequence costs.
  double DecodeStepSeconds(const Work& work, int64_t sequences, int gpus) const;

  // Bytes the prefill instance sends the decode instance: global K/V of the
  // prompt, plus the decoder's local ring (replay on prefill) or h_E of the
  // replayed positions (replay on decode).
  double TransferBytes(int64_t prompt, bool replay_on_decode) const;
  double TransferSeconds(int64_t prompt, bool replay_on_decode) const {
    return TransferBytes(prompt, replay_on_decode) / link_bytes_per_s_;
  }

  // Weights held: a prefill instance holds the encoder-only set unless it
  // replays (then the encoder+replay set); decoder-only and decode hold all.
  WeightSet PrefillWeightSet(bool replay_here) const;
  double WeightBytes(WeightSet set) const;
  // KV room of an instance of `gpus` GPUs holding `set`: fraction of HBM
  // minus weights (<= 0 when the weights do not fit), or the device's fixed
  // KV budget when it sets one.
  double KvRoomBytes(WeightSet set, int gpus) const;
  double kv_bytes_per_token() const { return kv_bytes_per_token_; }
  double bytes_per_param() const { return bytes_per_param_; }
  KvFormat kv_format() const { return kv_format_; }

 private:
  explicit CostModel(const Options& options);

  Options options_;
  Accounting accounting_;
  double bytes_per_param_ = 2;
  KvFormat kv_format_ = KvFormat::kBF16;
  double link_bytes_per_s_ = 50e9;
  double kv_bytes_per_token_ = 0;   // global K/V stored per token
  double kv_read_global_ = 0;       // decode K/V bytes read per context token
  double kv_read_local_ = 0;        // ... per token of min(W, context)
  double attn_flops_global_ = 0;    // decode attention FLOPs per context token
  double attn_flops_local_ = 0;     // ... per token of min(W, context)
};

}  // namespace ced::sim
