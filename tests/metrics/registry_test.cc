#include "services/metrics/registry.h"

#include <limits>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ced::metrics {
namespace {

using ::testing::HasSubstr;

TEST(MetricsRegistryTest, EmptyRegistrySerializesToEmptyText) {
  Registry registry;
  EXPECT_EQ(registry.Serialize(), "");
}

TEST(MetricsRegistryTest, UnlabelledFamilyExportsZeroChild) {
  Registry registry;
  ASSERT_TRUE(registry.AddCounter("jobs_total", "Jobs.").ok());
  EXPECT_EQ(registry.Serialize(),
            "# HELP jobs_total Jobs.\n"
            "# TYPE jobs_total counter\n"
            "jobs_total 0\n");
}

TEST(MetricsRegistryTest, LabelledChildrenAreStableAndDistinct) {
  Registry registry;
  absl::StatusOr<Family<Counter>*> family =
      registry.AddCounter("requests_total", "Requests.", {"outcome", "model"});
  ASSERT_TRUE(family.ok()) << family.status();
  Counter& ok = (*family)->WithLabels({{"outcome", "ok"}, {"model", "m"}});
  Counter& ok_again = (*family)->WithLabels({{"model", "m"}, {"outcome", "ok"}});
  Counter& by_values = (*family)->WithLabelValues({"ok", "m"});
  Counter& error = (*family)->WithLabels({{"outcome", "error"}, {"model", "m"}});
  EXPECT_EQ(&ok, &ok_again);
  EXPECT_EQ(&ok, &by_values);
  EXPECT_NE(&ok, &error);
  EXPECT_EQ((*family)->size(), 2u);
  ok.Increment(2);
  error.Increment();
  // Children are ordered by label values; labels appear in declaration order.
  EXPECT_EQ(registry.Serialize(),
            "# HELP requests_total Requests.\n"
            "# TYPE requests_total counter\n"
            "requests_total{outcome=\"error\",model=\"m\"} 1\n"
            "requests_total{outcome=\"ok\",model=\"m\"} 2\n");
}

TEST(MetricsRegistryTest, GetRejectsWrongLabelNames) {
  Registry registry;
  Family<Gauge>* family = *registry.AddGauge("depth", "Depth.", {"queue"});
  EXPECT_EQ(family->Get({{"other", "x"}}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(family->Get({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(family->Get({{"queue", "a"}, {"extra", "b"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(family->GetWithValues({"a", "b"}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(family->Get({{"other", "x"}}).status().message()), HasSubstr("depth"));
  EXPECT_TRUE(family->Get({{"queue", "a"}}).ok());
}

TEST(MetricsRegistryTest, InvalidNamesAreErrors) {
  Registry registry;
  EXPECT_EQ(registry.AddCounter("bad-name", "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddCounter("__reserved", "x").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddGauge("g", "x", {"bad:label"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddGauge("g", "x", {"__name__"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddGauge("g", "x", {"a", "a"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddHistogram("h", "x", {1}, {"le"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.AddHistogram("h", "x", {2, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Serialize(), "");
}

TEST(MetricsRegistryTest, ReRegistrationReturnsSameFamilyOrFails) {
  Registry registry;
  Family<Counter>* first = *registry.AddCounter("x_total", "X.", {"a"});
  absl::StatusOr<Family<Counter>*> again = registry.AddCounter("x_total", "Other help.", {"a"});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, first);
  EXPECT_EQ((*again)->help(), "X.");
  EXPECT_EQ(registry.AddGauge("x_total", "X.", {"a"}).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.AddCounter("x_total", "X.", {"b"}).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(registry.AddGauge("x_total", "X.").status().message()),
              HasSubstr("counter"));

  Family<Histogram>* h = *registry.AddHistogram("h", "H.", {1, 2});
  EXPECT_EQ(*registry.AddHistogram("h", "H.", {1, 2, std::numeric_limits<double>::infinity()}), h);
  EXPECT_EQ(registry.AddHistogram("h", "H.", {1, 3}).status().code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(MetricsRegistryTest, SampleNameCollisionsAreErrors) {
  Registry registry;
  ASSERT_TRUE(registry.AddHistogram("lat", "L.", {1}).ok());
  EXPECT_EQ(registry.AddCounter("lat_count", "C.").status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.AddGauge("lat_sum", "S.").status().code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(registry.AddGauge("size_bucket", "B.").ok());
  EXPECT_EQ(registry.AddHistogram("size", "S.", {1}).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.AddHistogram("lat_sum", "S.", {1}).status().code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(MetricsRegistryTest, SerializesAllTypesInNameOrderWithEscaping) {
  Registry registry;
  Family<Histogram>* latency =
      *registry.AddHistogram("b_latency_seconds", "Latency.", {0.5, 1}, {"op"});
  Family<Gauge>* depth = *registry.AddGauge("c_depth", "Depth with \\ and\nnewline.", {"q"});
  Family<Counter>* total = *registry.AddCounter("a_total", "Total.");
  latency->WithLabels({{"op", "read"}}).Observe(0.75);
  depth->WithLabels({{"q", "we\"ird\\\n"}}).Set(3);
  total->WithLabelValues({}).Increment(1e6);
  EXPECT_EQ(registry.Serialize(),
            "# HELP a_total Total.\n"
            "# TYPE a_total counter\n"
            "a_total 1000000\n"
            "# HELP b_latency_seconds Latency.\n"
            "# TYPE b_latency_seconds histogram\n"
            "b_latency_seconds_bucket{op=\"read\",le=\"0.5\"} 0\n"
            "b_latency_seconds_bucket{op=\"read\",le=\"1\"} 1\n"
            "b_latency_seconds_bucket{op=\"read\",le=\"+Inf\"} 1\n"
            "b_latency_seconds_sum{op=\"read\"} 0.75\n"
            "b_latency_seconds_count{op=\"read\"} 1\n"
            "# HELP c_depth Depth with \\\\ and\\nnewline.\n"
            "# TYPE c_depth gauge\n"
            "c_depth{q=\"we\\\"ird\\\\\\n\"} 3\n");
}

TEST(MetricsRegistryTest, CollectHooksRunBeforeEachSerialize) {
  Registry registry;
  Gauge* scrapes = &(*registry.AddGauge("scrapes", "Scrapes."))->WithLabelValues({});
  registry.AddCollectHook([scrapes] { scrapes->Increment(); });
  EXPECT_THAT(registry.Serialize(), HasSubstr("scrapes 1\n"));
  EXPECT_THAT(registry.Serialize(), HasSubstr("scrapes 2\n"));
}

TEST(MetricsRegistryTest, ConcurrentRegistrationLookupAndSerialize) {
  Registry registry;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&registry] {
      for (int i = 0; i < 200; ++i) {
        Family<Counter>* family = *registry.AddCounter("shared_total", "Shared.", {"k"});
        family->WithLabelValues({std::to_string(i % 10)}).Increment();
        if (i % 50 == 0) registry.Serialize();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  Family<Counter>* family = *registry.AddCounter("shared_total", "Shared.", {"k"});
  EXPECT_EQ(family->size(), 10u);
  double total = 0;
  for (int k = 0; k < 10; ++k) total += family->WithLabelValues({std::to_string(k)}).Value();
  EXPECT_EQ(total, 800);
}

}  // namespace
}  // namespace ced::metrics
