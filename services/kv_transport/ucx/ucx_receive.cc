// UcxTransport: the receiving side (data messages, acknowledgements). Progress
// thread only.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "services/kv_transport/checksum.h"
#include "services/kv_transport/payload.h"
#include "services/kv_transport/ucx/ucx_ops.h"
#include "services/kv_transport/ucx/ucx_transport.h"

namespace ced::kv_transport::ucx {
namespace {

// Payloads up to this size are verified on the progress thread (a few
// microseconds) unless larger ones are queued ahead of them; larger ones go to
// the verifier thread.
constexpr uint64_t kInlineVerifyBytes = 64 << 10;

// An acknowledgement kept alive until UCX has sent it.
struct AckMessage {
  uint8_t header[kAckHeaderBytes];
  std::string message;
};

}  // namespace

ucs_status_t UcxTransport::OnData(const void* header, size_t header_length, void* data,
                                  size_t length, const ucp_am_recv_param_t* param) {
  // Anything that does not fit the envelope is dropped unanswered (returning OK
  // releases UCX's data or rendezvous descriptor).
  if (sink_ == nullptr || shutting_down_ || header_length != kEnvelopeBytes) return UCS_OK;
  const auto* bytes = static_cast<const uint8_t*>(header);
  AckHeader ack;
  ack.send_id = GetU64(bytes + kKvHeaderBytes);
  ack.conn_id = GetU64(bytes + kKvHeaderBytes + 8);
  ack.conn_secret = GetU64(bytes + kKvHeaderBytes + 16);
  // Data is only taken on connections this transport's listener granted, named
  // by id and secret.
  const auto conn = accepted_.find(ack.conn_id);
  if (conn == accepted_.end() || conn->second->failed ||
      conn->second->grant.secret != ack.conn_secret) {
    // Tell the sender to reconnect (on the endpoint the message came in on,
    // which is valid during this callback); strangers get nothing.
    if (ack.conn_id != 0 && ack.conn_id < next_conn_id_ &&
        (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
      ack.flags = kAckConnectionClosed;
      SendAckNow(param->reply_ep, ack,
                 absl::UnavailableError(
                     absl::StrCat("kv connection ", ack.conn_id, " is closed on the receiver")));
    }
    return UCS_OK;
  }
  const ucp_ep_h reply_ep = conn->second->ep;
  const uint64_t send_id = ack.send_id;
  Describe(conn->second);
  absl::StatusOr<KvMessageHeader> h =
      DecodeHeader(absl::MakeConstSpan(bytes, kKvHeaderBytes), options_.max_payload_bytes);
  if (!h.ok()) {
    SendAck(reply_ep, ack, h.status());
    return UCS_OK;
  }
  if (length != h->payload_bytes) {
    SendAck(reply_ep, ack,
            absl::InvalidArgumentError(absl::StrCat("kv message carries ", length,
                                                    " payload bytes, header field "
                                                    "'payload_bytes' says ",
                                                    h->payload_bytes)));
    return UCS_OK;
  }
  absl::StatusOr<std::vector<MemSpan>> spans = sink_->Accept(*h);
  if (!spans.ok()) {
    SendAck(reply_ep, ack, spans.status());
    return UCS_OK;
  }
  auto op = std::make_unique<RecvOp>();
  op->self = this;
  op->header = *h;
  op->send_id = send_id;
  op->conn_id = ack.conn_id;
  op->spans = *std::move(spans);
  RecvOp* raw = op.get();
  recvs_[raw] = std::move(op);
  if (const absl::Status fit = CheckSinkSpans(raw->spans, raw->header.payload_bytes); !fit.ok()) {
    sink_->Complete(raw->header, fit);
    SendAck(reply_ep, ack, fit);
    recvs_.erase(raw);
    return UCS_OK;
  }
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0) {
    // Eager: the payload is here; copy it into the spans, checksumming on the way.
    raw->fused = true;
    (void)FusedUnpack(raw, 0, data, length);
    FinishRecv(raw, UCS_OK);
    return UCS_OK;
  }
  raw->fused = FusedReceive(conn->second);
  ucp_request_param_t rp{};
  rp.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  rp.cb.recv_am = &RecvCb;
  rp.user_data = raw;
  void* buffer = nullptr;
  size_t count = 0;
  if (raw->fused) {
    // Each fragment goes through FusedUnpack: copied into the spans and
    // checksummed in one pass.
    rp.datatype = fused_dt_;
    buffer = raw;
    count = raw->header.payload_bytes;
  } else {
    // Rendezvous on RMA lanes: UCX lands the payload directly in the sink's spans.
    for (const MemSpan& s : raw->spans) {
      if (s.size > 0) raw->iov.push_back({s.data, s.size});
    }
    buffer = raw->iov.empty() ? nullptr : raw->iov[0].buffer;
    count = raw->iov.empty() ? 0 : raw->iov[0].length;
    rp.datatype = ucp_dt_make_contig(1);
    if (raw->iov.size() > 1) {
      rp.datatype = ucp_dt_make_iov();
      buffer = raw->iov.data();
      count = raw->iov.size();
    }
  }
  ucs_status_ptr_t request = ucp_am_recv_data_nbx(worker_, data, buffer, count, &rp);
  if (request == nullptr) {
    FinishRecv(raw, UCS_OK);
  } else if (UCS_PTR_IS_ERR(request)) {
    FinishRecv(raw, UCS_PTR_STATUS(request));
  }
  return UCS_INPROGRESS;  // UCX owns the descriptor once ucp_am_recv_data_nbx was called
}

void UcxTransport::FinishRecv(RecvOp* op, ucs_status_t ucx_status) {
  auto it = recvs_.find(op);
  if (it == recvs_.end() || it->second->abandoned) return;
  if (ucx_status != UCS_OK) {
    ConcludeRecv(
        op, UcsError(shutting_down_ ? absl::StatusCode::kCancelled : absl::StatusCode::kUnavailable,
                     absl::StrCat("kv payload of request ", op->header.request_id), ucx_status));
    return;
  }
  if (op->fused) {
    // Checksummed while landing; the verdict waits for nothing queued ahead.
    absl::StatusOr<uint32_t> checksum = FusedChecksum(op);
    if (!checksum.ok()) {
      ConcludeRecv(op, checksum.status());
    } else if (verifying_ > 0) {
      op->landed_crc = *checksum;
      QueueVerify(op);  // the verifier passes it through in order (no second read)
    } else {
      OnVerified(op, *checksum);
    }
    return;
  }
  // Inline only when nothing is queued ahead: verdicts keep the arrival order.
  if (verifier_.joinable() && (op->header.payload_bytes > kInlineVerifyBytes || verifying_ > 0)) {
    QueueVerify(op);
    return;
  }
  OnVerified(op, ChecksumSpans(op->spans));
}

bool UcxTransport::FusedReceive(EpContext* ctx) {
  if (options_.fused_receive >= 0 || ctx->ep == nullptr) return options_.fused_receive != 0;
  if (!ctx->fused.has_value()) ctx->fused = !DescribeLanes(ctx->ep).rndv_rma;
  return *ctx->fused;
}

void* UcxTransport::FusedStartUnpack(void* /*context*/, void* buffer, size_t /*count*/) {
  return buffer;  // the RecvOp
}

size_t UcxTransport::FusedPackedSize(void* state) {
  return static_cast<RecvOp*>(state)->header.payload_bytes;
}

ucs_status_t UcxTransport::FusedUnpack(void* state, size_t offset, const void* src,
                                       size_t length) {
  auto* op = static_cast<RecvOp*>(state);
  // An abandoned receive's spans are the sink's again: nothing more lands there.
  if (op->abandoned || length == 0) return UCS_OK;
  if (offset > op->header.payload_bytes || length > op->header.payload_bytes - offset) {
    return UCS_ERR_MESSAGE_TRUNCATED;
  }
  const auto* bytes = static_cast<const uint8_t*>(src);
  if (!op->landed.empty() && op->landed.back().end == offset) {
    RecvOp::Landed& run = op->landed.back();
    run.crc = CopyToSpansChecksummed(op->spans, offset, bytes, length, run.crc);
    run.end += length;
  } else {
    op->landed.push_back(
        {offset, offset + length, CopyToSpansChecksummed(op->spans, offset, bytes, length, 0)});
  }
  return UCS_OK;
}

void UcxTransport::FusedFinish(void* /*state*/) {}

absl::StatusOr<uint32_t> UcxTransport::FusedChecksum(RecvOp* op) {
  std::vector<RecvOp::Landed>& runs = op->landed;
  if (runs.size() > 1) {
    std::sort(runs.begin(), runs.end(),
              [](const RecvOp::Landed& a, const RecvOp::Landed& b) { return a.begin < b.begin; });
  }
  uint32_t crc = 0;
  uint64_t covered = 0;
  for (const RecvOp::Landed& run : runs) {
    if (run.begin != covered) break;  // a gap or an overlap
    crc = covered == 0 ? run.crc : Crc32cCombine(crc, run.crc, run.end - run.begin);
    covered = run.end;
  }
  if (covered != op->header.payload_bytes) {
    return absl::DataLossError(absl::StrCat("kv payload of request ", op->header.request_id,
                                            " landed incomplete (", covered, " of ",
                                            op->header.payload_bytes, " bytes in order)"));
  }
  return crc;
}

void UcxTransport::QueueVerify(RecvOp* op) {
  op->verifying = true;
  ++verifying_;
  absl::MutexLock lock(&verify_mu_);
  verify_queue_.push_back(op);
}

void UcxTransport::OnVerified(RecvOp* op, uint32_t checksum) {
  if (op->verifying) {
    op->verifying = false;
    --verifying_;
  }
  auto it = recvs_.find(op);
  if (it == recvs_.end() || it->second->abandoned) return;
  absl::Status status;
  if (checksum != op->header.payload_checksum) {
    status = absl::DataLossError(absl::StrCat(
        "kv payload checksum mismatch for request ", op->header.request_id, " tokens [",
        op->header.token_begin, ", ", op->header.token_end, ") layer ", op->header.layer));
  }
  ConcludeRecv(op, status);
}

void UcxTransport::ConcludeRecv(RecvOp* op, const absl::Status& status) {
  auto it = recvs_.find(op);
  if (it == recvs_.end()) return;
  std::unique_ptr<RecvOp> owned = std::move(it->second);
  recvs_.erase(it);
  sink_->Complete(owned->header, status);
  // The acknowledgement goes out on this side's endpoint of the connection,
  // if it still stands (a closed one's sender has failed already).
  const auto conn = accepted_.find(owned->conn_id);
  if (conn == accepted_.end() || conn->second->failed) return;
  AckHeader ack;
  ack.send_id = owned->send_id;
  ack.conn_id = owned->conn_id;
  ack.conn_secret = conn->second->grant.secret;
  SendAck(conn->second->ep, ack, status);
}

void UcxTransport::VerifierLoop() {
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(verify_mu_) {
    return verify_stop_ || !verify_queue_.empty();
  };
  while (true) {
    RecvOp* op = nullptr;
    {
      absl::MutexLock lock(&verify_mu_);
      verify_mu_.Await(absl::Condition(&ready));
      if (verify_stop_) return;
      op = verify_queue_.front();
      verify_queue_.pop_front();
    }
    // The op and its spans stay valid: only OnVerified (or Shutdown, after
    // joining this thread) releases them.
    const uint32_t checksum = op->fused ? op->landed_crc : ChecksumSpans(op->spans);
    Post([this, op, checksum] { OnVerified(op, checksum); });
  }
}

void UcxTransport::StopVerifier() {
  if (!verifier_.joinable()) return;
  {
    absl::MutexLock lock(&verify_mu_);
    verify_stop_ = true;
    verify_queue_.clear();
  }
  verifier_.join();
}

void UcxTransport::SendAck(ucp_ep_h ep, AckHeader ack, const absl::Status& status) {
  if (ep == nullptr || shutting_down_) return;
  deferred_.push_back([this, ep, ack, status] {
    const auto it = eps_.find(ep);
    if (it == eps_.end() || it->second->failed) return;
    SendAckNow(ep, ack, status);
  });
}

bool UcxTransport::RunDeferred() {
  bool ran = false;
  while (!deferred_.empty()) {
    std::vector<std::function<void()>> batch;
    batch.swap(deferred_);
    for (auto& fn : batch) fn();
    ran = true;
  }
  return ran;
}

void UcxTransport::SendAckNow(ucp_ep_h ep, AckHeader ack_header, const absl::Status& status) {
  if (ep == nullptr || shutting_down_) return;
  auto* ack = new AckMessage;
  ack->message = std::string(status.message().substr(0, kMaxAckMessageBytes));
  ack_header.code = status.code();
  ack_header.message_bytes = static_cast<uint32_t>(ack->message.size());
  EncodeAckHeader(ack_header, ack->header);
  ucp_request_param_t params{};
  params.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  params.cb.send = &AckSentCb;
  params.user_data = ack;
  params.flags = UCP_AM_SEND_FLAG_EAGER;
  ucs_status_ptr_t request = ucp_am_send_nbx(ep, kAmAck, ack->header, kAckHeaderBytes,
                                             ack->message.data(), ack->message.size(), &params);
  if (!UCS_PTR_IS_PTR(request)) delete ack;  // done at once, or failed (the peer times out)
}

ucs_status_t UcxTransport::OnAck(const void* header, size_t header_length, const void* data,
                                 size_t length, const ucp_am_recv_param_t* param) {
  if (header_length != kAckHeaderBytes || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
    return UCS_OK;
  }
  const AckHeader ack = DecodeAckHeader(static_cast<const uint8_t*>(header));
  auto it = sends_.find(ack.send_id);
  if (it == sends_.end()) return UCS_OK;  // late: the Send gave up already
  std::shared_ptr<SendOp> op = it->second;
  // Only the connection the message went out on may answer it.
  EpContext* ctx = op->ep;
  if (ctx == nullptr || ctx->failed || ack.conn_id != ctx->grant.id ||
      ack.conn_secret != ctx->grant.secret) {
    return UCS_OK;
  }
  std::string message(static_cast<const char*>(data), std::min<size_t>(length, ack.message_bytes));
  Settle(op.get(), absl::Status(ack.code, message));
  if (ack.flags & kAckConnectionClosed) {
    // The receiver forgot this connection (it failed there): the next Send
    // connects afresh.
    FailEp(ctx, absl::UnavailableError(
                    absl::StrCat("kv connection to ", ctx->peer, " closed by the receiver")));
  }
  return UCS_OK;
}

void UcxTransport::SayGoodbye() {
  // A send may report its endpoint's failure at once (EpErrorCb -> FailEp), which
  // takes the connection out of accepted_: walk a copy.
  std::vector<EpContext*> connections;
  for (auto& [id, ctx] : accepted_) connections.push_back(ctx);
  std::vector<std::pair<void*, uint8_t*>> pending;
  for (EpContext* ctx : connections) {
    if (ctx->failed) continue;
    auto* bye = new uint8_t[kByeBytes];
    PutU64(bye, ctx->grant.id);
    PutU64(bye + 8, ctx->grant.secret);
    ucp_request_param_t params{};
    params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    params.flags = UCP_AM_SEND_FLAG_EAGER;
    ucs_status_ptr_t request =
        ucp_am_send_nbx(ctx->ep, kAmBye, bye, kByeBytes, nullptr, 0, &params);
    if (UCS_PTR_IS_PTR(request)) {
      pending.emplace_back(request, bye);
    } else {
      delete[] bye;
    }
  }
  // Briefly, so that a dead peer cannot hold up the shutdown.
  const absl::Time deadline = absl::Now() + absl::Milliseconds(200);
  for (auto& [request, bye] : pending) {
    while (ucp_request_check_status(request) == UCS_INPROGRESS && absl::Now() < deadline) {
      ucp_worker_progress(worker_);
      RunDeferred();
    }
    if (ucp_request_check_status(request) != UCS_INPROGRESS) {
      ucp_request_free(request);
      delete[] bye;
    } else {
      ucp_request_cancel(worker_, request);  // completes when the endpoint closes
      ucp_request_free(request);
      // The buffer may still be referenced until the endpoint is closed: left
      // to the process (a few bytes per connection, at shutdown only).
    }
  }
}

ucs_status_t UcxTransport::OnBye(const void* header, size_t header_length) {
  if (header_length != kByeBytes) return UCS_OK;
  const auto* bytes = static_cast<const uint8_t*>(header);
  const uint64_t id = GetU64(bytes);
  const uint64_t secret = GetU64(bytes + 8);
  for (auto& [peer, ctx] : peers_) {
    if (ctx->ep != nullptr && !ctx->failed && ctx->grant.id == id && ctx->grant.secret == secret) {
      RetireEp(ctx, absl::UnavailableError(absl::StrCat("kv receiver at ", peer, " shut down")));
      break;
    }
  }
  return UCS_OK;
}

void UcxTransport::Describe(EpContext* ctx) {
  if (!options_.log_connections || ctx->described || ctx->ep == nullptr) return;
  ctx->described = true;
  const EpLanes lanes = DescribeLanes(ctx->ep);
  const std::string who = ctx->peer.empty()
                              ? absl::StrCat("kv: accepted connection ", ctx->grant.id)
                              : absl::StrCat("kv: connection ", ctx->grant.id, " to ", ctx->peer);
  // stdout, as the services' other lines.
  std::printf("%s: active messages on %s, rendezvous on %s\n", who.c_str(),
              lanes.am.empty() ? "-" : lanes.am.c_str(),
              lanes.rndv.empty() ? "-" : lanes.rndv.c_str());
  std::fflush(stdout);
}

ucs_status_t UcxTransport::ByeCb(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param) {
  return static_cast<UcxTransport*>(arg)->OnBye(header, header_length);
}

void UcxTransport::AckSentCb(void* request, ucs_status_t status, void* user_data) {
  ucp_request_free(request);
  delete static_cast<AckMessage*>(user_data);
}

void UcxTransport::RecvCb(void* request, ucs_status_t status, size_t length, void* user_data) {
  auto* op = static_cast<RecvOp*>(user_data);
  ucp_request_free(request);
  op->self->FinishRecv(op, status);
}

ucs_status_t UcxTransport::DataCb(void* arg, const void* header, size_t header_length, void* data,
                                  size_t length, const ucp_am_recv_param_t* param) {
  return static_cast<UcxTransport*>(arg)->OnData(header, header_length, data, length, param);
}

ucs_status_t UcxTransport::AckCb(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param) {
  return static_cast<UcxTransport*>(arg)->OnAck(header, header_length, data, length, param);
}

}  // namespace ced::kv_transport::ucx
