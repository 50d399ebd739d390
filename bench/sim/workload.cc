#include "bench/sim/workload.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace ced::sim {
uint64_t TraceRng::Next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double TraceRng::Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53; }

double TraceRng::Normal() {
  const double u1 = Uniform(), u2 = Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

int64_t LogNormalLength(TraceRng& rng, double mean, double cv) {
  if (cv <= 0) return std::max<int64_t>(1, std::llround(mean));
  const double sigma2 = std::log1p(cv * cv);
  const double mu = std::log(mean) - sigma2 / 2;
  return std::max<int64_t>(1, std::llround(std::exp(mu + std::sqrt(sigma2) * rng.Normal())));
}

absl::StatusOr<std::vector<RequestSpec>> MakeWorkload(const WorkloadOptions& o) {
  if (!(o.input_mean >= 1) || !(o.output_mean >= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("workload: input and output means must be >= 1, got ",
                                                   o.input_mean, " and ", o.output_mean));
  }
  if (!(o.input_cv >= 0) || !(o.output_cv >= 0)) {
    return absl::InvalidArgumentError("workload: cv must be >= 0");
  }
  if (!(o.rate > 0)) return absl::InvalidArgumentError(absl::StrCat("workload: rate must be > 0, got ", o.rate));
  if (o.num_requests < 1) return absl::InvalidArgumentError("workload: num_requests must be >= 1");
  int64_t n = o.num_requests;
  if (o.duration_s > 0) n = std::max<int64_t>(n, std::llround(std::ceil(o.rate * o.duration_s)));
  if (o.max_requests > 0) n = std::min<int64_t>(n, o.max_requests);
  TraceRng rng(o.seed);
  std::vector<RequestSpec> requests(n);
  double t = 0;
  for (RequestSpec& r : requests) {
    t += -std::log(rng.Uniform()) / o.rate;
    r.arrival_s = t;
    r.prompt_tokens = LogNormalLength(rng, o.input_mean, o.input_cv);
    r.output_tokens = LogNormalLength(rng, o.output_mean, o.output_cv);
  }
  return requests;
}

}  // namespace ced::sim
