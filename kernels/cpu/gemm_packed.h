// Prefill-shaped GEMMs on weights packed once: y[n, out] (+)= x[n, in] * w^T.
//
// BLAS packs the weight operand on every call; in a chunked prefill that is
// every weight once per chunk and replay, a stream over all weights as large
// as the product's own reads. Packing once (at the first product, kept for
// the weights' lifetime) leaves only the arithmetic: panels of kPanel output
// columns, each stored k-major ([in][kPanel]), read by an 8 x 32 register-
// tiled AVX-512 kernel (two FMAs per broadcast x value).
#pragma once

#include <cstddef>
#include <memory>

namespace ced::kernels {

constexpr int kPanel = 32;

class PackedMatrix {
 public:
  // Packs w [out, in] (row-major, like a linear layer).
  PackedMatrix(const float* w, int out, int in);
  int out() const { return out_; }
  int in() const { return in_; }
  int panels() const { return panels_; }
  // Panel p: [in][kPanel] floats, columns past `out` zero.
  const float* panel(int p) const { return data_.get() + static_cast<size_t>(p) * in_ * kPanel; }

 private:
  struct Free {
    void operator()(float* p) const;
  };
  int out_, in_, panels_;
  std::unique_ptr<float, Free> data_;
};

struct PackedGemmTarget {
  const PackedMatrix* w = nullptr;
  float* y = nullptr;  // [n, w->out()]
  bool accumulate = false;
};

// y[n, cols] (+)= x[n, in] * B on one thread, B given as panels of kPanel
// columns: panel p starts at b + p * panel_stride and holds rows [0, in) of
// kPanel floats (columns past `cols` are read but not stored). x rows are
// ldx floats apart, y rows ldy.
void PanelGemm(const float* x, size_t ldx, int n, int in, const float* b, size_t panel_stride,
               int cols, float* y, size_t ldy, bool accumulate);

// For every target: y (+)= x[n, in] * w^T. Panels of all targets are spread
// over the worker pool.
void GemmPackedMultiCpu(const float* x, int n, int in, const PackedGemmTarget* targets, int count);

// Batch 1: y[out] (+)= x[in] * w^T for every target. Each panel is one
// contiguous stream of in * kPanel floats, read once front to back (with
// software prefetch); panels of all targets are spread over the worker pool.
void GemvPackedMultiCpu(const float* x, int in, const PackedGemmTarget* targets, int count);

// One panel of the above on the calling thread: y[0, cols) (+)= x[in] * panel
// (panel [in][kPanel], columns past `cols` are read but not stored).
void PanelGemv(const float* x, int in, const float* panel, int cols, float* y, bool accumulate);

}  // namespace ced::kernels
