// The CPU backend: host memory, OpenBLAS GEMMs, OpenMP kernels.
#include <cstdlib>
#include <cstring>
#include <memory>

#include "engine/backend/backend.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/kv_codec.h"
#include "kernels/cpu/math.h"

namespace ced {
namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend() { kernels::SetBlasSingleThreaded(); }
  std::string_view name() const override { return "cpu"; }

  void* Alloc(size_t bytes) override {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (p != nullptr) std::memset(p, 0, rounded == 0 ? 64 : rounded);
    return p;
  }
  void Free(void* ptr) override { std::free(ptr); }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void Copy(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  absl::StatusOr<const float*> UploadWeights(const float* host, size_t) override { return host; }

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
    kernels::GemmCpu(x, n, in, w, out, y);
  }
  void Add(float* x, const float* y, size_t count) override { kernels::AddCpu(x, y, count); }
  void Rope(float* x, int n, int heads, int head_dim, const int32_t* positions,
            double theta) override {
    kernels::RopeCpu(x, n, heads, head_dim, positions, theta);
  }
  void SiluMul(float* gate, const float* up, size_t count) override {
    kernels::SiluMulCpu(gate, up, count);
  }
  void StoreRows(KvFormat format, const float* src, int n, int row_elems, size_t src_stride,
                 uint8_t* const* dst_rows) override {
    for (int i = 0; i < n; ++i) {
      kernels::EncodeRow(format, src + i * src_stride, row_elems, dst_rows[i]);
    }
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
};

[[maybe_unused]] const bool kRegistered = RegisterBackend("cpu", []() -> absl::StatusOr<std::unique_ptr<Backend>> {
  return std::make_unique<CpuBackend>();
});

}  // namespace
}  // namespace ced
