#include "services/metrics/histogram.h"

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "services/metrics/registry.h"

namespace ced::metrics {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Histogram& MakeHistogram(Registry* registry, std::vector<double> bounds) {
  absl::StatusOr<Family<Histogram>*> family =
      registry->AddHistogram("h_seconds", "Test histogram.", std::move(bounds));
  EXPECT_TRUE(family.ok()) << family.status();
  return (*family)->WithLabelValues({});
}

TEST(MetricsHistogramTest, CountsIntoCumulativeBucketsWithInclusiveUpperBounds) {
  Registry registry;
  Histogram& h = MakeHistogram(&registry, {1, 2, 5});
  for (double v : {0.5, 1.0, 1.5, 2.0, 4.0, 5.0, 7.0, -3.0}) h.Observe(v);
  const Histogram::Snapshot s = h.Collect();
  EXPECT_EQ(s.bounds, (std::vector<double>{1, 2, 5}));
  // <=1: 0.5, 1, -3; <=2: +1.5, 2; <=5: +4, 5; +Inf: +7.
  EXPECT_EQ(s.cumulative_counts, (std::vector<uint64_t>{3, 5, 7, 8}));
  EXPECT_EQ(s.count, 8u);
  EXPECT_DOUBLE_EQ(s.sum, 0.5 + 1 + 1.5 + 2 + 4 + 5 + 7 - 3);
}

TEST(MetricsHistogramTest, AddCountsAddsBucketedObservations) {
  Registry registry;
  Histogram& h = MakeHistogram(&registry, {1, 2});
  h.Observe(1.5);
  ASSERT_TRUE(h.AddCounts({2, 0, 1}, 10.0).ok());
  const Histogram::Snapshot s = h.Collect();
  EXPECT_EQ(s.cumulative_counts, (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(s.sum, 11.5);
  EXPECT_FALSE(h.AddCounts({1, 1}, 1.0).ok()) << "one entry per bucket, +Inf included";
  EXPECT_EQ(h.Collect().count, 4u);
}

TEST(MetricsHistogramTest, EmptyHistogram) {
  Registry registry;
  Histogram& h = MakeHistogram(&registry, {0.1});
  const Histogram::Snapshot s = h.Collect();
  EXPECT_EQ(s.cumulative_counts, (std::vector<uint64_t>{0, 0}));
  EXPECT_EQ(s.count, 0u);
  EXPECT_EQ(s.sum, 0);
}

TEST(MetricsHistogramTest, NaNAndInfinityLandInInfBucket) {
  Registry registry;
  Histogram& h = MakeHistogram(&registry, {1});
  h.Observe(std::nan(""));
  h.Observe(kInf);
  const Histogram::Snapshot s = h.Collect();
  EXPECT_EQ(s.cumulative_counts, (std::vector<uint64_t>{0, 2}));
  EXPECT_TRUE(std::isnan(s.sum));
}

TEST(MetricsHistogramTest, ConcurrentObservationsAreConsistent) {
  Registry registry;
  Histogram& h = MakeHistogram(&registry, {1, 10});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5000; ++i) h.Observe(t);  // 0, 1, 2, 3
    });
  }
  for (auto& thread : threads) thread.join();
  const Histogram::Snapshot s = h.Collect();
  EXPECT_EQ(s.cumulative_counts, (std::vector<uint64_t>{10000, 20000, 20000}));
  EXPECT_EQ(s.sum, 5000.0 * (0 + 1 + 2 + 3));
}

TEST(MetricsHistogramTest, AppendSamplesWritesBucketsSumAndCount) {
  Registry registry;
  Histogram& h = MakeHistogram(&registry, {0.005, 0.5, 1});
  h.Observe(0.25);
  h.Observe(3);
  std::string out;
  h.AppendSamples("lat_seconds", {"op"}, {"read"}, &out);
  EXPECT_EQ(out,
            "lat_seconds_bucket{op=\"read\",le=\"0.005\"} 0\n"
            "lat_seconds_bucket{op=\"read\",le=\"0.5\"} 1\n"
            "lat_seconds_bucket{op=\"read\",le=\"1\"} 1\n"
            "lat_seconds_bucket{op=\"read\",le=\"+Inf\"} 2\n"
            "lat_seconds_sum{op=\"read\"} 3.25\n"
            "lat_seconds_count{op=\"read\"} 2\n");
}

TEST(MetricsValidateBucketsTest, AcceptsIncreasingAndTrailingInf) {
  EXPECT_TRUE(ValidateBuckets({}).ok());
  EXPECT_TRUE(ValidateBuckets({-1, 0, 1}).ok());
  EXPECT_TRUE(ValidateBuckets({1, 2, kInf}).ok());
}

TEST(MetricsValidateBucketsTest, RejectsBadBounds) {
  EXPECT_EQ(ValidateBuckets({1, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateBuckets({2, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateBuckets({1, std::nan("")}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateBuckets({-kInf, 1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateBuckets({1, kInf, 5}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(MetricsBucketHelpersTest, Exponential) {
  EXPECT_EQ(ExponentialBuckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
  EXPECT_EQ(ExponentialBuckets(0.001, 10, 3), (std::vector<double>{0.001, 0.01, 0.1}));
  EXPECT_TRUE(ExponentialBuckets(1, 2, 0).empty());
  EXPECT_FALSE(ValidateBuckets(ExponentialBuckets(1, 1, 3)).ok());
}

TEST(MetricsBucketHelpersTest, Linear) {
  EXPECT_EQ(LinearBuckets(0, 0.1, 4), (std::vector<double>{0, 0.1, 0.2, 0.3}));
  EXPECT_FALSE(ValidateBuckets(LinearBuckets(0, -1, 3)).ok());
}

TEST(MetricsBucketHelpersTest, StandardSetsAreValidAndSpanTheirRanges) {
  const std::vector<double> latency = LatencySecondsBuckets();
  EXPECT_TRUE(ValidateBuckets(latency).ok());
  EXPECT_EQ(latency.front(), 0.001);
  EXPECT_EQ(latency.back(), 60);
  const std::vector<double> sizes = SizeBytesBuckets();
  EXPECT_TRUE(ValidateBuckets(sizes).ok());
  EXPECT_EQ(sizes.front(), 256);
  EXPECT_EQ(sizes.back(), 1024.0 * 1024 * 1024);
  const std::vector<double> tokens = TokenCountBuckets();
  EXPECT_TRUE(ValidateBuckets(tokens).ok());
  EXPECT_EQ(tokens.front(), 1);
  EXPECT_EQ(tokens.back(), 65536);
}

}  // namespace
}  // namespace ced::metrics
