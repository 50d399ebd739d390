// The CPU backend: host memory, OpenBLAS GEMMs, kernels on the CPU worker pool.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/backend/backend.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/huge_alloc.h"
#include "kernels/cpu/kv_codec.h"
#include "kernels/cpu/math.h"
#include "kernels/cpu/thread_pool.h"

namespace ced {
namespace {

// Scratch blocks of 2 MiB and more, kept after Free for the next request of
// the same size. The engine allocates its per-chunk buffers anew on every
// call (DeviceBuffer), and a fresh block of that size is a fresh mapping
// whose pages the kernel faults in and zeroes again: on huge pages one 2 MiB
// fault per 2 MiB (1.6% of a prefill worker's time, measured with perf on
// 4,000-token prompts), without them one fault per 4 KiB (~30 us each on
// the VMs of kernels/cpu/huge_alloc.h). Holds at most kMaxBytes; the blocks
// freed longest ago go first. Thread-safe.
class ScratchCache {
 public:
  static constexpr size_t kMaxBytes = size_t{128} << 20;
  ~ScratchCache() {
    for (const auto& [bytes, ptr] : free_) std::free(ptr);
  }
  void* Alloc(size_t bytes) {
    if (bytes < kernels::kHugePageBytes) return kernels::AllocLarge(bytes);
    const size_t size = kernels::LargeAllocBytes(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    void* p = nullptr;
    for (auto it = free_.rbegin(); it != free_.rend(); ++it) {
      if (it->first != size) continue;
      p = it->second;
      held_ -= size;
      free_.erase(std::next(it).base());
      break;
    }
    if (p == nullptr) p = kernels::AllocLarge(size);
    if (p != nullptr) live_[p] = size;
    return p;
  }
  // False when `ptr` is not a live block of this cache (the caller frees it).
  bool Free(void* ptr) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(ptr);
    if (it == live_.end()) return false;
    const size_t size = it->second;
    live_.erase(it);
    free_.emplace_back(size, ptr);
    held_ += size;
    while (held_ > kMaxBytes && !free_.empty()) {
      held_ -= free_.front().first;
      std::free(free_.front().second);
      free_.erase(free_.begin());
    }
    return true;
  }

 private:
  std::mutex mu_;
  std::unordered_map<void*, size_t> live_;       // handed out: block -> bytes
  std::vector<std::pair<size_t, void*>> free_;  // freed, oldest first
  size_t held_ = 0;                              // bytes in free_
};

class CpuBackend final : public Backend {
 public:
  CpuBackend() { kernels::SetBlasSingleThreaded(); }
  std::string_view name() const override { return "cpu"; }

  // Large buffers (the KV cache, scratch) on huge pages (kernels/cpu/huge_alloc.h).
  void* Alloc(size_t bytes) override {
    void* p = kernels::AllocLarge(bytes);
    if (p != nullptr) std::memset(p, 0, bytes);
    return p;
  }
  void* AllocScratch(size_t bytes) override { return scratch_.Alloc(bytes); }
  void Free(void* ptr) override {
    if (!scratch_.Free(ptr)) std::free(ptr);
  }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void Copy(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  // Weights are used in place; their range is remembered so products on them
  // can use a packed copy (kernels/cpu/gemm_packed.h).
  absl::StatusOr<const float*> UploadWeights(const float* host, size_t count) override {
    if (host != nullptr && count > 0) weight_ranges_[host] = host + count;
    return host;
  }

  void Embed(const int32_t* tokens, int n, const float* table, int d, float* out) override {
    for (int i = 0; i < n; ++i) {
      std::memcpy(out + static_cast<size_t>(i) * d, table + static_cast<size_t>(tokens[i]) * d,
                  d * sizeof(float));
    }
  }
  void RmsNorm(const float* x, int n, int d, const float* w, float eps, float* out) override {
    kernels::RmsNormCpu(x, n, d, w, eps, out);
  }
  void Gemm(const float* x, int n, int in, const float* w, int out, float* y) override {
    const GemmTarget t = {w, out, y, false};
    GemmMulti(x, n, in, &t, 1);
  }
  void GemmMulti(const float* x, int n, int in, const GemmTarget* targets, int count) override {
    // Products on uploaded weights use their packed copy: register-tiled
    // GEMM for several rows, and for batch 1 a GEMV that streams each panel
    // front to back (anonymous, huge-page-backed memory, unlike the file
    // map the weights live in, whose 4 KiB pages stall the stream).
    if (n >= 1) {
      std::vector<kernels::PackedGemmTarget> packed(count);
      bool all = true;
      for (int i = 0; i < count && all; ++i) {
        const kernels::PackedMatrix* p = Packed(targets[i].w, targets[i].out, in);
        all = p != nullptr;
        packed[i] = {p, targets[i].y, targets[i].accumulate};
      }
      if (all) {
        if (n == 1) {
          kernels::GemvPackedMultiCpu(x, in, packed.data(), count);
        } else {
          kernels::GemmPackedMultiCpu(x, n, in, packed.data(), count);
        }
        return;
      }
    }
    kernels::GemmMultiCpu(x, n, in, targets, count);
  }
  void Add(float* x, const float* y, size_t count) override { kernels::AddCpu(x, y, count); }
  void Rope(float* x, int n, int heads, int head_dim, const int32_t* positions,
            double theta) override {
    int max_pos = 0;
    for (int i = 0; i < n; ++i) max_pos = std::max(max_pos, positions[i]);
    rope_.Reserve(theta, head_dim, max_pos + 1);  // sin/cos computed once per position
    kernels::RopeCpu(x, n, heads, head_dim, positions, rope_);
  }
  void SiluMul(float* gate, const float* up, size_t count) override {
    kernels::SiluMulCpu(gate, up, count);
  }
  void MoeCombine(float* x, int n, int d, int k, const float* y, const int32_t* rows,
                  const float* weights) override {
    kernels::ParallelFor(
        n,
        [&](int i) {
          float* dst = x + static_cast<size_t>(i) * d;
          for (int j = 0; j < k; ++j) {
            const float w = weights[static_cast<size_t>(i) * k + j];
            const float* src = y + static_cast<size_t>(rows[static_cast<size_t>(i) * k + j]) * d;
            for (int c = 0; c < d; ++c) dst[c] += w * src[c];
          }
        },
        static_cast<size_t>(n) * k * d >= (1u << 15));
  }
  void StoreRows(KvFormat format, const float* src, int n, int row_elems, size_t src_stride,
                 uint8_t* const* dst_rows) override {
    // A prefill chunk's rows (hundreds of KiB per layer) are split across
    // the pool; a decode step's few rows are not worth waking it.
    constexpr int kRowsPerTask = 32;
    const int tasks = (n + kRowsPerTask - 1) / kRowsPerTask;
    kernels::ParallelFor(
        tasks,
        [&](int t) {
          const int r1 = std::min(n, (t + 1) * kRowsPerTask);
          for (int i = t * kRowsPerTask; i < r1; ++i) {
            kernels::EncodeRow(format, src + i * src_stride, row_elems, dst_rows[i]);
          }
        },
        static_cast<size_t>(n) * row_elems >= (1u << 15));
  }
  void RoundTrip(KvFormat format, float* x, int n, int row_elems) override {
    if (format == KvFormat::kF32) return;
    std::vector<uint8_t> row(kernels::KvRowBytes(format, row_elems));
    for (int i = 0; i < n; ++i) {
      float* r = x + static_cast<size_t>(i) * row_elems;
      kernels::EncodeRow(format, r, row_elems, row.data());
      kernels::DecodeRow(format, row.data(), row_elems, r);
    }
  }
  void Attention(const AttentionParams& params,
                 const std::vector<AttentionSegment>& segments) override {
    kernels::AttentionCpu(params, segments);
  }
  void Synchronize() override {}

 private:
  // The packed copy of weight w [out, in], made on first use; nullptr when w
  // is not inside an uploaded weight tensor.
  const kernels::PackedMatrix* Packed(const float* w, int out, int in) {
    auto it = packed_.find(w);
    if (it != packed_.end() && it->second->out() == out && it->second->in() == in &&
        it->second->MatchesActiveVariant()) {
      return it->second.get();
    }
    auto r = weight_ranges_.upper_bound(w);
    if (r == weight_ranges_.begin()) return nullptr;
    --r;
    if (w + static_cast<size_t>(out) * in > r->second) return nullptr;
    auto p = std::make_unique<kernels::PackedMatrix>(w, out, in);
    const kernels::PackedMatrix* raw = p.get();
    packed_[w] = std::move(p);
    return raw;
  }

  ScratchCache scratch_;
  kernels::RopeTable rope_;
  std::map<const float*, const float*> weight_ranges_;  // begin -> end
  std::map<const float*, std::unique_ptr<kernels::PackedMatrix>> packed_;
};

[[maybe_unused]] const bool kRegistered = RegisterBackend(
    "cpu",
    []() -> absl::StatusOr<std::unique_ptr<Backend>> { return std::make_unique<CpuBackend>(); });

}  // namespace
}  // namespace ced
