// Checks the serialized text with the real `promtool check metrics` (lint included).
#include <limits>

#include "gtest/gtest.h"
#include "services/metrics/process_metrics.h"
#include "services/metrics/registry.h"
#include "tests/common/missing_tool.h"
#include "tests/metrics/test_util.h"

namespace ced::metrics {
namespace {

using testing::FindInPath;
using testing::RunCommand;
using testing::TempDir;
using testing::WriteFile;

void FillRegistry(Registry* registry) {
  Family<Counter>* requests =
      *registry->AddCounter("ced_test_requests_total", "Requests by outcome.", {"outcome"});
  requests->WithLabels({{"outcome", "ok"}}).Increment(41);
  requests->WithLabels({{"outcome", "bad \"quoted\" \\ value\nline"}}).Increment(0.5);
  Family<Gauge>* depth = *registry->AddGauge(
      "ced_test_queue_depth", "Queue depth.\nSecond line with a \\ backslash.", {"queue"});
  depth->WithLabels({{"queue", "prefill"}}).Set(3);
  depth->WithLabels({{"queue", "decode"}}).Set(-2.5);
  depth->WithLabels({{"queue", "inf"}}).Set(std::numeric_limits<double>::infinity());
  depth->WithLabels({{"queue", "nan"}}).Set(std::numeric_limits<double>::quiet_NaN());
  Family<Histogram>* latency = *registry->AddHistogram("ced_test_latency_seconds", "Latency.",
                                                       LatencySecondsBuckets(), {"op"});
  for (double v : {0.0004, 0.003, 0.2, 1.5, 45.0, 100.0}) {
    latency->WithLabels({{"op", "prefill"}}).Observe(v);
  }
  latency->WithLabels({{"op", "decode"}});  // Empty child.
  Family<Histogram>* sizes = *registry->AddHistogram("ced_test_transfer_size_bytes",
                                                     "Transfer sizes.", SizeBytesBuckets());
  sizes->WithLabelValues({}).Observe(1 << 20);
  ASSERT_TRUE(
      registry->AddGauge("ced_test_unused_info", "Family with labels, no children.", {"version"})
          .ok());
  ASSERT_TRUE(RegisterProcessMetrics(registry).ok());
}

TEST(MetricsPromtoolTest, SerializedRegistryPassesCheckMetrics) {
  const std::string promtool = FindInPath("promtool");
  if (promtool.empty()) CED_SKIP_OR_FAIL_WHEN_MISSING("promtool (on PATH)");
  Registry registry;
  FillRegistry(&registry);
  const std::string text = registry.Serialize();
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string path = dir.path() + "/metrics.txt";
  ASSERT_TRUE(WriteFile(path, text));
  std::string output;
  absl::StatusOr<int> code =
      RunCommand({promtool, "check", "metrics"}, path, &output, absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << "promtool output:\n" << output << "\ninput:\n" << text;
}

TEST(MetricsPromtoolTest, PromtoolRejectsBrokenText) {
  // Guards the test above: promtool must actually fail on bad input.
  const std::string promtool = FindInPath("promtool");
  if (promtool.empty()) CED_SKIP_OR_FAIL_WHEN_MISSING("promtool (on PATH)");
  TempDir dir;
  const std::string path = dir.path() + "/broken.txt";
  ASSERT_TRUE(WriteFile(path, "# TYPE x counter\nx{a=\"unterminated} 1\n"));
  std::string output;
  absl::StatusOr<int> code =
      RunCommand({promtool, "check", "metrics"}, path, &output, absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_NE(*code, 0) << output;
}

}  // namespace
}  // namespace ced::metrics
