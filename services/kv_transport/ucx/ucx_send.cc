// UcxTransport: endpoints and the sending side. Progress thread only.
#include <sys/random.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "services/kv_transport/ucx/ucx_ops.h"
#include "services/kv_transport/ucx/ucx_transport.h"

namespace ced::kv_transport::ucx {

UcxTransport::EpContext* UcxTransport::GetOrConnect(const SendOp& op) {
  const std::string& peer = op.peer;
  auto it = peers_.find(peer);
  if (it != peers_.end()) return it->second;
  auto ctx = std::make_unique<EpContext>();
  ctx->self = this;
  ctx->peer = peer;
  ctx->exchange_send_id = op.id;
  EpContext* raw = ctx.get();
  exchanging_[raw] = std::move(ctx);
  peers_[peer] = raw;
  // The exchange blocks on a socket: it runs on its own thread and posts its
  // result back; Sends wait in raw->waiting meanwhile.
  const int timeout_ms = static_cast<int>(
      std::min<int64_t>(options_.send_timeout_ms, AddressExchangeServer::kHandshakeTimeoutMs));
  raw->exchange = std::thread([this, raw, addr = op.addr, first = op.header, timeout_ms] {
    absl::StatusOr<ExchangeResult> result =
        ExchangeAddresses(addr.get(), addr.length, first,
                          absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(own_address_.data()),
                                              own_address_.size()),
                          timeout_ms, exchange_stop_);
    Post(
        [this, raw, result = std::move(result)]() mutable { OnExchanged(raw, std::move(result)); });
  });
  return raw;
}

ucs_status_t UcxTransport::CreateEp(EpContext* ctx, const std::string& worker_address) {
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.address = reinterpret_cast<const ucp_address_t*>(worker_address.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &EpErrorCb;
  params.err_handler.arg = ctx;
  return ucp_ep_create(worker_, &params, &ctx->ep);
}

void UcxTransport::OnExchanged(EpContext* raw, absl::StatusOr<ExchangeResult> result) {
  auto it = exchanging_.find(raw);
  if (it == exchanging_.end()) return;
  std::unique_ptr<EpContext> ctx = std::move(it->second);
  exchanging_.erase(it);
  if (ctx->exchange.joinable()) ctx->exchange.join();  // it has just posted this
  if (auto p = peers_.find(ctx->peer); p != peers_.end() && p->second == raw) peers_.erase(p);
  if (shutting_down_) {
    FailWaiting(raw, absl::CancelledError("kv transport shutting down"));
    return;
  }
  if (!result.ok()) {
    FailWaiting(raw,
                absl::Status(result.status().code(), absl::StrCat("kv connect to ", ctx->peer, ": ",
                                                                  result.status().message())));
    return;
  }
  ctx->grant = result->grant;
  if (const ucs_status_t s = CreateEp(raw, result->server_address); s != UCS_OK) {
    ctx->ep = nullptr;
    FailWaiting(raw, UcsError(absl::StatusCode::kUnavailable,
                              absl::StrCat("kv connect to ", ctx->peer), s));
    return;
  }
  eps_[raw->ep] = std::move(ctx);
  peers_[raw->peer] = raw;
  // Sends wait for the wireup to finish: a message queued earlier would be sent
  // with the provisional lanes, i.e. eagerly in fragments instead of by rendezvous.
  ucp_request_param_t flush{};
  flush.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  flush.cb.send = &FlushCb;
  flush.user_data = raw;
  ucs_status_ptr_t request = ucp_ep_flush_nbx(raw->ep, &flush);
  if (!UCS_PTR_IS_PTR(request)) OnConnected(raw, UCS_PTR_STATUS(request));
}

void UcxTransport::FailWaiting(EpContext* ctx, const absl::Status& status) {
  std::vector<std::shared_ptr<SendOp>> waiting;
  waiting.swap(ctx->waiting);
  for (auto& op : waiting) {
    Settle(op.get(), status);
    MarkSent(op.get(), UCS_OK);
  }
}

absl::StatusOr<ConnectionGrant> UcxTransport::AcceptConnection(const KvMessageHeader& first,
                                                               const std::string& client_address) {
  if (shutting_down_ || sink_ == nullptr) return absl::UnavailableError("kv listener stopping");
  if (absl::Status admitted = sink_->Admit(first); !admitted.ok()) return admitted;
  auto ctx = std::make_unique<EpContext>();
  ctx->self = this;
  ctx->grant.id = next_conn_id_++;
  if (getrandom(&ctx->grant.secret, sizeof ctx->grant.secret, 0) !=
      static_cast<ssize_t>(sizeof ctx->grant.secret)) {
    return absl::InternalError("kv listener: no randomness for the connection secret");
  }
  // Only a peer the sink admitted gets here, so the address comes from a peer
  // that named a live reservation. Known limit: a peer that completes the
  // exchange but never connects leaves this endpoint until UCX's keepalive
  // finds that peer's worker gone.
  if (const ucs_status_t s = CreateEp(ctx.get(), client_address); s != UCS_OK) {
    return UcsError(absl::StatusCode::kInvalidArgument, "kv listener: the peer's worker address",
                    s);
  }
  ctx->connected = true;
  const ConnectionGrant grant = ctx->grant;
  EpContext* raw = ctx.get();
  eps_[raw->ep] = std::move(ctx);
  accepted_[grant.id] = raw;
  return grant;
}

void UcxTransport::OnConnected(EpContext* ctx, ucs_status_t status) {
  if (ctx->failed) return;
  if (status != UCS_OK) {
    FailEp(ctx, UcsError(absl::StatusCode::kUnavailable, absl::StrCat("kv connect to ", ctx->peer),
                         status));
    return;
  }
  ctx->connected = true;
  Describe(ctx);
  std::vector<std::shared_ptr<SendOp>> waiting;
  waiting.swap(ctx->waiting);
  for (auto& op : waiting) IssueSend(op.get());
}

namespace {

// How long a connection whose receiver said goodbye keeps its endpoint open for
// UCX to report the peer gone (tcp: at once, when the peer's worker closes its
// sockets; shared memory: UCX's keepalive round) before it is closed anyway.
constexpr absl::Duration kRetireGrace = absl::Seconds(1);

}  // namespace

void UcxTransport::FailEp(EpContext* ctx, const absl::Status& status) {
  MarkFailed(ctx, status);
  if (ctx->close_queued) return;
  ctx->close_queued = true;
  retiring_.erase(std::remove_if(retiring_.begin(), retiring_.end(),
                                 [ctx](const auto& entry) { return entry.second == ctx; }),
                  retiring_.end());
  to_close_.push_back(ctx);
}

// The receiver said goodbye: its worker is about to close the connection. A
// forced close of a tcp endpoint that still moves a payload while its peer tears
// the connection down can make UCX 1.13 dispatch a socket event to the freed
// transport endpoint (a jump through a stale pointer: 9 crashes in 350 runs of
// ReceiverShutdownDuringLargeTransfer/Tcp under CPU hogs, none in 150 without
// the forced close). So the Sends fail now, new ones connect afresh, and the
// endpoint is closed once UCX has reported it failed (EpErrorCb -> FailEp).
void UcxTransport::RetireEp(EpContext* ctx, const absl::Status& status) {
  if (ctx->failed) return;
  MarkFailed(ctx, status);
  retiring_.emplace_back(absl::Now() + kRetireGrace, ctx);
}

void UcxTransport::CloseRetiredEps() {
  const absl::Time now = absl::Now();
  std::vector<EpContext*> due;
  for (const auto& [by, ctx] : retiring_) {
    if (by <= now) due.push_back(ctx);
  }
  for (EpContext* ctx : due) FailEp(ctx, absl::UnavailableError("kv connection retired"));
}

void UcxTransport::MarkFailed(EpContext* ctx, const absl::Status& status) {
  if (ctx->failed) return;
  ctx->failed = true;
  if (!ctx->peer.empty()) {
    auto it = peers_.find(ctx->peer);
    if (it != peers_.end() && it->second == ctx) peers_.erase(it);
  } else if (auto it = accepted_.find(ctx->grant.id); it != accepted_.end() && it->second == ctx) {
    accepted_.erase(it);
  }
  std::vector<std::shared_ptr<SendOp>> affected;
  for (auto& [id, op] : sends_) {
    if (op->ep == ctx) affected.push_back(op);
  }
  for (auto& op : affected) Settle(op.get(), status);
  // Queued Sends never reached UCX: nothing else will complete them.
  std::vector<std::shared_ptr<SendOp>> waiting;
  waiting.swap(ctx->waiting);
  for (auto& op : waiting) MarkSent(op.get(), UCS_ERR_CANCELED);
}

void UcxTransport::CloseFailedEps() {
  std::vector<EpContext*> batch;
  batch.swap(to_close_);
  for (EpContext* ctx : batch) {
    ucp_request_param_t params{};
    params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    params.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t request = ucp_ep_close_nbx(ctx->ep, &params);
    if (UCS_PTR_IS_PTR(request)) {
      closing_.emplace_back(request, ctx);
    } else {
      eps_.erase(ctx->ep);
    }
  }
  for (size_t i = 0; i < closing_.size();) {
    auto [request, ctx] = closing_[i];
    if (ucp_request_check_status(request) == UCS_INPROGRESS) {
      ++i;
      continue;
    }
    ucp_request_free(request);
    eps_.erase(ctx->ep);
    closing_[i] = closing_.back();
    closing_.pop_back();
  }
}

void UcxTransport::StartSend(const std::shared_ptr<SendOp>& op) {
  if (shutting_down_) {
    Settle(op.get(), absl::CancelledError("kv transport shutting down"));
    MarkSent(op.get(), UCS_ERR_CANCELED);
    return;
  }
  EpContext* ctx = GetOrConnect(*op);
  op->ep = ctx;
  sends_[op->id] = op;
  if (ctx->connected) {
    IssueSend(op.get());
  } else {
    ctx->waiting.push_back(op);
  }
}

void UcxTransport::IssueSend(SendOp* op) {
  PutU64(op->envelope.data() + kKvHeaderBytes + 8, op->ep->grant.id);
  PutU64(op->envelope.data() + kKvHeaderBytes + 16, op->ep->grant.secret);
  ucp_request_param_t params{};
  params.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_FLAGS;
  params.cb.send = &SendCb;
  params.user_data = op;
  params.flags = UCP_AM_SEND_FLAG_REPLY;
  const void* buffer = nullptr;
  size_t count = 0;
  params.datatype = ucp_dt_make_contig(1);
  if (op->iov.size() == 1) {
    buffer = op->iov[0].buffer;
    count = op->iov[0].length;
  } else if (op->iov.size() > 1) {
    params.datatype = ucp_dt_make_iov();
    buffer = op->iov.data();
    count = op->iov.size();
  }
  ucs_status_ptr_t request = ucp_am_send_nbx(op->ep->ep, kAmData, op->envelope.data(),
                                             op->envelope.size(), buffer, count, &params);
  if (request == nullptr) {
    MarkSent(op, UCS_OK);
  } else if (UCS_PTR_IS_ERR(request)) {
    MarkSent(op, UCS_PTR_STATUS(request));
  }
}

void UcxTransport::AbortSend(const std::shared_ptr<SendOp>& op) {
  if (sends_.count(op->id) == 0) return;  // finished meanwhile
  Settle(op.get(),
         absl::DeadlineExceededError(absl::StrCat("kv send to ", op->peer, ": no verdict within ",
                                                  options_.send_timeout_ms, " ms")));
  bool sent;
  {
    absl::MutexLock lock(&op->mu);
    sent = op->sent;
  }
  if (!sent && op->ep != nullptr && op->ep->ep == nullptr) {
    // Still exchanging addresses: the payload never reached UCX.
    auto& waiting = op->ep->waiting;
    waiting.erase(std::remove(waiting.begin(), waiting.end(), op), waiting.end());
    MarkSent(op.get(), UCS_ERR_CANCELED);
  } else if (!sent && op->ep != nullptr) {
    FailEp(op->ep, absl::UnavailableError(
                       absl::StrCat("kv connection to ", op->peer, " reset after a timeout")));
  }
}

void UcxTransport::MarkSent(SendOp* op, ucs_status_t status) {
  bool done;
  {
    absl::MutexLock lock(&op->mu);
    op->sent = true;
    if (status != UCS_OK && !op->settled) {
      op->settled = true;
      op->verdict = UcsError(status == UCS_ERR_CANCELED ? absl::StatusCode::kCancelled
                                                        : absl::StatusCode::kUnavailable,
                             absl::StrCat("kv send to ", op->peer), status);
    }
    done = op->Done();
  }
  if (done) Finish(op);
}

void UcxTransport::Settle(SendOp* op, absl::Status verdict) {
  bool done;
  {
    absl::MutexLock lock(&op->mu);
    if (!op->settled) {
      op->settled = true;
      op->verdict = std::move(verdict);
    }
    done = op->Done();
  }
  if (done) Finish(op);
}

void UcxTransport::Finish(SendOp* op) {
  std::shared_ptr<SendOp> keep;  // `op` may be owned by sends_ only
  if (auto it = sends_.find(op->id); it != sends_.end()) {
    keep = std::move(it->second);
    sends_.erase(it);
  }
  if (op->deadline.has_value()) {
    deadlines_.erase(*op->deadline);
    op->deadline.reset();
  }
  absl::Status verdict;
  {
    absl::MutexLock lock(&op->mu);
    if (op->finished || op->on_done == nullptr) return;
    op->finished = true;
    verdict = op->verdict;
  }
  // A synchronous Send's waiter may free `op` as soon as it sees Done(); only
  // SendAsync ops (which nobody waits on) get here, kept alive by `keep` or by
  // the caller's reference.
  KvTransport::SendDone done = std::move(op->on_done);
  done(std::move(verdict));
}

void UcxTransport::ExpireSends() {
  if (deadlines_.empty()) return;
  const absl::Time now = absl::Now();
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const uint64_t id = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    if (auto it = sends_.find(id); it != sends_.end()) {
      const std::shared_ptr<SendOp> op = it->second;  // AbortSend may erase the entry
      // Its entry is gone: Finish (run by AbortSend) must not erase it again.
      op->deadline.reset();
      AbortSend(op);
    }
  }
}

void UcxTransport::EpErrorCb(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* ctx = static_cast<EpContext*>(arg);
  ctx->self->FailEp(
      ctx, UcsError(absl::StatusCode::kUnavailable,
                    ctx->peer.empty() ? std::string("kv connection from a peer lost")
                                      : absl::StrCat("kv connection to ", ctx->peer, " lost"),
                    status));
}

void UcxTransport::FlushCb(void* request, ucs_status_t status, void* user_data) {
  auto* ctx = static_cast<EpContext*>(user_data);
  ucp_request_free(request);
  // Not from inside this callback: IssueSend would re-enter UCX while it
  // dispatches the endpoint's pending queue (UCX 1.13 aborts on that).
  ctx->self->deferred_.push_back([ctx, status] { ctx->self->OnConnected(ctx, status); });
}

void UcxTransport::SendCb(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<SendOp*>(user_data);
  ucp_request_free(request);
  op->self->MarkSent(op, status);
}

}  // namespace ced::kv_transport::ucx
