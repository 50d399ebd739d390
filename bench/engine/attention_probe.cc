#include "bench/engine/attention_probe.h"

#include <algorithm>

#include "engine/accounting/accounting.h"

namespace ced::bench {

AttentionProbe::AttentionProbe(const ModelConfig& c, kernels::KvFormat format, int block_size,
                               int rows, int context) {
  const size_t kv_dim = static_cast<size_t>(c.num_kv_heads) * c.head_dim;
  const size_t row_bytes = kernels::KvRowBytes(format, kv_dim);
  const int total = context + rows;
  const int blocks = (total + block_size - 1) / block_size;
  const size_t half = static_cast<size_t>(block_size) * row_bytes;  // K or V of a block
  pool_.resize(2 * half * blocks);
  // Every K and V row the same small values, encoded in the cache's format.
  std::vector<float> row(kv_dim);
  for (size_t d = 0; d < kv_dim; ++d) row[d] = 0.01f * static_cast<float>(d % 13) - 0.06f;
  for (size_t r = 0; r < pool_.size() / row_bytes; ++r) {
    kernels::EncodeRow(format, row.data(), kv_dim, pool_.data() + r * row_bytes);
  }
  for (int b = 0; b < blocks; ++b) {
    k_blocks_.push_back(pool_.data() + 2 * half * b);
    v_blocks_.push_back(pool_.data() + 2 * half * b + half);
  }
  const int window = std::max(c.sliding_window, 1);
  k_ring_.assign(window * row_bytes, 0);
  v_ring_.assign(window * row_bytes, 0);
  chunk_k_.assign(rows * kv_dim, 0.02f);
  chunk_v_.assign(rows * kv_dim, 0.03f);
  const size_t q_dim = static_cast<size_t>(c.num_heads) * c.head_dim;
  q_.assign(rows * q_dim, 0.01f);
  out_.assign(rows * q_dim, 0.0f);
  params_.format = format;
  params_.num_heads = c.num_heads;
  params_.num_kv_heads = c.num_kv_heads;
  params_.head_dim = c.head_dim;
  params_.window = c.sliding_window;
  params_.block_size = block_size;
  segment_.q = q_.data();
  segment_.out = out_.data();
  segment_.n = rows;
  segment_.q_begin = context;
  segment_.global_k_host = k_blocks_.data();
  segment_.global_v_host = v_blocks_.data();
  segment_.local_k_ring = k_ring_.data();
  segment_.local_v_ring = v_ring_.data();
  segment_.chunk_local_k = chunk_k_.data();
  segment_.chunk_local_v = chunk_v_.data();
  flops_ = AttentionFlopsForPositions(c, context, total, 1);
}

void AttentionProbe::Run() { kernels::AttentionCpu(params_, {segment_}); }

}  // namespace ced::bench
