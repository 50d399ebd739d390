// Prefill-shaped GEMMs on weights packed once: y[n, out] (+)= x[n, in] * w^T.
//
// BLAS packs the weight operand on every call; in a chunked prefill that is
// every weight once per chunk and replay, a stream over all weights as large
// as the product's own reads. Packing once (at the first product, kept for
// the weights' lifetime) leaves only the arithmetic: panels of panel_width()
// output columns, each stored k-major ([in][panel_width]), read by a
// register-tiled kernel of the active variant (kernels/cpu/isa.h): 8 x 32
// on AVX-512 (16 zmm accumulators), 6 x 16 on AVX2 (12 ymm), 3 x 16 portable.
// Weights that are all bf16 values are packed as bf16 (PackedBf16Allowed):
// the GEMM widens each 256-deep panel slice once into an L1 buffer that all
// row tiles read, the GEMV widens as it streams.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ced::kernels {

// Panel width of the active variant: what a PackedMatrix made now holds.
int PackedPanelWidth();

// Whether PackedMatrix may store weights as bf16: `auto` (or unset) when
// every value of the matrix is a bf16 (lossless: the kernels widen each
// value back to the same float, so products are bit-identical to the f32
// layout, and read half the bytes), `f32` never. From CED_CPU_WEIGHTS; an
// unknown value is refused by ValidateCpuIsaEnv() (kernels/cpu/isa.h).
bool PackedBf16Allowed();

// Whether every one of the `count` floats at w is a bf16 value (its low 16
// bits zero): what PackedMatrix checks before packing a matrix as bf16.
bool AllBf16Values(const float* w, size_t count);

class PackedMatrix {
 public:
  enum class Storage { kF32, kBf16 };
  // Packs w [out, in] (row-major, like a linear layer) for the active variant:
  // as bf16 when every value of w is one and PackedBf16Allowed() (a model
  // stored in bf16: its weights were widened to f32 when loaded), else f32.
  PackedMatrix(const float* w, int out, int in);
  // With the storage given: kBf16 keeps the upper half of each value (exact
  // only for bf16 values: callers check AllBf16Values first).
  PackedMatrix(const float* w, int out, int in, Storage storage);
  int out() const { return out_; }
  int in() const { return in_; }
  int panels() const { return panels_; }
  int panel_width() const { return panel_width_; }
  bool bf16() const { return storage_ == Storage::kBf16; }
  Storage storage() const { return storage_; }
  // Bytes of the packed copy.
  size_t bytes() const { return bytes_; }
  // Panel p: [in][panel_width] values, columns past `out` zero; panel() for
  // f32 storage, panel_bf16() (the upper halves of the floats) for bf16.
  const float* panel(int p) const {
    return static_cast<const float*>(data_.get()) + static_cast<size_t>(p) * in_ * panel_width_;
  }
  const uint16_t* panel_bf16(int p) const {
    return static_cast<const uint16_t*>(data_.get()) +
           static_cast<size_t>(p) * in_ * panel_width_;
  }
  // Whether the active variant reads this layout (false after SetActiveCpuIsa
  // switched to a variant with another panel width: pack again).
  bool MatchesActiveVariant() const { return panel_width_ == PackedPanelWidth(); }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  int out_, in_, panel_width_, panels_;
  Storage storage_ = Storage::kF32;
  size_t bytes_ = 0;
  std::unique_ptr<void, Free> data_;
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
