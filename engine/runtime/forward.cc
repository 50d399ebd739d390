// The layer loop shared by prefill chunks, replay and decode steps.
#include <algorithm>
#include <cstring>

#include "engine/runtime/engine.h"
#include "engine/runtime/engine_internal.h"

namespace ced {

void Engine::StoreGlobal(Batch& batch, int slot, const float* k, const float* v) {
  const int bs = cache_->options().block_size;
  const int kv_dim = config_.KvDim();
  std::vector<uint8_t*> k_rows(batch.rows), v_rows(batch.rows);
  for (const auto& seg : batch.segments) {
    for (int i = 0; i < seg.n; ++i) {
      const int p = seg.begin + i;
      const int block = seg.seq->blocks[p / bs];
      k_rows[seg.row0 + i] = cache_->GlobalRow(block, slot, 0, p % bs);
      v_rows[seg.row0 + i] = cache_->GlobalRow(block, slot, 1, p % bs);
    }
  }
  backend_->StoreRows(config_.kv_cache_dtype, k, batch.rows, kv_dim, kv_dim, k_rows.data());
  backend_->StoreRows(config_.kv_cache_dtype, v, batch.rows, kv_dim, kv_dim, v_rows.data());
}

void Engine::ProjectDecoderGlobal(Batch& batch, const float* h_e) {
  const ModelConfig& c = config_;
  const int T = batch.rows, d = c.hidden_size, kv = c.KvDim();
  DeviceBuffer hn(backend_.get(), static_cast<size_t>(T) * d);
  DeviceBuffer gk(backend_.get(), static_cast<size_t>(T) * kv);
  DeviceBuffer gv(backend_.get(), static_cast<size_t>(T) * kv);
  backend_->RmsNorm(h_e, T, d, dw_->encoder_norm, static_cast<float>(c.rms_norm_eps), hn.get());
  for (int l = c.num_encoder_layers; l < c.num_layers; ++l) {
    if (!c.IsGlobalSource(l)) continue;
    const auto& lw = dw_->layers[l];
    backend_->Gemm(hn.get(), T, d, lw.global_k, kv, gk.get());
    backend_->Gemm(hn.get(), T, d, lw.global_v, kv, gv.get());
    backend_->Rope(gk.get(), T, c.num_kv_heads, c.head_dim, batch.positions.data(), c.rope_theta);
    StoreGlobal(batch, c.GlobalSlot(l), gk.get(), gv.get());
  }
}

void Engine::RunLayers(Batch& batch, int l0, int l1, float* x) {
  const ModelConfig& c = config_;
  Backend* be = backend_.get();
  const int T = batch.rows, d = c.hidden_size, qd = c.QDim(), kv = c.KvDim(),
            F = c.intermediate_size, W = c.sliding_window, bs = cache_->options().block_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const size_t rows = static_cast<size_t>(T);
  DeviceBuffer a(be, rows * d), q(be, rows * qd), attn(be, rows * qd), tmp(be, rows * d);
  DeviceBuffer gate(be, rows * F), up(be, rows * F);
  DeviceBuffer lk(be, W > 0 ? rows * kv : 1), lv(be, W > 0 ? rows * kv : 1);
  DeviceBuffer lk_rt(be, W > 0 ? rows * kv : 1), lv_rt(be, W > 0 ? rows * kv : 1);
  DeviceBuffer gk(be, rows * kv), gv(be, rows * kv);

  // Per-segment block pointer tables, rebuilt per source slot.
  std::vector<std::vector<const uint8_t*>> kblocks(batch.segments.size()),
      vblocks(batch.segments.size());
  AttentionParams params;
  params.format = c.kv_cache_dtype;
  params.num_heads = c.num_heads;
  params.num_kv_heads = c.num_kv_heads;
  params.head_dim = c.head_dim;
  params.window = W;
  params.block_size = bs;

  for (int l = l0; l < l1; ++l) {
    const auto& lw = dw_->layers[l];
    be->RmsNorm(x, T, d, lw.attn_norm, eps, a.get());
    be->Gemm(a.get(), T, d, lw.wq, qd, q.get());
    be->Rope(q.get(), T, c.num_heads, c.head_dim, batch.positions.data(), c.rope_theta);
    if (W > 0) {
      be->Gemm(a.get(), T, d, lw.local_k, kv, lk.get());
      be->Gemm(a.get(), T, d, lw.local_v, kv, lv.get());
      be->Rope(lk.get(), T, c.num_kv_heads, c.head_dim, batch.positions.data(), c.rope_theta);
      be->Copy(lk_rt.get(), lk.get(), rows * kv * sizeof(float));
      be->Copy(lv_rt.get(), lv.get(), rows * kv * sizeof(float));
      be->RoundTrip(c.kv_cache_dtype, lk_rt.get(), T, kv);
      be->RoundTrip(c.kv_cache_dtype, lv_rt.get(), T, kv);
    }
    if (c.IsEncoderLayer(l) && c.IsGlobalSource(l)) {
      be->Gemm(a.get(), T, d, lw.global_k, kv, gk.get());
      be->Gemm(a.get(), T, d, lw.global_v, kv, gv.get());
      be->Rope(gk.get(), T, c.num_kv_heads, c.head_dim, batch.positions.data(), c.rope_theta);
      StoreGlobal(batch, c.GlobalSlot(l), gk.get(), gv.get());
    }

    const int slot = c.GlobalSlot(c.global_kv_source[l]);
    std::vector<AttentionSegment> segs(batch.segments.size());
    for (size_t si = 0; si < batch.segments.size(); ++si) {
      const auto& seg = batch.segments[si];
      const int nblocks = (seg.begin + seg.n + bs - 1) / bs;
      kblocks[si].resize(nblocks);
      vblocks[si].resize(nblocks);
      for (int b = 0; b < nblocks; ++b) {
        kblocks[si][b] = cache_->GlobalRow(seg.seq->blocks[b], slot, 0, 0);
        vblocks[si][b] = cache_->GlobalRow(seg.seq->blocks[b], slot, 1, 0);
      }
      AttentionSegment& s = segs[si];
      s.q = q.get() + static_cast<size_t>(seg.row0) * qd;
      s.out = attn.get() + static_cast<size_t>(seg.row0) * qd;
      s.n = seg.n;
      s.q_begin = seg.begin;
      s.global_k_host = kblocks[si].data();
      s.global_v_host = vblocks[si].data();
      if (W > 0) {
        s.local_k_ring = cache_->LocalRow(seg.seq->local_slot, l, 0, 0);
        s.local_v_ring = cache_->LocalRow(seg.seq->local_slot, l, 1, 0);
        s.chunk_local_k = lk_rt.get() + static_cast<size_t>(seg.row0) * kv;
        s.chunk_local_v = lv_rt.get() + static_cast<size_t>(seg.row0) * kv;
      }
      s.lo = c.IsEncoderLayer(l) ? 0 : seg.seq->replay_start;
    }
    be->Attention(params, segs);
    be->Gemm(attn.get(), T, qd, lw.wo, d, tmp.get());
    be->Add(x, tmp.get(), rows * d);

    be->RmsNorm(x, T, d, lw.ffn_norm, eps, a.get());
    be->Gemm(a.get(), T, d, lw.w_gate, F, gate.get());
    be->Gemm(a.get(), T, d, lw.w_up, F, up.get());
    be->SiluMul(gate.get(), up.get(), rows * F);
    be->Gemm(gate.get(), T, F, lw.w_down, d, tmp.get());
    be->Add(x, tmp.get(), rows * d);

    if (W > 0) {  // keep the last W positions of each segment in the ring
      std::vector<uint8_t*> k_rows, v_rows;
      std::vector<int> src_rows;
      for (const auto& seg : batch.segments) {
        for (int i = std::max(0, seg.n - W); i < seg.n; ++i) {
          k_rows.push_back(cache_->LocalRow(seg.seq->local_slot, l, 0, seg.begin + i));
          v_rows.push_back(cache_->LocalRow(seg.seq->local_slot, l, 1, seg.begin + i));
          src_rows.push_back(seg.row0 + i);
        }
      }
      // Rows are contiguous per segment; store run by run.
      size_t k = 0;
      while (k < src_rows.size()) {
        size_t e = k + 1;
        while (e < src_rows.size() && src_rows[e] == src_rows[e - 1] + 1) ++e;
        const size_t off = static_cast<size_t>(src_rows[k]) * kv;
        be->StoreRows(c.kv_cache_dtype, lk.get() + off, static_cast<int>(e - k), kv, kv,
                      k_rows.data() + k);
        be->StoreRows(c.kv_cache_dtype, lv.get() + off, static_cast<int>(e - k), kv, kv,
                      v_rows.data() + k);
        k = e;
      }
    }
  }
}

void Engine::Logits(const float* x, int rows, float* out) {
  const ModelConfig& c = config_;
  DeviceBuffer xn(backend_.get(), static_cast<size_t>(rows) * c.hidden_size);
  backend_->RmsNorm(x, rows, c.hidden_size, dw_->final_norm, static_cast<float>(c.rms_norm_eps),
                    xn.get());
  backend_->Gemm(xn.get(), rows, c.hidden_size, dw_->lm_head, c.vocab_size, out);
}

}  // namespace ced
