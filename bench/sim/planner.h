// Pool-split planner: for a fleet, every prefill:decode split, and for each
// the highest Poisson rate at which >= target of the requests meet both SLOs,
// found by bisection over full simulator runs (same seed for every probe).
// Thread-compatible; each call is independent.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "bench/sim/simulator.h"

namespace ced::sim {

// The default SLOs of the seed study: TTFT <= factor x the decoder-only
// twin's unloaded prefill step for the mean prompt, on one prefill instance.
absl::StatusOr<double> ReferenceTtftSeconds(const ModelConfig& model, const GpuSpec& gpu,
                                            int prefill_gpus, int64_t mean_prompt,
                                            double factor);

struct PlanOptions {
  SimOptions base;          // the fleet's per-instance settings, SLOs, workload
  int instances = 6;        // splits p:(instances - p), p = 1..instances-1
  int total_gpus = 0;       // > 0: instead, splits with p*prefill_gpus + d*decode_gpus == total
  double target = 0.9;      // SLO attainment
  int bisection_steps = 7;  // after bracketing
};

struct SplitResult {
  int prefill = 0, decode = 0;
  double max_rate = 0;  // requests/s; 0 when even a trickle misses the target
  SimSummary at_max;    // the run at max_rate (attainment, latencies)
  int runs = 0;
};

struct PlanResult {
  std::vector<SplitResult> splits;
  int best = -1;  // index into splits of the highest max_rate; -1 when all are 0
};

// The highest rate for one configuration (workload.rate is ignored).
absl::StatusOr<SplitResult> MaxRate(const SimOptions& options, double target, int steps);

// INVALID_ARGUMENT when no split fits the fleet.
absl::StatusOr<PlanResult> Plan(const PlanOptions& options);

}  // namespace ced::sim
