#include "kernels/cuda/kv_codec.h"

#include "kernels/cuda/kv_codec_device.cuh"

namespace ced::kernels {
namespace {

namespace cc = cuda_codec;

constexpr int kThreads = 128;

// One thread per value (f32, bf16, fp8) or per group of 16 (fp4);
// blockIdx.y is the row.
template <KvFormat F>
__global__ void EncodeKernel(const float* src, int row_elems, size_t src_stride,
                             uint8_t* const* dst_rows) {
  const int row = blockIdx.y;
  const float* s = src + row * src_stride;
  uint8_t* dst = dst_rows[row];
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if constexpr (F == KvFormat::kFP4E2M1) {
    const int g = j * kFp4GroupSize;
    if (g >= row_elems) return;
    const int len = min(kFp4GroupSize, row_elems - g);
    float vals[kFp4GroupSize];
    for (int i = 0; i < len; ++i) vals[i] = s[g + i];
    cc::EncodeFp4Group(vals, len, dst + g / 2, dst + row_elems / 2 + j);
  } else {
    if (j >= row_elems) return;
    if constexpr (F == KvFormat::kF32) {
      reinterpret_cast<float*>(dst)[j] = cc::EncodeF32(s[j]);
    } else if constexpr (F == KvFormat::kBF16) {
      reinterpret_cast<uint16_t*>(dst)[j] = cc::EncodeBf16(s[j]);
    } else {
      dst[j] = cc::FloatToFp8E4M3(s[j]);
    }
  }
}

template <KvFormat F>
__global__ void DecodeKernel(const uint8_t* const* src_rows, int row_elems, float* dst) {
  const int row = blockIdx.y;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= row_elems) return;
  dst[static_cast<size_t>(row) * row_elems + j] = cc::LoadValue<F>(src_rows[row], row_elems, j);
}

template <KvFormat F>
__global__ void RoundTripKernel(float* x, int row_elems) {
  float* r = x + static_cast<size_t>(blockIdx.y) * row_elems;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if constexpr (F == KvFormat::kFP4E2M1) {
    const int g = j * kFp4GroupSize;
    if (g >= row_elems) return;
    const int len = min(kFp4GroupSize, row_elems - g);
    float vals[kFp4GroupSize];
    for (int i = 0; i < len; ++i) vals[i] = r[g + i];
    uint8_t codes[kFp4GroupSize / 2];
    uint8_t scale_code;
    cc::EncodeFp4Group(vals, len, codes, &scale_code);
    const float scale = cc::Fp8E4M3ToFloat(scale_code);
    for (int i = 0; i < len; ++i) {
      const uint8_t code = (i & 1) ? (codes[i / 2] >> 4) : (codes[i / 2] & 0xf);
      r[g + i] = cc::Fp4E2M1ToFloat(code) * scale;
    }
  } else {
    if (j >= row_elems) return;
    if constexpr (F == KvFormat::kBF16) {
      r[j] = cc::Bf16ToFloat(cc::EncodeBf16(r[j]));
    } else if constexpr (F == KvFormat::kFP8E4M3) {
      r[j] = cc::Fp8E4M3ToFloat(cc::FloatToFp8E4M3(r[j]));
    }
  }
}

dim3 Grid(KvFormat f, int n, int row_elems) {
  const int units = f == KvFormat::kFP4E2M1 ? (row_elems + kFp4GroupSize - 1) / kFp4GroupSize
                                            : row_elems;
  return dim3((units + kThreads - 1) / kThreads, n);
}

}  // namespace

cudaError_t EncodeRowsCuda(KvFormat format, const float* src, int n, int row_elems,
                           size_t src_stride, uint8_t* const* dst_rows, cudaStream_t stream) {
  if (n <= 0 || row_elems <= 0) return cudaSuccess;
  const dim3 grid = Grid(format, n, row_elems);
  switch (format) {
    case KvFormat::kF32:
      EncodeKernel<KvFormat::kF32><<<grid, kThreads, 0, stream>>>(src, row_elems, src_stride, dst_rows);
      break;
    case KvFormat::kBF16:
      EncodeKernel<KvFormat::kBF16><<<grid, kThreads, 0, stream>>>(src, row_elems, src_stride, dst_rows);
      break;
    case KvFormat::kFP8E4M3:
      EncodeKernel<KvFormat::kFP8E4M3><<<grid, kThreads, 0, stream>>>(src, row_elems, src_stride, dst_rows);
      break;
    case KvFormat::kFP4E2M1:
      EncodeKernel<KvFormat::kFP4E2M1><<<grid, kThreads, 0, stream>>>(src, row_elems, src_stride, dst_rows);
      break;
  }
  return cudaGetLastError();
}

cudaError_t DecodeRowsCuda(KvFormat format, const uint8_t* const* src_rows, int n, int row_elems,
                           float* dst, cudaStream_t stream) {
  if (n <= 0 || row_elems <= 0) return cudaSuccess;
  const dim3 grid((row_elems + kThreads - 1) / kThreads, n);
  switch (format) {
    case KvFormat::kF32:
      DecodeKernel<KvFormat::kF32><<<grid, kThreads, 0, stream>>>(src_rows, row_elems, dst);
      break;
    case KvFormat::kBF16:
      DecodeKernel<KvFormat::kBF16><<<grid, kThreads, 0, stream>>>(src_rows, row_elems, dst);
      break;
    case KvFormat::kFP8E4M3:
      DecodeKernel<KvFormat::kFP8E4M3><<<grid, kThreads, 0, stream>>>(src_rows, row_elems, dst);
      break;
    case KvFormat::kFP4E2M1:
      DecodeKernel<KvFormat::kFP4E2M1><<<grid, kThreads, 0, stream>>>(src_rows, row_elems, dst);
      break;
  }
  return cudaGetLastError();
}

cudaError_t RoundTripCuda(KvFormat format, float* x, int n, int row_elems, cudaStream_t stream) {
  if (n <= 0 || row_elems <= 0 || format == KvFormat::kF32) return cudaSuccess;
  const dim3 grid = Grid(format, n, row_elems);
  switch (format) {
    case KvFormat::kF32:
      break;
    case KvFormat::kBF16:
      RoundTripKernel<KvFormat::kBF16><<<grid, kThreads, 0, stream>>>(x, row_elems);
      break;
    case KvFormat::kFP8E4M3:
      RoundTripKernel<KvFormat::kFP8E4M3><<<grid, kThreads, 0, stream>>>(x, row_elems);
      break;
    case KvFormat::kFP4E2M1:
      RoundTripKernel<KvFormat::kFP4E2M1><<<grid, kThreads, 0, stream>>>(x, row_elems);
      break;
  }
  return cudaGetLastError();
}

}  // namespace ced::kernels
