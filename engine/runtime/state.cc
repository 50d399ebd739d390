// Export and import of a sequence's transferable state (DESIGN.md §1.4-1.5).
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/engine_internal.h"

namespace ced {

size_t Engine::GlobalRangeBytes(const ModelConfig& c, int begin, int end) {
  return static_cast<size_t>(std::max(0, end - begin)) * c.NumGlobalSourceLayers() * 2 *
         kernels::KvRowBytes(c.kv_cache_dtype, c.KvDim());
}

absl::StatusOr<std::vector<ByteRegion>> Engine::GlobalRegions(SeqId id, int begin,
                                                              int end) const {
  std::shared_lock<std::shared_mutex> lock(seq_mu_);
  ASSIGN_OR_RETURN(const Sequence* seq, Find(id));
  if (begin < 0 || end <= begin || end > seq->capacity) {
    return absl::InvalidArgumentError(absl::StrCat("token range [", begin, ", ", end,
                                                   ") is outside the sequence's ",
                                                   seq->capacity, " reserved positions"));
  }
  const int bs = cache_->options().block_size;
  const int slots = config_.NumGlobalSourceLayers();
  const size_t row = cache_->row_bytes();
  std::vector<ByteRegion> out;
  for (int b = begin / bs; b * bs < end; ++b) {
    const int t0 = std::max(begin, b * bs), t1 = std::min(end, (b + 1) * bs);
    for (int slot = 0; slot < slots; ++slot) {
      for (int kv = 0; kv < 2; ++kv) {
        ByteRegion r{cache_->GlobalRow(seq->blocks[b], slot, kv, t0 - b * bs),
                     static_cast<size_t>(t1 - t0) * row};
        if (!out.empty() && out.back().data + out.back().size == r.data) {
          out.back().size += r.size;
        } else {
          out.push_back(r);
        }
      }
    }
  }
  return out;
}

absl::StatusOr<SequenceTail> Engine::ExportTail(SeqId id, int32_t first_token) const {
  ASSIGN_OR_RETURN(const Sequence* seq, Find(id));
  if (!seq->prefilled) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", id, " is not prefilled"));
  }
  const ModelConfig& c = config_;
  SequenceTail tail;
  tail.desc.format = c.kv_cache_dtype;
  tail.desc.replay_done = seq->replay_done;
  tail.desc.num_tokens = seq->num_tokens;
  tail.desc.replay_start = seq->replay_start;
  tail.desc.first_token = seq->replay_done ? first_token : -1;
  const size_t row = cache_->row_bytes();
  auto copy_ring = [&](int l0, int l1, int p0, std::vector<uint8_t>* out) {
    for (int l = l0; l < l1; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        for (int p = p0; p < seq->num_tokens; ++p) {
          const size_t off = out->size();
          out->resize(off + row);
          backend_->CopyToHost(out->data() + off, cache_->LocalRow(seq->local_slot, l, kv, p),
                               row);
        }
      }
    }
  };
  if (c.sliding_window > 0) {
    copy_ring(0, c.num_encoder_layers, EncLocalBegin(c, tail.desc), &tail.enc_local);
    if (seq->replay_done && !c.IsDecoderOnly()) {
      copy_ring(c.num_encoder_layers, c.num_layers, DecLocalBegin(c, tail.desc), &tail.dec_local);
    }
  }
  if (!seq->replay_done) tail.h_e = seq->h_e;
  return tail;
}

absl::Status Engine::ImportTail(SeqId id, const SequenceTail& tail) {
  ASSIGN_OR_RETURN(Sequence * seq, Find(id));
  const ModelConfig& c = config_;
  const TailDescriptor& d = tail.desc;
  if (seq->prefilled) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", id, " is already prefilled"));
  }
  if (d.format != c.kv_cache_dtype) {
    return absl::InvalidArgumentError("tail format does not match the cache format");
  }
  if (d.num_tokens <= 0 || d.num_tokens > seq->capacity || d.replay_start < 0 ||
      d.replay_start >= d.num_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("tail num_tokens ", d.num_tokens,
                                                   " / replay_start ", d.replay_start,
                                                   " do not fit the reservation of ",
                                                   seq->capacity));
  }
  if (c.IsDecoderOnly() && !d.replay_done) {
    return absl::InvalidArgumentError("a decoder-only tail must be complete (replay_done)");
  }
  if (tail.enc_local.size() != EncLocalBytes(c, d) ||
      tail.dec_local.size() != DecLocalBytes(c, d) ||
      tail.h_e.size() * sizeof(float) != HeBytes(c, d)) {
    return absl::InvalidArgumentError("tail sections have the wrong sizes");
  }
  const size_t row = cache_->row_bytes();
  auto fill_ring = [&](int l0, int l1, int p0, const std::vector<uint8_t>& in) {
    size_t off = 0;
    for (int l = l0; l < l1; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        for (int p = p0; p < d.num_tokens; ++p) {
          backend_->CopyToDevice(cache_->LocalRow(seq->local_slot, l, kv, p), in.data() + off,
                                 row);
          off += row;
        }
      }
    }
  };
  if (c.sliding_window > 0) {
    fill_ring(0, c.num_encoder_layers, EncLocalBegin(c, d), tail.enc_local);
    if (d.replay_done && !c.IsDecoderOnly()) {
      fill_ring(c.num_encoder_layers, c.num_layers, DecLocalBegin(c, d), tail.dec_local);
    }
  }
  seq->num_tokens = d.num_tokens;
  seq->replay_start = d.replay_start;
  seq->replay_done = d.replay_done;
  seq->prefilled = true;
  // The encoder's windows are the prefill's own computation of [N - W, N):
  // decode steps extend them, and a held sequence can be continued from them.
  seq->own_rings = c.sliding_window > 0;
  seq->continues_rings = false;
  seq->h_e = tail.h_e;
  return absl::OkStatus();
}

}  // namespace ced
