// Public entry points of the variant kernels: each calls the active
// variant's table (kernels/cpu/kernel_table.h). Compiled for the baseline.
#include <algorithm>
#include <cstdlib>
#include <new>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/huge_alloc.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/thread_pool.h"

namespace ced::kernels {

const KernelTable& KernelsFor(CpuIsa isa) {
  return ForIsa(isa, generic::kTable, avx2::kTable, avx512::kTable);
}

const KernelTable& ActiveKernels() { return KernelsFor(ActiveCpuIsa()); }

int PackedPanelWidth() { return ActiveKernels().panel_width; }

void PackedMatrix::Free::operator()(float* p) const { std::free(p); }

PackedMatrix::PackedMatrix(const float* w, int out, int in)
    : out_(out), in_(in), panel_width_(PackedPanelWidth()) {
  const int pw = panel_width_;
  panels_ = (out + pw - 1) / pw;
  const size_t count = static_cast<size_t>(panels_) * in * pw;
  const size_t bytes = (count * sizeof(float) + 63) / 64 * 64;
  float* data = static_cast<float*>(AllocLarge(bytes));
  if (data == nullptr) throw std::bad_alloc();
  data_.reset(data);
  ParallelFor(panels_, [&](int p) {
    // k outer: the panel is written front to back while the source rows'
    // current lines stay in L1.
    float* dst = data + static_cast<size_t>(p) * in * pw;
    const int rows = std::min(pw, out - p * pw);
    const float* src = w + static_cast<size_t>(p) * pw * in;
    for (int k = 0; k < in; ++k) {
      float* d = dst + static_cast<size_t>(k) * pw;
      for (int j = 0; j < rows; ++j) d[j] = src[static_cast<size_t>(j) * in + k];
      for (int j = rows; j < pw; ++j) d[j] = 0.0f;
    }
  });
}

void GemmPackedMultiCpu(const float* x, int n, int in, const PackedGemmTarget* targets, int count) {
  ActiveKernels().gemm_packed(x, n, in, targets, count);
}

void GemvPackedMultiCpu(const float* x, int in, const PackedGemmTarget* targets, int count) {
  ActiveKernels().gemv_packed(x, in, targets, count);
}

void AttentionCpu(const AttentionParams& p, const std::vector<AttentionSegment>& segments) {
  ActiveKernels().attention(p, segments);
}

}  // namespace ced::kernels
