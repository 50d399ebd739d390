// Counter and Gauge: lock-free scalar metrics (one atomic double each).
#pragma once

#include <atomic>
#include <string>
#include <string_view>
#include <vector>

namespace ced::metrics {

// A monotonically increasing value, e.g. requests served. Thread-safe and lock-free.
class Counter final {
 public:
  static constexpr char kTypeName[] = "counter";
  struct Params {
    bool operator==(const Params&) const { return true; }
  };

  Counter() = default;
  explicit Counter(const Params&) {}
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  // Adds `delta` (default 1). Negative and NaN deltas are ignored: a counter never goes down.
  void Increment(double delta = 1.0);
  double Value() const { return value_.load(std::memory_order_relaxed); }

  // Sample names this type writes, as suffixes of the family name.
  static std::vector<std::string_view> SampleSuffixes() { return {""}; }
  // Appends this child's sample line(s) in text format 0.0.4.
  void AppendSamples(std::string_view name, const std::vector<std::string>& label_names,
                     const std::vector<std::string>& label_values, std::string* out) const;

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down, e.g. queue depth or bytes in use. Thread-safe, lock-free.
class Gauge final {
 public:
  static constexpr char kTypeName[] = "gauge";
  struct Params {
    bool operator==(const Params&) const { return true; }
  };

  Gauge() = default;
  explicit Gauge(const Params&) {}
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Increment(double delta = 1.0);
  void Decrement(double delta = 1.0) { Increment(-delta); }
  // Sets the value to the current Unix time in seconds.
  void SetToCurrentTime();
  double Value() const { return value_.load(std::memory_order_relaxed); }

  static std::vector<std::string_view> SampleSuffixes() { return {""}; }
  void AppendSamples(std::string_view name, const std::vector<std::string>& label_names,
                     const std::vector<std::string>& label_values, std::string* out) const;

 private:
  std::atomic<double> value_{0.0};
};

}  // namespace ced::metrics
