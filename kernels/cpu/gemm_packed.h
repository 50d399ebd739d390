// Prefill-shaped GEMMs on weights packed once: y[n, out] (+)= x[n, in] * w^T.
//
// BLAS packs the weight operand on every call; in a chunked prefill that is
// every weight once per chunk and replay, a stream over all weights as large
// as the product's own reads. Packing once (at the first product, kept for
// the weights' lifetime) leaves only the arithmetic: panels of panel_width()
// output columns, each stored k-major ([in][panel_width]), read by a
// register-tiled kernel of the active variant (kernels/cpu/isa.h): 8 x 32
// on AVX-512 (16 zmm accumulators), 6 x 16 on AVX2 (12 ymm), 3 x 16 portable.
#pragma once

#include <cstddef>
#include <memory>

namespace ced::kernels {

// Panel width of the active variant: what a PackedMatrix made now holds.
int PackedPanelWidth();

class PackedMatrix {
 public:
  // Packs w [out, in] (row-major, like a linear layer) for the active variant.
  PackedMatrix(const float* w, int out, int in);
  int out() const { return out_; }
  int in() const { return in_; }
  int panels() const { return panels_; }
  int panel_width() const { return panel_width_; }
  // Panel p: [in][panel_width] floats, columns past `out` zero.
  const float* panel(int p) const {
    return data_.get() + static_cast<size_t>(p) * in_ * panel_width_;
  }
  // Whether the active variant reads this layout (false after SetActiveCpuIsa
  // switched to a variant with another panel width: pack again).
  bool MatchesActiveVariant() const { return panel_width_ == PackedPanelWidth(); }

 private:
  struct Free {
    void operator()(float* p) const;
  };
  int out_, in_, panel_width_, panels_;
  std::unique_ptr<float, Free> data_;
};

struct PackedGemmTarget {
  const PackedMatrix* w = nullptr;
  float* y = nullptr;  // [n, w->out()]
  bool accumulate = false;
};

// For every target: y (+)= x[n, in] * w^T. Panels of all targets are split
// into one share of consecutive panels per pool thread (the GEMV's schedule:
// each thread streams contiguous memory; idle threads take the ends of the
// others' shares). Every w must match the active variant.
void GemmPackedMultiCpu(const float* x, int n, int in, const PackedGemmTarget* targets, int count);

// Batch 1: y[out] (+)= x[in] * w^T for every target. Each panel is one
// contiguous stream of in * panel_width floats, read once front to back
// (with software prefetch); panels of all targets are spread over the pool.
void GemvPackedMultiCpu(const float* x, int in, const PackedGemmTarget* targets, int count);

}  // namespace ced::kernels
