#include "bench/loadgen/workload.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>

#include "gtest/gtest.h"

namespace ced::loadgen {
namespace {

struct Moments {
  double mean = 0, cv = 0;
};

Moments Measure(const std::vector<double>& xs) {
  double sum = 0, sq = 0;
  for (double x : xs) sum += x;
  const double mean = sum / xs.size();
  for (double x : xs) sq += (x - mean) * (x - mean);
  return {mean, std::sqrt(sq / (xs.size() - 1)) / mean};
}

TEST(LoadgenWorkloadTest, SameSeedSameRequests) {
  WorkloadOptions o;
  o.seed = 42;
  o.rate = 3;
  auto a = Workload::Create(o);
  auto b = Workload::Create(o);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int64_t i = 0; i < 300; ++i) {
    const PlannedRequest x = a->Get(i), y = b->Get(i);
    EXPECT_EQ(x.arrival_s, y.arrival_s);
    EXPECT_EQ(x.prompt_token_ids, y.prompt_token_ids);
    EXPECT_EQ(x.output_tokens, y.output_tokens);
    EXPECT_EQ(x.seed, y.seed);
  }
}

// Counted against the requests themselves: fixed lengths put every request
// on one side of the context; sampled ones split as a direct count does.
TEST(LoadgenWorkloadTest, CountAboveContext) {
  WorkloadOptions o;
  o.input_mean = 200;
  o.output_mean = 56;
  o.input_cv = 0;
  o.output_cv = 0;
  EXPECT_EQ(CountAboveContext(o, 50, 256), 0);
  EXPECT_EQ(CountAboveContext(o, 50, 255), 50);
  o.input_cv = 0.5;
  auto w = Workload::Create(o);
  ASSERT_TRUE(w.ok());
  int64_t over = 0;
  for (int64_t i = 0; i < 200; ++i) {
    const PlannedRequest r = w->Get(i);
    over += r.prompt_tokens + r.output_tokens > 256 ? 1 : 0;
  }
  EXPECT_GT(over, 0);
  EXPECT_LT(over, 200);
  EXPECT_EQ(CountAboveContext(o, 200, 256), over);
}

TEST(LoadgenWorkloadTest, ExtendingDoesNotRedraw) {
  WorkloadOptions o;
  auto a = Workload::Create(o);
  auto b = Workload::Create(o);
  ASSERT_TRUE(a.ok() && b.ok());
  const PlannedRequest late = a->Get(5000);  // forces several extensions
  for (int64_t i = 0; i < 100; ++i) {
    EXPECT_EQ(a->Get(i).prompt_token_ids, b->Get(i).prompt_token_ids) << i;
    EXPECT_EQ(a->Get(i).arrival_s, b->Get(i).arrival_s) << i;
  }
  EXPECT_EQ(late.output_tokens, b->Get(5000).output_tokens);
}

TEST(LoadgenWorkloadTest, DifferentSeedsDiffer) {
  WorkloadOptions o;
  o.seed = 1;
  auto a = Workload::Create(o);
  o.seed = 2;
  auto b = Workload::Create(o);
  ASSERT_TRUE(a.ok() && b.ok());
  int same = 0;
  for (int64_t i = 0; i < 100; ++i) same += a->Get(i).output_tokens == b->Get(i).output_tokens;
  EXPECT_LT(same, 50);
  EXPECT_NE(a->Get(0).prompt_token_ids, b->Get(0).prompt_token_ids);
}

TEST(LoadgenWorkloadTest, LengthsMatchRequestedMeanAndCv) {
  WorkloadOptions o;
  o.input_mean = 500;
  o.input_cv = 0.5;
  o.output_mean = 200;
  o.output_cv = 1.0;
  o.rate = 4;
  auto w = Workload::Create(o);
  ASSERT_TRUE(w.ok());
  constexpr int kN = 40000;
  std::vector<double> in, out, gaps;
  double prev = 0;
  for (int64_t i = 0; i < kN; ++i) {
    const PlannedRequest r = w->Get(i);
    ASSERT_EQ(static_cast<int64_t>(r.prompt_token_ids.size()), r.prompt_tokens);
    ASSERT_GE(r.output_tokens, 1);
    in.push_back(r.prompt_tokens);
    out.push_back(r.output_tokens);
    gaps.push_back(r.arrival_s - prev);
    ASSERT_GE(r.arrival_s, prev);
    prev = r.arrival_s;
  }
  const Moments mi = Measure(in), mo = Measure(out), mg = Measure(gaps);
  EXPECT_NEAR(mi.mean, 500, 500 * 0.02);
  EXPECT_NEAR(mi.cv, 0.5, 0.5 * 0.05);
  EXPECT_NEAR(mo.mean, 200, 200 * 0.03);
  EXPECT_NEAR(mo.cv, 1.0, 1.0 * 0.15);  // heavy tail: a looser bound
  // Poisson arrivals: exponential gaps, mean 1/rate and cv 1.
  EXPECT_NEAR(mg.mean, 0.25, 0.25 * 0.02);
  EXPECT_NEAR(mg.cv, 1.0, 0.03);
}

TEST(LoadgenWorkloadTest, ZeroCvGivesFixedLengths) {
  WorkloadOptions o;
  o.input_mean = 77;
  o.input_cv = 0;
  o.output_mean = 9;
  o.output_cv = 0;
  auto w = Workload::Create(o);
  ASSERT_TRUE(w.ok());
  for (int64_t i = 0; i < 50; ++i) {
    EXPECT_EQ(w->Get(i).prompt_tokens, 77);
    EXPECT_EQ(w->Get(i).output_tokens, 9);
  }
}

TEST(LoadgenWorkloadTest, RandomTokensCoverTheByteRange) {
  const std::vector<int32_t> t = RandomPromptTokens(7, 3, 20000);
  std::set<int32_t> seen;
  for (int32_t x : t) {
    ASSERT_GE(x, 0);
    ASSERT_LT(x, kPromptTokenRange);
    seen.insert(x);
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kPromptTokenRange));
  EXPECT_EQ(t, RandomPromptTokens(7, 3, 20000));
  EXPECT_NE(t, RandomPromptTokens(7, 4, 20000));
}

TEST(LoadgenWorkloadTest, RateScalesTheSameTrace) {
  WorkloadOptions o;
  o.rate = 1;
  auto slow = Workload::Create(o);
  o.rate = 4;
  auto fast = Workload::Create(o);
  ASSERT_TRUE(slow.ok() && fast.ok());
  for (int64_t i = 0; i < 50; ++i) {
    EXPECT_NEAR(slow->Get(i).arrival_s, 4 * fast->Get(i).arrival_s, 1e-9);
    EXPECT_EQ(slow->Get(i).prompt_token_ids, fast->Get(i).prompt_token_ids);
  }
}

TEST(LoadgenWorkloadTest, InvalidOptionsAreErrors) {
  WorkloadOptions o;
  o.input_mean = 0;
  EXPECT_FALSE(Workload::Create(o).ok());
  o = {};
  o.output_cv = -1;
  EXPECT_FALSE(Workload::Create(o).ok());
  o = {};
  o.rate = 0;
  EXPECT_FALSE(Workload::Create(o).ok());
}

TEST(LoadgenWorkloadTest, PromptFileLinesArePickedBySeed) {
  const std::string path = ::testing::TempDir() + "/loadgen_prompts.txt";
  {
    std::ofstream out(path);
    out << "first prompt\n\nsecond\r\nthird one\n";
  }
  auto prompts = ReadPromptFile(path);
  ASSERT_TRUE(prompts.ok()) << prompts.status();
  ASSERT_EQ(*prompts, (std::vector<std::string>{"first prompt", "second", "third one"}));
  WorkloadOptions o;
  o.prompts = *prompts;
  auto a = Workload::Create(o);
  auto b = Workload::Create(o);
  ASSERT_TRUE(a.ok() && b.ok());
  std::set<std::string> used;
  for (int64_t i = 0; i < 200; ++i) {
    const PlannedRequest r = a->Get(i);
    EXPECT_TRUE(r.prompt_token_ids.empty());
    EXPECT_EQ(r.prompt_text, b->Get(i).prompt_text);
    EXPECT_EQ(r.prompt_tokens, static_cast<int64_t>(r.prompt_text.size()));
    used.insert(r.prompt_text);
  }
  EXPECT_EQ(used.size(), 3u);
  std::remove(path.c_str());
}

TEST(LoadgenWorkloadTest, PromptFileErrorsNameTheFile) {
  auto missing = ReadPromptFile("/nonexistent/prompts.txt");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/prompts.txt"), std::string::npos);
  const std::string path = ::testing::TempDir() + "/loadgen_empty.txt";
  {
    std::ofstream out(path);
    out << "\n\n";
  }
  auto empty = ReadPromptFile(path);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find(path), std::string::npos);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace ced::loadgen
