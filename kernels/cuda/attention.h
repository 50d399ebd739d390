// CUDA attention over the two K/V sources of DESIGN.md §1.3 in one softmax,
// for prefill chunks (many queries per segment, causal) and batched decode
// (one query per segment), GQA, dequantizing the cache format in the kernel.
//
// Layouts are those of kernels/cpu/attention.h; every pointer here is device
// memory, including the block tables. One warp computes one (query row,
// query head) with an online softmax over the global keys [0, t] (none when
// params.global is false) and then the local keys [max(lo, t-W+1), t];
// head_dim must be <= 256.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cpu/attention.h"

namespace ced::kernels {

struct AttentionSegmentCuda {
  const float* q = nullptr;  // [n, H*D], positions q_begin .. q_begin+n-1
  float* out = nullptr;      // [n, H*D]
  int n = 0;
  int q_begin = 0;
  // Device arrays of device pointers: block b's first K (V) row.
  const uint8_t* const* global_k = nullptr;
  const uint8_t* const* global_v = nullptr;
  const uint8_t* local_k_ring = nullptr;  // W rows in the cache format (W > 0)
  const uint8_t* local_v_ring = nullptr;
  const float* chunk_local_k = nullptr;  // [n, G*D] f32, already rounded
  const float* chunk_local_v = nullptr;
  int lo = 0;
};

constexpr int kCudaAttentionMaxHeadDim = 256;

// Computes every segment of `segments` (a DEVICE array of num_segments);
// max_rows is the largest segment n. Returns cudaErrorInvalidValue for an
// unsupported shape (head_dim > 256, H not a multiple of G).
cudaError_t AttentionCuda(const AttentionParams& params, const AttentionSegmentCuda* segments,
                          int num_segments, int max_rows, cudaStream_t stream);

}  // namespace ced::kernels
