#include "kernels/cuda/attention.h"

#include <cmath>

#include "kernels/cuda/kv_codec_device.cuh"

namespace ced::kernels {
namespace {

using cuda_codec::LoadValue;
using cuda_codec::RowBytes;

constexpr int kWarps = 4;
constexpr int kPerLane = kCudaAttentionMaxHeadDim / 32;

struct Shape {
  int H, G, D, W, bs, kv_dim, group;
  bool global;
  size_t row_bytes;
  float scale;
};

// Online-softmax state of one warp: lane holds elements lane + 32*i.
struct State {
  float m = -INFINITY;
  float l = 0.0f;
  float acc[kPerLane] = {};
};

template <KvFormat F>
__device__ __forceinline__ void LoadSlice(const uint8_t* row, const Shape& s, int g, int lane,
                                          float* out) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int j = lane + 32 * i;
    out[i] = j < s.D ? LoadValue<F>(row, s.kv_dim, g * s.D + j) : 0.0f;
  }
}

__device__ __forceinline__ void LoadSliceF32(const float* row, const Shape& s, int g, int lane,
                                             float* out) {
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int j = lane + 32 * i;
    out[i] = j < s.D ? row[g * s.D + j] : 0.0f;
  }
}

__device__ __forceinline__ void Update(State& st, const float* q, const float* k,
                                       const float* v, float scale) {
  float dot = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) dot += q[i] * k[i];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
  const float score = dot * scale;
  const float m_new = fmaxf(st.m, score);
  const float corr = expf(st.m - m_new);  // 0 on the first key (m = -inf)
  const float p = expf(score - m_new);
  st.l = st.l * corr + p;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) st.acc[i] = st.acc[i] * corr + p * v[i];
  st.m = m_new;
}

template <KvFormat F>
__global__ void __launch_bounds__(kWarps * 32)
    AttentionKernel(Shape s, const AttentionSegmentCuda* segments) {
  const AttentionSegmentCuda& seg = segments[blockIdx.y];
  const int warp = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  const int i = warp / s.H, h = warp % s.H;
  if (i >= seg.n) return;
  const int g = h / s.group;
  const int t = seg.q_begin + i;
  const size_t q_off = (static_cast<size_t>(i) * s.H + h) * s.D;
  float q[kPerLane], k[kPerLane], v[kPerLane];
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int j = lane + 32 * r;
    q[r] = j < s.D ? seg.q[q_off + j] : 0.0f;
  }
  State st;
  for (int p = 0; s.global && p <= t; ++p) {
    const size_t off = static_cast<size_t>(p % s.bs) * s.row_bytes;
    LoadSlice<F>(seg.global_k[p / s.bs] + off, s, g, lane, k);
    LoadSlice<F>(seg.global_v[p / s.bs] + off, s, g, lane, v);
    Update(st, q, k, v, s.scale);
  }
  if (s.W > 0) {
    for (int p = max(seg.lo, t - s.W + 1); p <= t; ++p) {
      if (p >= seg.q_begin) {
        const size_t off = static_cast<size_t>(p - seg.q_begin) * s.kv_dim;
        LoadSliceF32(seg.chunk_local_k + off, s, g, lane, k);
        LoadSliceF32(seg.chunk_local_v + off, s, g, lane, v);
      } else {
        const size_t off = static_cast<size_t>(p % s.W) * s.row_bytes;
        LoadSlice<F>(seg.local_k_ring + off, s, g, lane, k);
        LoadSlice<F>(seg.local_v_ring + off, s, g, lane, v);
      }
      Update(st, q, k, v, s.scale);
    }
  }
  const float inv = st.l > 0.0f ? 1.0f / st.l : 0.0f;
#pragma unroll
  for (int r = 0; r < kPerLane; ++r) {
    const int j = lane + 32 * r;
    if (j < s.D) seg.out[q_off + j] = st.acc[r] * inv;
  }
}

}  // namespace

cudaError_t AttentionCuda(const AttentionParams& p, const AttentionSegmentCuda* segments,
                          int num_segments, int max_rows, cudaStream_t stream) {
  if (num_segments <= 0 || max_rows <= 0) return cudaSuccess;
  if (p.head_dim <= 0 || p.head_dim > kCudaAttentionMaxHeadDim || p.num_kv_heads <= 0 ||
      p.num_heads % p.num_kv_heads != 0 || p.block_size <= 0 || p.window < 0 ||
      num_segments > 65535 || (!p.global && p.window <= 0)) {
    return cudaErrorInvalidValue;
  }
  Shape s;
  s.H = p.num_heads;
  s.G = p.num_kv_heads;
  s.D = p.head_dim;
  s.W = p.window;
  s.global = p.global;
  s.bs = p.block_size;
  s.kv_dim = s.G * s.D;
  s.group = s.H / s.G;
  s.row_bytes = RowBytes(p.format, s.kv_dim);
  s.scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  const long long warps = static_cast<long long>(max_rows) * s.H;
  const dim3 grid(static_cast<unsigned>((warps + kWarps - 1) / kWarps), num_segments);
  switch (p.format) {
    case KvFormat::kF32:
      AttentionKernel<KvFormat::kF32><<<grid, kWarps * 32, 0, stream>>>(s, segments);
      break;
    case KvFormat::kBF16:
      AttentionKernel<KvFormat::kBF16><<<grid, kWarps * 32, 0, stream>>>(s, segments);
      break;
    case KvFormat::kFP8E4M3:
      AttentionKernel<KvFormat::kFP8E4M3><<<grid, kWarps * 32, 0, stream>>>(s, segments);
      break;
    case KvFormat::kFP4E2M1:
      AttentionKernel<KvFormat::kFP4E2M1><<<grid, kWarps * 32, 0, stream>>>(s, segments);
      break;
  }
  return cudaGetLastError();
}

}  // namespace ced::kernels
