#include "kernels/cuda/elementwise.h"

#include <cuda_bf16.h>

namespace ced::kernels {
namespace {

constexpr int kThreads = 256;

unsigned GridFor(size_t count) {
  size_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 32 ? (blocks == 0 ? 1 : blocks) : 65535 * 32);
}

__global__ void EmbedKernel(const int32_t* tokens, int n, const float* table, int d,
                            float* out) {
  const int row = blockIdx.y;
  const float* src = table + static_cast<size_t>(tokens[row]) * d;
  float* dst = out + static_cast<size_t>(row) * d;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < d; j += gridDim.x * blockDim.x) {
    dst[j] = src[j];
  }
}

// Block-wide sum of one double per thread (blockDim.x == kThreads).
__device__ double BlockSum(double v) {
  __shared__ double warp_sums[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
  __syncthreads();
  return total;
}

// One block per row; y == nullptr skips the residual add.
__global__ void RmsNormKernel(float* x_mut, const float* x, const float* y, int d,
                              const float* w, float eps, float* out) {
  const size_t base = static_cast<size_t>(blockIdx.x) * d;
  double ss = 0.0;
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    float v = x[base + j];
    if (y != nullptr) {
      v += y[base + j];
      x_mut[base + j] = v;
    }
    ss += static_cast<double>(v) * v;
  }
  ss = BlockSum(ss);
  const float inv = static_cast<float>(1.0 / sqrt(ss / d + eps));
  for (int j = threadIdx.x; j < d; j += blockDim.x) {
    out[base + j] = x[base + j] * inv * w[j];
  }
}

// One block per row; threads over (head, i) pairs of the half dimension.
__global__ void RopeKernel(float* x, int heads, int head_dim, const int32_t* positions,
                           double theta) {
  const int half = head_dim / 2;
  const int row = blockIdx.x;
  const double pos = positions[row];
  for (int k = threadIdx.x; k < heads * half; k += blockDim.x) {
    const int h = k / half, i = k % half;
    const double inv_freq = pow(theta, -2.0 * i / head_dim);
    const double angle = pos * inv_freq;
    const float cs = static_cast<float>(cos(angle)), sn = static_cast<float>(sin(angle));
    float* v = x + (static_cast<size_t>(row) * heads + h) * head_dim;
    const float a = v[i], b = v[i + half];
    v[i] = a * cs - b * sn;
    v[i + half] = b * cs + a * sn;
  }
}

__global__ void SiluMulKernel(float* gate, const float* up, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    gate[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void AddKernel(float* x, const float* y, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    x[i] += y[i];
  }
}

// One block row per x row; threads over d.
__global__ void MoeCombineKernel(float* x, int d, int k, const float* y, const int32_t* rows,
                                 const float* weights) {
  const size_t i = blockIdx.y;
  float* dst = x + i * d;
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < d; c += gridDim.x * blockDim.x) {
    float acc = dst[c];
    for (int j = 0; j < k; ++j) {
      acc += weights[i * k + j] * y[static_cast<size_t>(rows[i * k + j]) * d + c];
    }
    dst[c] = acc;
  }
}

__global__ void F32ToBf16Kernel(const float* src, uint16_t* dst, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(src[i]));
  }
}

}  // namespace

cudaError_t EmbedCuda(const int32_t* tokens, int n, const float* table, int d, float* out,
                      cudaStream_t stream) {
  if (n <= 0 || d <= 0) return cudaSuccess;
  const dim3 grid((d + kThreads - 1) / kThreads, n);
  EmbedKernel<<<grid, kThreads, 0, stream>>>(tokens, n, table, d, out);
  return cudaGetLastError();
}

cudaError_t RmsNormCuda(const float* x, int n, int d, const float* w, float eps, float* out,
                        cudaStream_t stream) {
  if (n <= 0 || d <= 0) return cudaSuccess;
  RmsNormKernel<<<n, kThreads, 0, stream>>>(nullptr, x, nullptr, d, w, eps, out);
  return cudaGetLastError();
}

cudaError_t AddRmsNormCuda(float* x, const float* y, int n, int d, const float* w, float eps,
                           float* out, cudaStream_t stream) {
  if (n <= 0 || d <= 0) return cudaSuccess;
  RmsNormKernel<<<n, kThreads, 0, stream>>>(x, x, y, d, w, eps, out);
  return cudaGetLastError();
}

cudaError_t RopeCuda(float* x, int n, int heads, int head_dim, const int32_t* positions,
                     double theta, cudaStream_t stream) {
  if (n <= 0 || heads <= 0 || head_dim < 2) return cudaSuccess;
  RopeKernel<<<n, 128, 0, stream>>>(x, heads, head_dim, positions, theta);
  return cudaGetLastError();
}

cudaError_t SiluMulCuda(float* gate, const float* up, size_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  SiluMulKernel<<<GridFor(count), kThreads, 0, stream>>>(gate, up, count);
  return cudaGetLastError();
}

cudaError_t AddCuda(float* x, const float* y, size_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  AddKernel<<<GridFor(count), kThreads, 0, stream>>>(x, y, count);
  return cudaGetLastError();
}

cudaError_t MoeCombineCuda(float* x, int n, int d, int k, const float* y, const int32_t* rows,
                           const float* weights, cudaStream_t stream) {
  if (n <= 0 || d <= 0 || k <= 0) return cudaSuccess;
  constexpr int kMaxGridRows = 65535;
  for (int r0 = 0; r0 < n; r0 += kMaxGridRows) {
    const int rn = n - r0 < kMaxGridRows ? n - r0 : kMaxGridRows;
    const size_t off = static_cast<size_t>(r0) * k;
    const dim3 grid((d + kThreads - 1) / kThreads, rn);
    MoeCombineKernel<<<grid, kThreads, 0, stream>>>(x + static_cast<size_t>(r0) * d, d, k, y,
                                                     rows + off, weights + off);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

cudaError_t F32ToBf16Cuda(const float* src, uint16_t* dst, size_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  F32ToBf16Kernel<<<GridFor(count), kThreads, 0, stream>>>(src, dst, count);
  return cudaGetLastError();
}

}  // namespace ced::kernels
