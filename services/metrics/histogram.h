// Histogram: counts observations into buckets with explicit upper bounds, plus sum and count.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace ced::metrics {

template <typename T>
class Family;

// OK when `bounds` is strictly increasing and has no NaN; +Inf is allowed only as the last
// bound (it is implicit anyway). An empty list is valid (only the +Inf bucket).
absl::Status ValidateBuckets(const std::vector<double>& bounds);

// `count` bounds start, start*factor, ..., rounded to 15 significant digits. Bad arguments
// (start <= 0, factor <= 1) give bounds that ValidateBuckets rejects; count <= 0 gives {}.
std::vector<double> ExponentialBuckets(double start, double factor, int count);
// `count` bounds start, start+width, ....
std::vector<double> LinearBuckets(double start, double width, int count);
// Latencies in seconds: 1 ms .. 60 s in a 1-2.5-5 series (plus 20 s, 30 s).
std::vector<double> LatencySecondsBuckets();
// Sizes in bytes: 256 B .. 1 GiB, powers of 4.
std::vector<double> SizeBytesBuckets();
// Token counts: 1 .. 65536, powers of 2.
std::vector<double> TokenCountBuckets();

// Thread-safe: Observe() takes a small per-histogram mutex (no allocation).
// Obtained from Family<Histogram>; not constructible directly (bounds are validated there).
class Histogram final {
 public:
  static constexpr char kTypeName[] = "histogram";
  struct Params {
    std::vector<double> bounds;  // Validated, finite, strictly increasing; no +Inf.
    bool operator==(const Params& other) const { return bounds == other.bounds; }
  };

  struct Snapshot {
    std::vector<double> bounds;               // Finite upper bounds; +Inf is implicit.
    std::vector<uint64_t> cumulative_counts;  // bounds.size() + 1 entries; last == count.
    double sum = 0.0;
    uint64_t count = 0;
  };

  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // Counts `value` in the first bucket whose bound is >= value (NaN lands in +Inf only).
  void Observe(double value);
  // Adds observations bucketed elsewhere (values sampled at scrape time from a
  // lock-free source): counts[i] more in bucket i, as many entries as bounds
  // plus one (the last is +Inf; not cumulative), whose values total `sum`.
  // InvalidArgument, and nothing added, when `counts` has another size.
  absl::Status AddCounts(const std::vector<uint64_t>& counts, double sum);
  // A consistent copy: count equals the +Inf bucket, sum matches the same observations.
  Snapshot Collect() const;

  static std::vector<std::string_view> SampleSuffixes() { return {"_bucket", "_sum", "_count"}; }
  // Appends name_bucket{...,le="..."} lines (cumulative, ending with le="+Inf"), name_sum and
  // name_count.
  void AppendSamples(std::string_view name, const std::vector<std::string>& label_names,
                     const std::vector<std::string>& label_values, std::string* out) const;

 private:
  friend class Family<Histogram>;
  explicit Histogram(const Params& params);

  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // Guarded by mu_. Per bucket, not cumulative.
  double sum_ = 0.0;              // Guarded by mu_.
};

}  // namespace ced::metrics
