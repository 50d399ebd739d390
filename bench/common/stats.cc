#include "bench/common/stats.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "absl/strings/str_cat.h"

namespace ced::bench {
namespace {

// `sorted` non-empty, q in [0, 1].
double QuantileSorted(const std::vector<double>& sorted, double q) {
  const double rank = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - static_cast<double>(lo));
}

}  // namespace

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return QuantileSorted(values, std::clamp(p, 0.0, 100.0) / 100.0);
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

Summary Summarize(std::vector<double> samples) {
  Summary s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.n = static_cast<int>(samples.size());
  s.min = samples.front();
  s.max = samples.back();
  s.median = QuantileSorted(samples, 0.5);
  s.q1 = QuantileSorted(samples, 0.25);
  s.q3 = QuantileSorted(samples, 0.75);
  return s;
}

std::string FormatSummary(const Summary& s, const char* fmt, const std::string& unit) {
  auto f = [fmt](double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), fmt, v);
    return std::string(buf);
  };
  return absl::StrCat(f(s.median), unit, " [", f(s.min), " .. ", f(s.max), "]");
}

}  // namespace ced::bench
