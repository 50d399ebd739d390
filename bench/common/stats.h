// Timing and order statistics for noisy, shared machines: medians of
// repetitions with their spread. Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

namespace ced::bench {

// Monotonic wall-clock seconds.
double NowSeconds();
// CPU seconds used by every thread of this process so far. With T threads,
// cpu / (wall * T) below 1 means the threads were waiting or descheduled
// (another process had the cores).
double ProcessCpuSeconds();

struct Summary {
  int n = 0;
  double median = 0, min = 0, max = 0;
  double q1 = 0, q3 = 0;  // quartiles (linear interpolation)
  // (max - min) / median, as a fraction; 0 when median is 0.
  double spread() const { return median != 0 ? (max - min) / median : 0; }
};

// Order statistics of `samples` (n = 0 and zeros when empty).
Summary Summarize(std::vector<double> samples);

// Percentile of `values` (any order) by linear interpolation between closest
// ranks: rank p/100·(n−1) of the sorted values (numpy's default). 0 when
// empty; p is clamped to [0, 100].
double Percentile(std::vector<double> values, double p);

// "1.234 s [1.200 .. 1.300]" style text: median with min..max, formatted by
// `fmt` (a printf format for one double) and a unit suffix.
std::string FormatSummary(const Summary& s, const char* fmt, const std::string& unit);

}  // namespace ced::bench
