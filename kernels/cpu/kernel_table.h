// The dispatcher's view of the kernel variants: one table of entry points per
// instruction set (kernels/cpu/isa.h), each compiled from the same sources
// with that variant's vector width and register tiles. The public entry
// points (math.h, gemm_packed.h, attention.h, kv_codec.h) call ActiveKernels().
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kv_codec.h"

namespace ced::kernels {

struct KernelTable {
  CpuIsa isa;
  int panel_width;  // columns per panel of a PackedMatrix this variant reads
  void (*gemm_packed)(const float* x, int n, int in, const PackedGemmTarget* targets, int count);
  void (*gemv_packed)(const float* x, int in, const PackedGemmTarget* targets, int count);
  // y[r] (+)= w[r, :] . x for rows [r0, r1) of a row-major w [*, in].
  void (*gemv_rows)(const float* x, int in, const float* w, int r0, int r1, float* y, bool acc);
  void (*attention)(const AttentionParams& p, const std::vector<AttentionSegment>& segments);
  void (*rms_norm_row)(const float* x, int d, const float* w, float eps, float* out);
  void (*rope_row)(float* x, int heads, int head_dim, const float* cos, const float* sin);
  void (*silu_mul)(float* gate, const float* up, size_t count);
  void (*add)(float* x, const float* y, size_t count);
};

// The K/V row codecs apart (kv_codec_rows.cc, kv_codec.cc): code that only
// encodes and decodes rows links them without the rest of the kernels.
struct KvCodecTable {
  void (*encode_row)(KvFormat f, const float* src, size_t n, uint8_t* dst);
  void (*decode_row_slice)(KvFormat f, const uint8_t* src, size_t n, size_t begin, size_t count,
                           float* dst);
};

namespace generic {
extern const KernelTable kTable;
extern const KvCodecTable kCodecTable;
}
namespace avx2 {
extern const KernelTable kTable;
extern const KvCodecTable kCodecTable;
}
namespace avx512 {
extern const KernelTable kTable;
extern const KvCodecTable kCodecTable;
}

// Of one object per variant, the one of `isa`.
template <typename T>
const T& ForIsa(CpuIsa isa, const T& generic, const T& avx2, const T& avx512) {
  switch (isa) {
    case CpuIsa::kAvx512: return avx512;
    case CpuIsa::kAvx2: return avx2;
    case CpuIsa::kGeneric: break;
  }
  return generic;
}

// The table of `isa` (which this build always has; the caller checks that
// the CPU supports it).
const KernelTable& KernelsFor(CpuIsa isa);
// The table of ActiveCpuIsa().
const KernelTable& ActiveKernels();

}  // namespace ced::kernels
