#include "services/metrics/counter.h"

#include <chrono>
#include <cmath>

#include "services/metrics/text_format.h"

namespace ced::metrics {
namespace {

void AtomicAdd(std::atomic<double>* target, double delta) {
  double current = target->load(std::memory_order_relaxed);
  while (!target->compare_exchange_weak(current, current + delta, std::memory_order_relaxed)) {
  }
}

}  // namespace

void Counter::Increment(double delta) {
  if (!(delta >= 0.0)) return;  // Negative or NaN.
  AtomicAdd(&value_, delta);
}

void Counter::AppendSamples(std::string_view name, const std::vector<std::string>& label_names,
                            const std::vector<std::string>& label_values, std::string* out) const {
  AppendSampleLine(name, label_names, label_values, "", "", Value(), out);
}

void Gauge::Increment(double delta) { AtomicAdd(&value_, delta); }

void Gauge::SetToCurrentTime() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  Set(std::chrono::duration<double>(now).count());
}

void Gauge::AppendSamples(std::string_view name, const std::vector<std::string>& label_names,
                          const std::vector<std::string>& label_values, std::string* out) const {
  AppendSampleLine(name, label_names, label_values, "", "", Value(), out);
}

}  // namespace ced::metrics
