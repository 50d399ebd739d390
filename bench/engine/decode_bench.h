// Batched decode throughput against the memory-bandwidth roofline measured
// in the same run: read bandwidth is sampled between repetitions, batch
// sizes alternate. Prints a progress line per measurement to stderr. Not
// thread-safe (uses all OpenMP threads).
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/weights.h"

namespace ced::bench {

struct DecodeBenchOptions {
  int context = 512;  // prompt tokens before decode starts
  std::vector<int> batch_sizes = {1, 16};
  int steps = 8;  // decode steps per measurement
  int repetitions = 5;
  size_t bandwidth_bytes = 1ull << 30;  // probe buffer (>> last-level cache)
};

struct DecodeBatchResult {
  int batch = 0;
  // Read bandwidth over a buffer as large as one step's reads (weights +
  // K/V), one sample per repetition: on a CPU whose last-level cache holds
  // much of the model (e.g. a Xeon with a 260 MiB L3 and `small`'s 164 MB of
  // weights) the steps are served partly from that cache, faster than the
  // DRAM probe, and this is the bound they can reach.
  std::vector<double> working_set_bandwidth, working_set_share;
  double roofline_bandwidth = 0;  // max(best DRAM sample, best working-set sample)
  // Per repetition: tokens/s, and the roofline tokens/s for the same steps
  // at roofline_bandwidth (the best samples of the run, the STREAM
  // convention), so the fraction is conservative on a noisy machine; and the
  // fraction of the DRAM-only roofline (best sample of the large probe).
  std::vector<double> tokens_per_s, roofline_tokens_per_s, fraction, dram_fraction;
  std::vector<double> bytes_per_step_samples;
  std::vector<double> step_ms;
  std::vector<double> cpu_share;  // process CPU time / (wall x threads)
  double bytes_per_step = 0;      // weights + K/V at the mean context (last rep)
  double weight_bytes = 0, kv_bytes = 0;
  double mean_context = 0;  // keys a step attends (global), mean over the last rep
};

struct DecodeReport {
  DecodeBenchOptions options;
  std::vector<double> bandwidth;        // B/s, one sample per repetition
  std::vector<double> bandwidth_share;  // the CPU share of each sample
  double best_bandwidth = 0;            // max of `bandwidth`: the DRAM roofline's bandwidth
  bool bf16_weights = false;  // matmul weights packed as bf16 (2 bytes each in the roofline)
  std::vector<DecodeBatchResult> batches;
};

absl::StatusOr<DecodeReport> RunDecodeBench(const DecodeBenchOptions& options,
                                            std::shared_ptr<const ModelWeights> weights);

}  // namespace ced::bench
