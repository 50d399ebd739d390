#include "services/metrics/process_metrics.h"

#include <chrono>
#include <string>

#include "gtest/gtest.h"

namespace ced::metrics {
namespace {

// The value of the unlabelled sample `name` in `text`, or -1.
double SampleValue(const std::string& text, const std::string& name) {
  const std::string prefix = name + " ";
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (text.compare(start, prefix.size(), prefix) == 0) {
      return std::stod(text.substr(start + prefix.size(), end - start - prefix.size()));
    }
    start = end + 1;
  }
  return -1;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST(MetricsProcessMetricsTest, ExportsPlausibleValues) {
  Registry registry;
  ASSERT_TRUE(RegisterProcessMetrics(&registry).ok());
  const std::string text = registry.Serialize();
  EXPECT_GT(SampleValue(text, "ced_process_resident_memory_bytes"), 1024 * 1024) << text;
  EXPECT_GE(SampleValue(text, "ced_process_virtual_memory_bytes"),
            SampleValue(text, "ced_process_resident_memory_bytes"));
  EXPECT_GE(SampleValue(text, "ced_process_cpu_seconds_total"), 0) << text;
  EXPECT_GE(SampleValue(text, "ced_process_threads"), 1) << text;
  EXPECT_GE(SampleValue(text, "ced_process_open_fds"), 3) << text;  // stdin/out/err
  const double start = SampleValue(text, "ced_process_start_time_seconds");
  EXPECT_LE(start, Now() + 2) << text;
  EXPECT_GT(start, Now() - 24 * 3600) << text;  // This test process started recently.
}

TEST(MetricsProcessMetricsTest, CpuCounterIsRefreshedAndMonotonic) {
  Registry registry;
  ASSERT_TRUE(RegisterProcessMetrics(&registry).ok());
  const double before = SampleValue(registry.Serialize(), "ced_process_cpu_seconds_total");
  // Burn CPU until the kernel's tick-granular accounting moves (bounded loop).
  volatile double sink = 0;
  double after = before;
  for (int round = 0; round < 200 && after <= before; ++round) {
    for (int i = 0; i < 2000000; ++i) sink = sink + i * 1e-9;
    after = SampleValue(registry.Serialize(), "ced_process_cpu_seconds_total");
  }
  EXPECT_GT(after, before);
}

TEST(MetricsProcessMetricsTest, ConflictingNameIsAnError) {
  Registry registry;
  ASSERT_TRUE(registry.AddGauge("ced_process_cpu_seconds_total", "Wrong type.").ok());
  EXPECT_EQ(RegisterProcessMetrics(&registry).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(RegisterProcessMetrics(nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ced::metrics
