#include "services/metrics/histogram.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "services/metrics/text_format.h"

namespace ced::metrics {
namespace {

double RoundTo15Digits(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.15g", v);
  return std::strtod(buf, nullptr);
}

}  // namespace

absl::Status ValidateBuckets(const std::vector<double>& bounds) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (std::isnan(bounds[i])) {
      return absl::InvalidArgumentError(absl::StrCat("bucket bound ", i, " is NaN"));
    }
    if (std::isinf(bounds[i]) && (bounds[i] < 0 || i + 1 != bounds.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("bucket bound ", i, " is ", FormatValue(bounds[i]),
                       "; only the last bound may be infinite (+Inf)"));
    }
    if (i > 0 && !(bounds[i] > bounds[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bucket bounds must be strictly increasing, but bound ", i, " (", FormatValue(bounds[i]),
          ") <= bound ", i - 1, " (", FormatValue(bounds[i - 1]), ")"));
    }
  }
  return absl::OkStatus();
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> bounds;
  for (int i = 0; i < count; ++i) bounds.push_back(RoundTo15Digits(start * std::pow(factor, i)));
  return bounds;
}

std::vector<double> LinearBuckets(double start, double width, int count) {
  std::vector<double> bounds;
  for (int i = 0; i < count; ++i) bounds.push_back(RoundTo15Digits(start + width * i));
  return bounds;
}

std::vector<double> LatencySecondsBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60};
}

std::vector<double> SizeBytesBuckets() { return ExponentialBuckets(256, 4, 12); }

std::vector<double> TokenCountBuckets() { return ExponentialBuckets(1, 2, 17); }

Histogram::Histogram(const Params& params)
    : bounds_(params.bounds), counts_(params.bounds.size() + 1, 0) {}

void Histogram::Observe(double value) {
  // lower_bound: first bound >= value, i.e. the smallest bucket with value <= le.
  const size_t index =
      std::isnan(value)
          ? bounds_.size()
          : static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) -
                                bounds_.begin());
  std::lock_guard lock(mu_);
  ++counts_[index];
  sum_ += value;
}

absl::Status Histogram::AddCounts(const std::vector<uint64_t>& counts, double sum) {
  if (counts.size() != counts_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("histogram has ", counts_.size(), " buckets, not ", counts.size()));
  }
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < counts.size(); ++i) counts_[i] += counts[i];
  sum_ += sum;
  return absl::OkStatus();
}

Histogram::Snapshot Histogram::Collect() const {
  Snapshot snapshot;
  snapshot.bounds = bounds_;
  snapshot.cumulative_counts.resize(bounds_.size() + 1);
  std::lock_guard lock(mu_);
  uint64_t running = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    running += counts_[i];
    snapshot.cumulative_counts[i] = running;
  }
  snapshot.count = running;
  snapshot.sum = sum_;
  return snapshot;
}

void Histogram::AppendSamples(std::string_view name, const std::vector<std::string>& label_names,
                              const std::vector<std::string>& label_values,
                              std::string* out) const {
  const Snapshot snapshot = Collect();
  const std::string bucket_name = std::string(name) + "_bucket";
  for (size_t i = 0; i <= snapshot.bounds.size(); ++i) {
    const std::string le =
        i < snapshot.bounds.size() ? FormatValue(snapshot.bounds[i]) : std::string("+Inf");
    AppendSampleLine(bucket_name, label_names, label_values, "le", le,
                     static_cast<double>(snapshot.cumulative_counts[i]), out);
  }
  AppendSampleLine(std::string(name) + "_sum", label_names, label_values, "", "", snapshot.sum,
                   out);
  AppendSampleLine(std::string(name) + "_count", label_names, label_values, "", "",
                   static_cast<double>(snapshot.count), out);
}

}  // namespace ced::metrics
