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
  bool skips = false;
  for (const auto& seg : batch.segments) {
    skips |= seg.begin < seg.seq->write_from;
    for (int i = 0; i < seg.n; ++i) {
      const int p = seg.begin + i;
      const int block = seg.seq->blocks[p / bs];
      k_rows[seg.row0 + i] = cache_->GlobalRow(block, slot, 0, p % bs);
      v_rows[seg.row0 + i] = cache_->GlobalRow(block, slot, 1, p % bs);
    }
  }
  if (!skips) {
    backend_->StoreRows(config_.kv_cache_dtype, k, batch.rows, kv_dim, kv_dim, k_rows.data());
    backend_->StoreRows(config_.kv_cache_dtype, v, batch.rows, kv_dim, kv_dim, v_rows.data());
    return;
  }
  // Positions below a segment's write_from hold cached (shared) K/V: they
  // stand as they are.
  for (const auto& seg : batch.segments) {
    const int i0 = std::min(seg.n, std::max(0, seg.seq->write_from - seg.begin));
    const int rows = seg.n - i0;
    if (rows == 0) continue;
    const size_t off = static_cast<size_t>(seg.row0 + i0) * kv_dim;
    backend_->StoreRows(config_.kv_cache_dtype, k + off, rows, kv_dim, kv_dim,
                        k_rows.data() + seg.row0 + i0);
    backend_->StoreRows(config_.kv_cache_dtype, v + off, rows, kv_dim, kv_dim,
                        v_rows.data() + seg.row0 + i0);
  }
}

void Engine::ProjectDecoderGlobal(Batch& batch, const float* h_e) {
  const ModelConfig& c = config_;
  const int T = batch.rows, d = c.hidden_size, kv = c.KvDim();
  // Every decoder source layer's K and V from the same normalized h_E: one
  // multi-output product (the weights side by side), then RoPE and store.
  std::vector<int> layers;
  for (int l = c.num_encoder_layers; l < c.num_layers; ++l) {
    if (c.IsGlobalSource(l)) layers.push_back(l);
  }
  if (layers.empty()) return;
  const size_t plane = static_cast<size_t>(T) * kv;
  DeviceBuffer hn(backend_.get(), static_cast<size_t>(T) * d);
  DeviceBuffer kvs(backend_.get(), 2 * layers.size() * plane);
  backend_->RmsNorm(h_e, T, d, dw_->encoder_norm, static_cast<float>(c.rms_norm_eps), hn.get());
  std::vector<GemmTarget> targets;
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& lw = dw_->layers[layers[i]];
    targets.push_back({lw.global_k, kv, kvs.get() + (2 * i) * plane, false});
    targets.push_back({lw.global_v, kv, kvs.get() + (2 * i + 1) * plane, false});
  }
  backend_->GemmMulti(hn.get(), T, d, targets.data(), static_cast<int>(targets.size()));
  for (size_t i = 0; i < layers.size(); ++i) {
    float* gk = kvs.get() + (2 * i) * plane;
    backend_->Rope(gk, T, c.num_kv_heads, c.head_dim, batch.positions.data(), c.rope_theta);
    StoreGlobal(batch, c.GlobalSlot(layers[i]), gk, gk + plane);
  }
}

void Engine::RunLayers(Batch& batch, int l0, int l1, float* x) {
  const ModelConfig& c = config_;
  Backend* be = backend_.get();
  const int T = batch.rows, d = c.hidden_size, qd = c.QDim(), kv = c.KvDim(),
            F = c.intermediate_size, W = c.sliding_window, bs = cache_->options().block_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const size_t rows = static_cast<size_t>(T);
  // Local K/V rounded through the cache format (what attention reads): f32
  // caches read lk/lv themselves.
  const bool round_trip = W > 0 && c.kv_cache_dtype != KvFormat::kF32;
  DeviceBuffer a(be, rows * d), q(be, rows * qd), attn(be, rows * qd);
  bool dense = false;
  for (int l = l0; l < l1; ++l) dense |= !c.IsMoeLayer(l);
  DeviceBuffer gate(be, dense ? rows * F : 1), up(be, dense ? rows * F : 1);
  DeviceBuffer lk(be, W > 0 ? rows * kv : 1), lv(be, W > 0 ? rows * kv : 1);
  DeviceBuffer lk_rt(be, round_trip ? rows * kv : 1), lv_rt(be, round_trip ? rows * kv : 1);
  DeviceBuffer gk(be, rows * kv), gv(be, rows * kv);
  const float* lk_read = round_trip ? lk_rt.get() : lk.get();
  const float* lv_read = round_trip ? lv_rt.get() : lv.get();

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
    // Every projection of `a` in one op: q, the local K/V, and an encoder
    // source layer's global K/V.
    const bool own_global = c.IsEncoderLayer(l) && c.IsGlobalSource(l);
    GemmTarget proj[5];
    int nproj = 0;
    proj[nproj++] = {lw.wq, qd, q.get(), false};
    if (W > 0) {
      proj[nproj++] = {lw.local_k, kv, lk.get(), false};
      proj[nproj++] = {lw.local_v, kv, lv.get(), false};
    }
    if (own_global) {
      proj[nproj++] = {lw.global_k, kv, gk.get(), false};
      proj[nproj++] = {lw.global_v, kv, gv.get(), false};
    }
    be->GemmMulti(a.get(), T, d, proj, nproj);
    be->Rope(q.get(), T, c.num_heads, c.head_dim, batch.positions.data(), c.rope_theta);
    if (W > 0) {
      be->Rope(lk.get(), T, c.num_kv_heads, c.head_dim, batch.positions.data(), c.rope_theta);
      if (round_trip) {
        be->Copy(lk_rt.get(), lk.get(), rows * kv * sizeof(float));
        be->Copy(lv_rt.get(), lv.get(), rows * kv * sizeof(float));
        be->RoundTrip(c.kv_cache_dtype, lk_rt.get(), T, kv);
        be->RoundTrip(c.kv_cache_dtype, lv_rt.get(), T, kv);
      }
    }
    if (own_global) {
      be->Rope(gk.get(), T, c.num_kv_heads, c.head_dim, batch.positions.data(), c.rope_theta);
      StoreGlobal(batch, c.GlobalSlot(l), gk.get(), gv.get());
    }

    // A window-only layer (source -1) attends its local window alone.
    params.global = c.HasGlobalBranch(l);
    const int slot = params.global ? c.GlobalSlot(c.global_kv_source[l]) : -1;
    std::vector<AttentionSegment> segs(batch.segments.size());
    for (size_t si = 0; si < batch.segments.size(); ++si) {
      const auto& seg = batch.segments[si];
      const int nblocks = params.global ? (seg.begin + seg.n + bs - 1) / bs : 0;
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
        s.chunk_local_k = lk_read + static_cast<size_t>(seg.row0) * kv;
        s.chunk_local_v = lv_read + static_cast<size_t>(seg.row0) * kv;
      }
      s.lo = c.IsEncoderLayer(l) ? seg.seq->encoder_lo : seg.seq->replay_start;
    }
    be->Attention(params, segs);
    const GemmTarget out_proj = {lw.wo, d, x, true};  // x += attn * wo^T
    be->GemmMulti(attn.get(), T, qd, &out_proj, 1);

    be->RmsNorm(x, T, d, lw.ffn_norm, eps, a.get());
    if (c.IsMoeLayer(l)) {
      MoeFfn(l, a.get(), T, x);
    } else {
      const GemmTarget gate_up[2] = {{lw.w_gate, F, gate.get(), false},
                                     {lw.w_up, F, up.get(), false}};
      be->GemmMulti(a.get(), T, d, gate_up, 2);
      be->SiluMul(gate.get(), up.get(), rows * F);
      const GemmTarget down = {lw.w_down, d, x, true};  // x += ffn * w_down^T
      be->GemmMulti(gate.get(), T, F, &down, 1);
    }

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
