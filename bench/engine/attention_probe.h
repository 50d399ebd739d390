// The CPU attention of one long prefill chunk over a cached context, as the
// engine runs it for a resumed request or a long prompt's later chunks:
// kernels/cpu AttentionCpu for `rows` query rows at positions [context,
// context + rows) of one layer, the global K/V of the context in blocks of
// `block_size` in the cache's format, the model's heads and local window.
// Every K/V row holds the same small values (the kernels' time does not
// depend on them). Shared by ced-sim-calibrate (the simulator's attention
// rate) and attention_bench (long-context attention per kernel variant).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/config.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/kv_codec.h"

namespace ced::bench {

class AttentionProbe {
 public:
  AttentionProbe(const ModelConfig& config, kernels::KvFormat format, int block_size, int rows,
                 int context);
  // One AttentionCpu call on the current kernel variant and threads (the
  // caller times it with the clock it uses).
  void Run();
  // The cost model's FLOPs of the call (AttentionFlopsForPositions).
  double flops() const { return flops_; }

 private:
  kernels::AttentionParams params_;
  kernels::AttentionSegment segment_;
  std::vector<uint8_t> pool_, k_ring_, v_ring_;
  std::vector<const uint8_t*> k_blocks_, v_blocks_;
  std::vector<float> chunk_k_, chunk_v_, q_, out_;
  double flops_ = 0;
};

}  // namespace ced::bench
