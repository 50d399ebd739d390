// The engine on the CUDA backend: greedy generation equals the CPU backend's,
// and a sequence prefilled on CUDA can be exported and imported by a CPU
// engine. Without a GPU only the factory's clear error is checked.
#include <cstring>

#include "tests/cuda/cuda_test_util.h"
#include "tests/engine/test_util.h"

namespace ced::testing {
namespace {

constexpr int kSteps = 40;

std::unique_ptr<Engine> MakeEngineOn(const std::string& device,
                                     std::shared_ptr<const ModelWeights> w, KvFormat format) {
  EngineOptions o;
  o.device = device;
  o.kv_format = format;
  o.kv_cache_bytes = 64ll << 20;
  auto e = Engine::CreateWithWeights(o, std::move(w));
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

TEST(CudaEngineTest, FactoryNamesTheMissingDevice) {
  auto backend = CreateBackend("cuda");
  if (HasCudaDevice()) {
    ASSERT_TRUE(backend.ok()) << backend.status();
    EXPECT_EQ((*backend)->name(), "cuda");
  } else {
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(backend.status().message().find("no CUDA device"), std::string::npos)
        << backend.status();
  }
}

class CudaEngineParityTest : public ::testing::TestWithParam<KvFormat> {};

TEST_P(CudaEngineParityTest, GreedyTokensEqualCpu) {
  CED_SKIP_WITHOUT_CUDA();
  const auto prompt = RandomPrompt(100, 42);
  PrefillOptions po;
  po.chunk_tokens = 32;
  auto cpu = MakeEngineOn("cpu", LoadTestModel("tiny"), GetParam());
  auto gpu = MakeEngineOn("cuda", LoadTestModel("tiny"), GetParam());
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(gpu, nullptr);
  const GreedyRun want = RunGreedy(*cpu, prompt, kSteps, po);
  const GreedyRun got = RunGreedy(*gpu, prompt, kSteps, po);
  ASSERT_EQ(got.tokens.size(), want.tokens.size());
  EXPECT_EQ(got.tokens, want.tokens);
  for (size_t k = 0; k < got.logits.size(); ++k) {
    ASSERT_LE(RelDiff(got.logits[k].data(), want.logits[k].data(), got.logits[k].size()), 1e-3)
        << "step " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaEngineParityTest,
                         ::testing::Values(KvFormat::kF32, KvFormat::kBF16),
                         [](const auto& info) {
                           return std::string(kernels::KvFormatName(info.param));
                         });

TEST(CudaEngineTest, Bf16GemmsStayCloseToCpu) {
  CED_SKIP_WITHOUT_CUDA();
  const auto prompt = RandomPrompt(60, 3);
  auto cpu = MakeEngineOn("cpu", LoadTestModel("tiny"), KvFormat::kF32);
  auto gpu = MakeEngineOn("cuda-bf16", LoadTestModel("tiny"), KvFormat::kF32);
  ASSERT_NE(gpu, nullptr);
  const GreedyRun want = RunGreedy(*cpu, prompt, 4);
  const GreedyRun got = RunGreedy(*gpu, prompt, 4);
  ASSERT_EQ(got.logits.size(), want.logits.size());
  EXPECT_LE(RelDiff(got.logits[0].data(), want.logits[0].data(), got.logits[0].size()), 0.1);
}

// Prefill on CUDA, carry the global K/V and the tail to a CPU engine (through
// host memory, as a host-staged transport would), decode there.
TEST(CudaEngineTest, ExportFromCudaImportsIntoCpu) {
  CED_SKIP_WITHOUT_CUDA();
  for (KvFormat f : {KvFormat::kF32, KvFormat::kFP8E4M3}) {
    const auto prompt = RandomPrompt(90, 8);
    auto colocated = MakeEngineOn("cpu", LoadTestModel("tiny"), f);
    const GreedyRun expected = RunGreedy(*colocated, prompt, 24);

    auto prefill = MakeEngineOn("cuda", LoadTestModel("tiny"), f);
    auto decode = MakeEngineOn("cpu", LoadTestModel("tiny"), f);
    const int n = static_cast<int>(prompt.size());
    auto ps = prefill->CreateSequence(n);
    auto ds = decode->CreateSequence(n + 24);
    ASSERT_TRUE(ps.ok() && ds.ok());
    auto pre = prefill->Prefill(*ps, prompt, PrefillOptions{});
    ASSERT_TRUE(pre.ok()) << pre.status();
    auto from = prefill->GlobalRegions(*ps, 0, n);
    auto to = decode->GlobalRegions(*ds, 0, n);
    ASSERT_TRUE(from.ok() && to.ok());
    std::vector<uint8_t> wire;
    for (const ByteRegion& r : *from) {
      const size_t at = wire.size();
      wire.resize(at + r.size);
      prefill->backend().CopyToHost(wire.data() + at, r.data, r.size);
    }
    ASSERT_EQ(wire.size(), Engine::GlobalRangeBytes(prefill->config(), 0, n));
    size_t off = 0;
    for (const ByteRegion& r : *to) {
      std::memcpy(r.data, wire.data() + off, r.size);
      off += r.size;
    }
    ASSERT_EQ(off, wire.size());
    const int32_t first = Argmax(pre->logits.data(), static_cast<int>(pre->logits.size()));
    auto tail = prefill->ExportTail(*ps, first);
    ASSERT_TRUE(tail.ok()) << tail.status();
    auto decoded = DecodeTail(EncodeTail(*tail), decode->config());
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    ASSERT_TRUE(decode->ImportTail(*ds, *decoded).ok());
    std::vector<int32_t> got = {first};
    for (int i = 1; i < 24; ++i) {
      DecodeInput in{*ds, got.back()};
      auto next = decode->Decode(absl::MakeConstSpan(&in, 1));
      ASSERT_TRUE(next.ok()) << next.status();
      got.push_back(Argmax(next->data(), static_cast<int>(next->size())));
    }
    EXPECT_EQ(got, expected.tokens) << kernels::KvFormatName(f);
  }
}

}  // namespace
}  // namespace ced::testing
