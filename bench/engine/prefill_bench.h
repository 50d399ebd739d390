// Prefill of one long prompt: CED (bounded and exact replay) against its
// decoder-only twin on the same weights, repetitions interleaved, plus the
// machine's FMA peak measured between repetitions. Prints a progress line
// per measurement to stderr. Not thread-safe (uses all OpenMP threads).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/weights.h"

namespace ced::bench {

struct PrefillBenchOptions {
  int prompt_tokens = 2048;
  int chunk_tokens = 256;
  int repetitions = 5;
  double fma_seconds = 0.3;  // per peak measurement
};

struct PrefillVariant {
  std::string name;  // "ced-bounded", "ced-exact", "decoder-only"
  std::string preset;
  int replay_tokens = 0;  // N - s (0 for decoder-only)
  // Accounting (DESIGN.md §1): matmuls incl. the LM head once + attention.
  double matmul_flops = 0, attention_flops = 0;
  double flops() const { return matmul_flops + attention_flops; }
  // Per repetition, seconds. encoder_s / replay_s split a CED prefill into
  // the chunked encoder pass (incl. decoder global K/V) and the replay.
  std::vector<double> ttft_s, encoder_s, replay_s;
  // Per repetition: process CPU time / (TTFT x threads); well below 1 when
  // the threads waited or other processes had the cores.
  std::vector<double> cpu_share;
  int first_token = -1;
};

struct PrefillReport {
  PrefillBenchOptions options;
  std::vector<PrefillVariant> variants;  // ced-bounded, ced-exact, decoder-only
  // FLOP/s of the FMA micro-kernel and the CPU share it got, one sample per
  // repetition.
  std::vector<double> fma_avx2, fma_avx512, fma_avx2_share, fma_avx512_share;
  // Paired per repetition: decoder-only TTFT / CED TTFT.
  std::vector<double> speedup_bounded, speedup_exact;
};

absl::StatusOr<PrefillReport> RunPrefillBench(const PrefillBenchOptions& options,
                                              std::shared_ptr<const ModelWeights> ced,
                                              std::shared_ptr<const ModelWeights> dec);

}  // namespace ced::bench
