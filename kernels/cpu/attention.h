// CPU attention over the two K/V sources of DESIGN.md §1.3 in one softmax.
//
// Layouts: queries and outputs are f32 [n, H*D] row-major; global K/V rows
// live in paged blocks (block b holds `block_size` consecutive positions of
// one layer, rows of G*D values in `format`); the local window is a ring of W
// rows per layer (position p at slot p % W) for positions before the segment,
// plus f32 rows [n, G*D] for the segment's own positions.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/kv_codec.h"

namespace ced::kernels {

struct AttentionSegment {
  const float* q = nullptr;  // [n, H*D] rotated queries, positions q_begin .. q_begin+n-1
  float* out = nullptr;      // [n, H*D]
  int n = 0;
  int q_begin = 0;
  // Global K/V of the layer's source, positions 0 .. q_begin+n-1:
  // global_k_host[b] points at the first K row of block b (rows contiguous).
  const uint8_t* const* global_k_host = nullptr;
  const uint8_t* const* global_v_host = nullptr;
  // Local window (W > 0): ring for positions < q_begin, f32 rows for the
  // segment's own positions (already rounded through the cache format).
  const uint8_t* local_k_ring = nullptr;
  const uint8_t* local_v_ring = nullptr;
  const float* chunk_local_k = nullptr;
  const float* chunk_local_v = nullptr;
  int lo = 0;  // first position the local window may read
};

struct AttentionParams {
  KvFormat format = KvFormat::kF32;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int window = 0;      // W; 0 = no local branch
  int block_size = 0;  // tokens per global block
  // false: the layer has no global branch (global_kv_source = -1, W > 0):
  // the softmax runs over the local keys only and the segments' global block
  // tables are not read (may be null).
  bool global = true;
};

// Computes every segment's output. Uses all OpenMP threads; segments must not
// share output rows. Long segments use BLAS for the score and value products.
void AttentionCpu(const AttentionParams& params, const std::vector<AttentionSegment>& segments);

}  // namespace ced::kernels
