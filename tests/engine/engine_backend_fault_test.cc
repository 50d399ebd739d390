// A backend fault (ops return nothing; the backend records the first error)
// fails the engine step that met it: no tokens, no K/V published, from a
// device that faulted. The faulty backend wraps the CPU one and starts
// failing after a set number of attention calls.
#include <atomic>

#include "tests/engine/test_util.h"

namespace ced::testing {
namespace {

std::atomic<int> g_fail_after{-1};  // attention calls before the fault; -1: never

class FaultyBackend final : public Backend {
 public:
  explicit FaultyBackend(std::unique_ptr<Backend> inner) : in_(std::move(inner)) {}
  std::string_view name() const override { return "cpu-faulty"; }
  void* Alloc(size_t b) override { return in_->Alloc(b); }
  void* AllocScratch(size_t b) override { return in_->AllocScratch(b); }
  void Free(void* p) override { in_->Free(p); }
  void CopyToDevice(void* d, const void* s, size_t b) override { in_->CopyToDevice(d, s, b); }
  void CopyToHost(void* d, const void* s, size_t b) override { in_->CopyToHost(d, s, b); }
  void Copy(void* d, const void* s, size_t b) override { in_->Copy(d, s, b); }
  absl::StatusOr<const float*> UploadWeights(const float* h, size_t n) override {
    return in_->UploadWeights(h, n);
  }
  void Embed(const int32_t* t, int n, const float* table, int d, float* out) override {
    in_->Embed(t, n, table, d, out);
  }
  void RmsNorm(const float* x, int n, int d, const float* w, float eps, float* out) override {
    in_->RmsNorm(x, n, d, w, eps, out);
  }
  void Gemm(const float* x, int n, int in, const float* w, int out, float* y) override {
    in_->Gemm(x, n, in, w, out, y);
  }
  void GemmMulti(const float* x, int n, int in, const GemmTarget* t, int count) override {
    in_->GemmMulti(x, n, in, t, count);
  }
  void Add(float* x, const float* y, size_t n) override { in_->Add(x, y, n); }
  void Rope(float* x, int n, int h, int hd, const int32_t* pos, double theta) override {
    in_->Rope(x, n, h, hd, pos, theta);
  }
  void SiluMul(float* g, const float* u, size_t n) override { in_->SiluMul(g, u, n); }
  void GatherRows(const float* x, int d, const int32_t* rows, int n, float* out) override {
    in_->GatherRows(x, d, rows, n, out);
  }
  void MoeCombine(float* x, int n, int d, int k, const float* y, const int32_t* rows,
                  const float* w) override {
    in_->MoeCombine(x, n, d, k, y, rows, w);
  }
  void StoreRows(KvFormat f, const float* src, int n, int e, size_t stride,
                 uint8_t* const* dst) override {
    in_->StoreRows(f, src, n, e, stride, dst);
  }
  void RoundTrip(KvFormat f, float* x, int n, int e) override { in_->RoundTrip(f, x, n, e); }
  void Attention(const AttentionParams& p, const std::vector<AttentionSegment>& s) override {
    const int left = g_fail_after.load();
    if (left == 0 && status_.ok()) status_ = absl::InternalError("injected device fault");
    if (left > 0) g_fail_after.store(left - 1);
    in_->Attention(p, s);
  }
  void Synchronize() override { in_->Synchronize(); }
  absl::Status status() const override { return status_; }

 private:
  std::unique_ptr<Backend> in_;
  absl::Status status_;
};

const bool kRegistered = RegisterBackend("cpu-faulty", []() -> absl::StatusOr<std::unique_ptr<Backend>> {
  auto cpu = CreateBackend("cpu");
  if (!cpu.ok()) return cpu.status();
  return std::unique_ptr<Backend>(new FaultyBackend(std::move(*cpu)));
});

std::unique_ptr<Engine> FaultyEngine() {
  EngineOptions o;
  o.device = "cpu-faulty";
  auto e = Engine::CreateWithWeights(o, LoadTestModel("tiny"));
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

TEST(EngineBackendFaultTest, AFaultDuringPrefillFailsItAndPublishesNothing) {
  ASSERT_TRUE(kRegistered);
  g_fail_after = 3;  // inside the first chunk's layers
  auto engine = FaultyEngine();
  ASSERT_NE(engine, nullptr);
  const auto prompt = RandomPrompt(100, 1);
  auto seq = engine->CreateSequenceForPrompt(prompt, 120, nullptr);
  ASSERT_TRUE(seq.ok());
  bool chunk_reported = false;
  PrefillOptions po;
  po.chunk_tokens = 32;
  po.on_chunk = [&](int, int) { chunk_reported = true; };
  auto pre = engine->Prefill(*seq, prompt, po);
  EXPECT_EQ(pre.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(pre.status().message().find("injected device fault"), std::string::npos);
  EXPECT_FALSE(chunk_reported) << "K/V of a faulted step must not be handed out";
  EXPECT_TRUE(engine->ReleaseSequence(*seq).ok());
  EXPECT_EQ(engine->cache_stats().cached_blocks, 0);
  g_fail_after = -1;
}

TEST(EngineBackendFaultTest, AFaultDuringDecodeFailsTheStep) {
  g_fail_after = -1;
  auto engine = FaultyEngine();
  ASSERT_NE(engine, nullptr);
  const auto prompt = RandomPrompt(20, 2);
  auto seq = engine->CreateSequence(40);
  ASSERT_TRUE(seq.ok());
  auto pre = engine->Prefill(*seq, prompt, PrefillOptions{});
  ASSERT_TRUE(pre.ok()) << pre.status();
  DecodeInput in{*seq, Argmax(pre->logits.data(), engine->config().vocab_size)};
  ASSERT_TRUE(engine->Decode(absl::MakeConstSpan(&in, 1)).ok());
  g_fail_after = 0;
  auto step = engine->Decode(absl::MakeConstSpan(&in, 1));
  EXPECT_EQ(step.status().code(), absl::StatusCode::kInternal);
  g_fail_after = -1;
  // Sticky: the backend stays failed.
  EXPECT_FALSE(engine->Decode(absl::MakeConstSpan(&in, 1)).ok());
}

}  // namespace
}  // namespace ced::testing
