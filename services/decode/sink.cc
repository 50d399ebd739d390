// The decode worker's KV sink: checks every K/V message against the
// reservation named by its transfer token before a byte lands, and lands
// global K/V straight into the sequence's cache blocks.
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "services/decode/request.h"

namespace ced::services {

using kv_transport::KvMessageHeader;
using kv_transport::KvMessageKind;
using kv_transport::MemSpan;

class DecodeWorker::Sink final : public kv_transport::KvSink {
 public:
  explicit Sink(DecodeWorker* w) : w_(w) {}

  // A prefill peer may connect only to send K/V of a live reservation: it must
  // name one by request id and one-time transfer token.
  absl::Status Admit(const KvMessageHeader& h) override {
    std::lock_guard<std::mutex> lock(w_->mu_);
    auto it = w_->by_token_.find(h.transfer_token);
    if (it == w_->by_token_.end() || it->second->id_hash != h.request_id ||
        it->second->finished || it->second->cancelled) {
      return Reject("connection", absl::PermissionDeniedError(
                                      "kv connection refused: it names no live reservation"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<MemSpan>> Accept(const KvMessageHeader& h) override {
    std::lock_guard<std::mutex> lock(w_->mu_);
    auto it = w_->by_token_.find(h.transfer_token);
    if (it == w_->by_token_.end()) {
      return Reject("unknown_token", absl::PermissionDeniedError("unknown or expired transfer token"));
    }
    Request* r = it->second;
    if (r->id_hash != h.request_id) {
      return Reject("request_mismatch", absl::PermissionDeniedError("request id does not match the transfer token"));
    }
    if (r->finished || r->cancelled) {
      return Reject("inactive", absl::CancelledError(absl::StrCat("request '", r->id, "' is no longer active")));
    }
    if (r->local_prefill || r->kv_landed) {
      return Reject("unexpected", absl::FailedPreconditionError(
          absl::StrCat("request '", r->id, "' does not expect K/V now")));
    }
    if (h.format != w_->engine_->kv_format()) {
      return Reject("format", absl::InvalidArgumentError(
          absl::StrCat("K/V format ", std::string(kernels::KvFormatName(h.format)),
                       " does not match the cache format ",
                       std::string(kernels::KvFormatName(w_->engine_->kv_format())))));
    }
    const int n = static_cast<int>(r->prompt.size());
    switch (h.kind) {
      case KvMessageKind::kGlobalRange: {
        const int b = static_cast<int>(h.token_begin), e = static_cast<int>(h.token_end);
        if (h.layer != -1) return Reject("range", absl::InvalidArgumentError("per-layer K/V messages unsupported"));
        if (b == e && b <= n && h.payload_bytes == 0) {
          // A progress notice (no tokens): the prefill worker is computing
          // toward this request's K/V.
          w_->sched_->OnKvProgress(r->id, Clock::now());
          ++r->inflight_messages;
          return std::vector<MemSpan>{};
        }
        if (b >= e || e > n) {
          return Reject("range", absl::InvalidArgumentError(
              absl::StrCat("token range [", b, ", ", e, ") outside the prompt of ", n)));
        }
        if (h.payload_bytes != Engine::GlobalRangeBytes(w_->engine_->config(), b, e)) {
          return Reject("length", absl::InvalidArgumentError(absl::StrCat(
              "payload of ", h.payload_bytes, " bytes for tokens [", b, ", ", e, "), expected ",
              Engine::GlobalRangeBytes(w_->engine_->config(), b, e))));
        }
        for (int t = b; t < e; ++t) {
          if (r->received[t]) {
            return Reject("duplicate", absl::AlreadyExistsError(absl::StrCat("K/V for token ", t, " already landed")));
          }
        }
        ASSIGN_OR_RETURN(auto regions, w_->engine_->GlobalRegions(r->seq, b, e));
        std::vector<MemSpan> spans;
        for (const ByteRegion& reg : regions) spans.push_back({reg.data, reg.size});
        ++r->inflight_messages;
        w_->sched_->OnKvProgress(r->id, Clock::now());
        return spans;
      }
      case KvMessageKind::kTail: {
        if (r->tail_received || !r->tail_bytes.empty()) {
          return Reject("duplicate", absl::AlreadyExistsError("tail already received"));
        }
        if (r->received_tokens != n) {
          return Reject("unexpected", absl::FailedPreconditionError("tail before all global K/V landed"));
        }
        // The largest tail this prompt can have: both local windows and h_E.
        TailDescriptor d;
        d.format = w_->engine_->kv_format();
        d.num_tokens = n;
        d.replay_done = true;
        size_t max_bytes = 32 + EncLocalBytes(w_->engine_->config(), d) +
                           DecLocalBytes(w_->engine_->config(), d);
        d.replay_done = false;
        max_bytes += HeBytes(w_->engine_->config(), d);
        if (h.payload_bytes > max_bytes || h.payload_bytes < 32) {
          return Reject("length", absl::InvalidArgumentError(
              absl::StrCat("tail of ", h.payload_bytes, " bytes is implausible")));
        }
        r->tail_bytes.resize(h.payload_bytes);
        ++r->inflight_messages;
        w_->sched_->OnKvProgress(r->id, Clock::now());
        return std::vector<MemSpan>{{r->tail_bytes.data(), r->tail_bytes.size()}};
      }
      case KvMessageKind::kAbort:
        w_->sched_->FailTransfer(
            r->id, absl::StrCat("prefill worker ", r->prefill_worker_id, " aborted the transfer"));
        w_->cv_.notify_all();
        return absl::CancelledError("transfer aborted");
    }
    return Reject("kind", absl::InvalidArgumentError("unknown message kind"));
  }

  // Counts a refused message by reason; nothing of it has landed.
  absl::Status Reject(const char* reason, absl::Status status) {
    w_->m_->kv_rejected->WithLabelValues({reason}).Increment();
    return status;
  }

  void Complete(const KvMessageHeader& h, absl::Status status) override {
    std::lock_guard<std::mutex> lock(w_->mu_);
    auto it = w_->by_token_.find(h.transfer_token);
    if (it == w_->by_token_.end()) return;
    Request* r = it->second;
    --r->inflight_messages;
    if (!status.ok()) {
      // UNAVAILABLE: the connection broke mid-message, i.e. the sender left.
      w_->sched_->FailTransfer(
          r->id, absl::IsUnavailable(status)
                     ? absl::StrCat("prefill worker ", r->prefill_worker_id,
                                    " gone: K/V transfer failed: ", status.message())
                     : absl::StrCat("K/V transfer failed: ", status.message()));
      r->tail_bytes.clear();
      w_->cv_.notify_all();
      return;
    }
    const auto now = Clock::now();
    w_->sched_->OnKvProgress(r->id, now);
    w_->m_->transfer_bytes->Increment(static_cast<double>(h.payload_bytes));
    if (h.kind == KvMessageKind::kGlobalRange) {
      for (uint32_t t = h.token_begin; t < h.token_end; ++t) r->received[t] = 1;
      r->received_tokens += static_cast<int>(h.token_end - h.token_begin);
    } else if (h.kind == KvMessageKind::kTail) {
      r->tail_received = true;
    }
    if (r->tail_received && r->received_tokens == static_cast<int>(r->prompt.size()) &&
        !r->kv_landed) {
      r->kv_landed = true;
      r->t_ready = now;
      // Its start work: the replay, in case the prefill worker did not run it.
      w_->sched_->OnKvLanded(r->id, now, r->replay_work_tokens);
      w_->m_->transfer_seconds->Observe(
          std::chrono::duration<double>(r->t_ready - r->t_reserve).count());
      w_->cv_.notify_all();
    }
  }

 private:
  DecodeWorker* w_;
};

std::unique_ptr<kv_transport::KvSink> MakeDecodeSink(DecodeWorker* worker) {
  return std::make_unique<DecodeWorker::Sink>(worker);
}

}  // namespace ced::services
