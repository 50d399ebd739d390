// GPU sampling kernels: argmax against a host reference, greedy shortcuts,
// candidate sets, determinism, and agreement with the host sampler.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "engine/sampling/sampler.h"
#include "kernels/cuda/sampling.h"
#include "tests/cuda/cuda_test_util.h"

namespace ced::testing {
namespace {

int HostArgmax(const float* v, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i) {
    if (v[i] > v[best] || std::isnan(v[best])) best = i;
  }
  return best;
}

TEST(CudaSamplingTest, ArgmaxMatchesHostWithTiesAndNan) {
  CED_SKIP_WITHOUT_CUDA();
  const int n = 4, vocab = 5000;
  auto logits = RandomFloats(static_cast<size_t>(n) * vocab, 1);
  logits[0] = std::numeric_limits<float>::quiet_NaN();
  logits[vocab + 10] = logits[vocab + 20] = 100.0f;  // tie: lowest id wins
  logits[2 * vocab + vocab - 1] = 50.0f;
  DeviceArray<float> d(logits);
  DeviceArray<int32_t> out(n);
  ASSERT_EQ(kernels::ArgmaxCuda(d.get(), n, vocab, out.get(), nullptr), cudaSuccess);
  const auto got = out.ToHost();
  for (int i = 0; i < n; ++i) EXPECT_EQ(got[i], HostArgmax(&logits[i * vocab], vocab)) << i;
  EXPECT_EQ(got[1], 10);
  EXPECT_EQ(got[2], vocab - 1);
}

TEST(CudaSamplingTest, GreedySettingsReturnTheArgmax) {
  CED_SKIP_WITHOUT_CUDA();
  const int n = 3, vocab = 1000;
  const auto logits = RandomFloats(static_cast<size_t>(n) * vocab, 2);
  DeviceArray<float> d(logits);
  DeviceArray<uint64_t> steps(std::vector<uint64_t>{0, 1, 2});
  DeviceArray<int32_t> out(n);
  for (auto [t, k] : {std::pair<float, int>{0.0f, 0}, {1.0f, 1}}) {
    kernels::CudaSamplingParams p;
    p.temperature = t;
    p.top_k = k;
    p.seed = 5;
    ASSERT_EQ(kernels::SampleCuda(d.get(), n, vocab, p, steps.get(), out.get(), nullptr),
              cudaSuccess);
    const auto got = out.ToHost();
    for (int i = 0; i < n; ++i) EXPECT_EQ(got[i], HostArgmax(&logits[i * vocab], vocab));
  }
}

TEST(CudaSamplingTest, SamplesStayInTheTopKAndRepeatForTheSameSeed) {
  CED_SKIP_WITHOUT_CUDA();
  const int n = 64, vocab = 512, k = 5;
  std::vector<float> logits;
  for (int i = 0; i < n; ++i) {
    const auto row = RandomFloats(vocab, 3);  // the same row for every step
    logits.insert(logits.end(), row.begin(), row.end());
  }
  std::vector<int> order(vocab);
  for (int i = 0; i < vocab; ++i) order[i] = i;
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int a, int b) { return logits[a] > logits[b]; });
  const std::set<int> top(order.begin(), order.begin() + k);
  std::vector<uint64_t> step_ids(n);
  for (int i = 0; i < n; ++i) step_ids[i] = i;
  DeviceArray<float> d(logits);
  DeviceArray<uint64_t> steps(step_ids);
  DeviceArray<int32_t> a(n), b(n);
  kernels::CudaSamplingParams p;
  p.temperature = 2.0f;
  p.top_k = k;
  p.seed = 11;
  ASSERT_EQ(kernels::SampleCuda(d.get(), n, vocab, p, steps.get(), a.get(), nullptr), cudaSuccess);
  ASSERT_EQ(kernels::SampleCuda(d.get(), n, vocab, p, steps.get(), b.get(), nullptr), cudaSuccess);
  const auto ga = a.ToHost(), gb = b.ToHost();
  EXPECT_EQ(ga, gb);
  std::set<int> seen;
  for (int tok : ga) {
    EXPECT_TRUE(top.count(tok)) << tok;
    seen.insert(tok);
  }
  EXPECT_GT(seen.size(), 1u);  // temperature 2 over 5 candidates: not always the same
}

TEST(CudaSamplingTest, AgreesWithTheHostSamplerOnTopKTopP) {
  CED_SKIP_WITHOUT_CUDA();
  const int n = 100, vocab = 300;
  std::vector<float> logits;
  for (int i = 0; i < n; ++i) {
    const auto row = RandomFloats(vocab, 20 + i, 2.0f);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  std::vector<uint64_t> step_ids(n);
  for (int i = 0; i < n; ++i) step_ids[i] = 1000 + i;
  DeviceArray<float> d(logits);
  DeviceArray<uint64_t> steps(step_ids);
  DeviceArray<int32_t> out(n);
  kernels::CudaSamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 20;
  p.top_p = 0.9f;
  p.seed = 77;
  ASSERT_EQ(kernels::SampleCuda(d.get(), n, vocab, p, steps.get(), out.get(), nullptr),
            cudaSuccess);
  const auto got = out.ToHost();
  SamplingParams hp;
  hp.temperature = p.temperature;
  hp.top_k = p.top_k;
  hp.top_p = p.top_p;
  hp.seed = p.seed;
  int agree = 0;
  for (int i = 0; i < n; ++i) {
    agree += got[i] == SampleToken(&logits[i * vocab], vocab, hp, step_ids[i]);
  }
  // Same draw and candidate rule; only float-vs-double mass sums may differ.
  EXPECT_GE(agree, n - 2);
}

TEST(CudaSamplingTest, RejectsInvalidParams) {
  CED_SKIP_WITHOUT_CUDA();
  DeviceArray<float> d(10);
  DeviceArray<uint64_t> steps(1);
  DeviceArray<int32_t> out(1);
  kernels::CudaSamplingParams p;
  p.top_p = 0.0f;
  EXPECT_EQ(kernels::SampleCuda(d.get(), 1, 10, p, steps.get(), out.get(), nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace ced::testing
