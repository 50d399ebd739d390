#include "services/metrics/counter.h"

#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ced::metrics {
namespace {

TEST(MetricsCounterTest, StartsAtZeroAndIncrements) {
  Counter counter;
  EXPECT_EQ(counter.Value(), 0);
  counter.Increment();
  counter.Increment(2.5);
  EXPECT_EQ(counter.Value(), 3.5);
}

TEST(MetricsCounterTest, IgnoresNegativeAndNaN) {
  Counter counter;
  counter.Increment(5);
  counter.Increment(-1);
  counter.Increment(std::nan(""));
  EXPECT_EQ(counter.Value(), 5);
}

TEST(MetricsCounterTest, ConcurrentIncrementsAreNotLost) {
  Counter counter;
  constexpr int kThreads = 4;
  constexpr int kPerThread = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) counter.Increment();
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(counter.Value(), kThreads * kPerThread);
}

TEST(MetricsCounterTest, AppendSamples) {
  Counter counter;
  counter.Increment(7);
  std::string out;
  counter.AppendSamples("c_total", {"outcome"}, {"ok"}, &out);
  EXPECT_EQ(out, "c_total{outcome=\"ok\"} 7\n");
}

TEST(MetricsGaugeTest, SetIncrementDecrement) {
  Gauge gauge;
  EXPECT_EQ(gauge.Value(), 0);
  gauge.Set(10);
  gauge.Increment();
  gauge.Increment(4);
  gauge.Decrement();
  gauge.Decrement(20);
  EXPECT_EQ(gauge.Value(), -6);
  gauge.Set(std::nan(""));
  EXPECT_TRUE(std::isnan(gauge.Value()));
}

TEST(MetricsGaugeTest, ConcurrentUpAndDownBalances) {
  Gauge gauge;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10000; ++i) {
        if (t % 2 == 0) {
          gauge.Increment(2);
        } else {
          gauge.Decrement();
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(gauge.Value(), 2 * 10000 * 2 - 2 * 10000);
}

TEST(MetricsGaugeTest, SetToCurrentTime) {
  Gauge gauge;
  const double before =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  gauge.SetToCurrentTime();
  const double after =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_GE(gauge.Value(), before);
  EXPECT_LE(gauge.Value(), after);
}

TEST(MetricsGaugeTest, AppendSamplesNoLabels) {
  Gauge gauge;
  gauge.Set(-0.5);
  std::string out;
  gauge.AppendSamples("g", {}, {}, &out);
  EXPECT_EQ(out, "g -0.5\n");
}

}  // namespace
}  // namespace ced::metrics
