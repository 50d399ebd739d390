// Mixture of experts and window-only layers on the CUDA backend (DESIGN.md
// §1.7, §1.1 source -1): the MoE combine kernel against a host loop, and
// greedy generation on tiny-moe / tiny-moe-dec equal to the CPU backend's.
// Every case GTEST_SKIP()s without a GPU.
#include <cmath>

#include "kernels/cuda/elementwise.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/engine/test_util.h"

namespace ced::testing {
namespace {

TEST(CudaMoeTest, CombineMatchesAHostLoop) {
  CED_SKIP_WITHOUT_CUDA();
  const int n = 9, d = 300, k = 3, rows = n * k;
  const auto x0 = RandomFloats(static_cast<size_t>(n) * d, 1);
  const auto y = RandomFloats(static_cast<size_t>(rows) * d, 2);
  const auto w = RandomFloats(rows, 3);
  std::vector<int32_t> idx(rows);
  for (int i = 0; i < rows; ++i) idx[i] = (i * 7) % rows;  // a permutation
  std::vector<float> want = x0;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < k; ++j) {
      for (int c = 0; c < d; ++c) want[i * d + c] += w[i * k + j] * y[idx[i * k + j] * d + c];
    }
  }
  DeviceArray<float> dx(x0), dy(y), dw(w);
  DeviceArray<int32_t> didx(idx);
  ASSERT_EQ(kernels::MoeCombineCuda(dx.get(), n, d, k, dy.get(), didx.get(), dw.get(), nullptr),
            cudaSuccess);
  const auto got = dx.ToHost();
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::fabs(want[i]))) << i;
  }
}

class CudaMoeParityTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaMoeParityTest, GreedyTokensEqualCpu) {
  CED_SKIP_WITHOUT_CUDA();
  const auto prompt = RandomPrompt(100, 42);
  PrefillOptions po;
  po.chunk_tokens = 32;
  auto make = [&](const std::string& device) {
    EngineOptions o;
    o.device = device;
    o.kv_cache_bytes = 64ll << 20;
    auto e = Engine::CreateWithWeights(o, LoadTestModel(GetParam()));
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  };
  auto cpu = make("cpu");
  auto gpu = make("cuda");
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(gpu, nullptr);
  const GreedyRun want = RunGreedy(*cpu, prompt, 32, po);
  const GreedyRun got = RunGreedy(*gpu, prompt, 32, po);
  EXPECT_EQ(got.tokens, want.tokens);
  for (size_t s = 0; s < got.logits.size() && s < want.logits.size(); ++s) {
    ASSERT_LE(RelDiff(got.logits[s].data(), want.logits[s].data(), got.logits[s].size()), 1e-3)
        << "step " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, CudaMoeParityTest, ::testing::Values("tiny-moe", "tiny-moe-dec"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace ced::testing
