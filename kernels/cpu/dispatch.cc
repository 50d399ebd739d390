// Public entry points of the variant kernels: each calls the active
// variant's table (kernels/cpu/kernel_table.h). Compiled for the baseline.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
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

void PackedMatrix::Free::operator()(void* p) const { std::free(p); }

bool AllBf16Values(const float* w, size_t count) {
  std::atomic<bool> all{true};
  constexpr size_t kChunk = 1 << 16;
  const int chunks = static_cast<int>((count + kChunk - 1) / kChunk);
  ParallelFor(
      chunks,
      [&](int c) {
        if (!all.load(std::memory_order_relaxed)) return;
        const size_t b = static_cast<size_t>(c) * kChunk, e = std::min(count, b + kChunk);
        uint32_t low = 0;
        for (size_t i = b; i < e; ++i) {
          uint32_t bits;
          std::memcpy(&bits, w + i, sizeof bits);
          low |= bits;
        }
        if ((low & 0xffffu) != 0) all.store(false, std::memory_order_relaxed);
      },
      count >= (1u << 18));
  return all.load();
}

PackedMatrix::PackedMatrix(const float* w, int out, int in)
    : PackedMatrix(w, out, in,
                   PackedBf16Allowed() && AllBf16Values(w, static_cast<size_t>(out) * in)
                       ? Storage::kBf16
                       : Storage::kF32) {}

PackedMatrix::PackedMatrix(const float* w, int out, int in, Storage storage)
    : out_(out), in_(in), panel_width_(PackedPanelWidth()), storage_(storage) {
  const int pw = panel_width_;
  panels_ = (out + pw - 1) / pw;
  const size_t count = static_cast<size_t>(panels_) * in * pw;
  const size_t elem = storage == Storage::kBf16 ? sizeof(uint16_t) : sizeof(float);
  bytes_ = (count * elem + 63) / 64 * 64;
  void* data = AllocLarge(bytes_);
  if (data == nullptr) throw std::bad_alloc();
  data_.reset(data);
  const bool bf16 = storage == Storage::kBf16;
  ParallelFor(panels_, [&](int p) {
    // k outer: the panel is written front to back while the source rows'
    // current lines stay in L1.
    const size_t first = static_cast<size_t>(p) * in * pw;
    const int rows = std::min(pw, out - p * pw);
    const float* src = w + static_cast<size_t>(p) * pw * in;
    for (int k = 0; k < in; ++k) {
      const size_t d = first + static_cast<size_t>(k) * pw;
      for (int j = 0; j < pw; ++j) {
        const float v = j < rows ? src[static_cast<size_t>(j) * in + k] : 0.0f;
        if (bf16) {
          uint32_t bits;
          std::memcpy(&bits, &v, sizeof bits);
          static_cast<uint16_t*>(data)[d + j] = static_cast<uint16_t>(bits >> 16);
        } else {
          static_cast<float*>(data)[d + j] = v;
        }
      }
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
