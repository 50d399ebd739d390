// Synthetic request traces: Poisson arrivals, lognormal prompt and output
// lengths with a chosen mean and coefficient of variation. Deterministic for
// a seed on every platform (own generator, no std distributions).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace ced::sim {

struct RequestSpec {
  double arrival_s = 0;
  int64_t prompt_tokens = 1;  // >= 1
  int64_t output_tokens = 1;  // >= 1, the request's max_tokens (always reached)
};

struct WorkloadOptions {
  double input_mean = 1024, input_cv = 0.5;
  double output_mean = 1024, output_cv = 0.5;
  double rate = 1;  // requests per second
  int num_requests = 500;
  // When > 0: at least rate * duration_s requests (arrivals spanning about
  // duration_s), so that a run lasts many request lifetimes at any rate...
  double duration_s = 0;
  // ... and, when > 0, at most this many.
  int max_requests = 0;
  uint64_t seed = 1;
};

// The trace for one rate is the seed's unit-rate trace with its gaps scaled
// by 1/rate: the same seed at two rates gives the same lengths and the same
// arrival order (the lower rate's trace may be longer). Lengths are rounded and clamped to >= 1.
absl::StatusOr<std::vector<RequestSpec>> MakeWorkload(const WorkloadOptions& options);

// The traces' random stream (splitmix64): small, fast, the same on every
// platform. Shared with the agent trace (agent_workload.h).
class TraceRng {
 public:
  explicit TraceRng(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  double Uniform();  // in (0, 1)
  double Normal();   // standard normal (Box-Muller)

 private:
  uint64_t state_;
};

// A lognormal length with this mean and coefficient of variation (cv 0:
// the mean), rounded and clamped to >= 1.
int64_t LogNormalLength(TraceRng& rng, double mean, double cv);

}  // namespace ced::sim
