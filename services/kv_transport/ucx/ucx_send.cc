// UcxTransport: endpoints and the sending side. Progress thread only.
#include "absl/strings/str_cat.h"
#include "services/kv_transport/ucx/ucx_ops.h"
#include "services/kv_transport/ucx/ucx_transport.h"

namespace ced::kv_transport::ucx {

UcxTransport::EpContext* UcxTransport::GetOrConnect(const std::string& peer, const SockAddr& addr,
                                                    absl::Status* error) {
  auto it = peers_.find(peer);
  if (it != peers_.end()) return it->second;
  auto ctx = std::make_unique<EpContext>();
  ctx->self = this;
  ctx->peer = peer;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  params.sockaddr.addr = addr.get();
  params.sockaddr.addrlen = addr.length;
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &EpErrorCb;
  params.err_handler.arg = ctx.get();
  const ucs_status_t s = ucp_ep_create(worker_, &params, &ctx->ep);
  if (s != UCS_OK) {
    *error = UcsError(absl::StatusCode::kUnavailable, absl::StrCat("kv connect to ", peer), s);
    return nullptr;
  }
  EpContext* raw = ctx.get();
  eps_[raw->ep] = std::move(ctx);
  peers_[peer] = raw;
  // Sends wait for the wireup to finish: a message queued earlier would be sent
  // with the provisional lanes, i.e. eagerly in fragments instead of by rendezvous.
  ucp_request_param_t flush{};
  flush.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  flush.cb.send = &FlushCb;
  flush.user_data = raw;
  ucs_status_ptr_t request = ucp_ep_flush_nbx(raw->ep, &flush);
  if (!UCS_PTR_IS_PTR(request)) OnConnected(raw, UCS_PTR_STATUS(request));
  if (raw->failed) {
    *error = absl::UnavailableError(absl::StrCat("kv connect to ", peer, " failed"));
    return nullptr;
  }
  return raw;
}

void UcxTransport::OnConnected(EpContext* ctx, ucs_status_t status) {
  if (ctx->failed) return;
  if (status != UCS_OK) {
    FailEp(ctx, UcsError(absl::StatusCode::kUnavailable, absl::StrCat("kv connect to ", ctx->peer),
                         status));
    return;
  }
  ctx->connected = true;
  std::vector<std::shared_ptr<SendOp>> waiting;
  waiting.swap(ctx->waiting);
  for (auto& op : waiting) IssueSend(op.get());
}

void UcxTransport::OnConnRequest(ucp_conn_request_h request) {
  if (shutting_down_ || listener_ == nullptr) {
    if (listener_ != nullptr) ucp_listener_reject(listener_, request);
    return;
  }
  auto ctx = std::make_unique<EpContext>();
  ctx->self = this;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.conn_request = request;
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &EpErrorCb;
  params.err_handler.arg = ctx.get();
  if (ucp_ep_create(worker_, &params, &ctx->ep) != UCS_OK) return;
  EpContext* raw = ctx.get();
  eps_[raw->ep] = std::move(ctx);
}

void UcxTransport::FailEp(EpContext* ctx, const absl::Status& status) {
  if (ctx->failed) return;
  ctx->failed = true;
  if (!ctx->peer.empty()) {
    auto it = peers_.find(ctx->peer);
    if (it != peers_.end() && it->second == ctx) peers_.erase(it);
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
  to_close_.push_back(ctx);
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

bool UcxTransport::EpUsable(ucp_ep_h ep) const {
  auto it = eps_.find(ep);
  return it != eps_.end() && !it->second->failed;
}

void UcxTransport::StartSend(const std::shared_ptr<SendOp>& op) {
  if (shutting_down_) {
    Settle(op.get(), absl::CancelledError("kv transport shutting down"));
    MarkSent(op.get(), UCS_ERR_CANCELED);
    return;
  }
  absl::Status error;
  EpContext* ctx = GetOrConnect(op->peer, op->addr, &error);
  if (ctx == nullptr) {
    Settle(op.get(), error);
    MarkSent(op.get(), UCS_OK);
    return;
  }
  op->ep = ctx;
  sends_[op->id] = op;
  if (ctx->connected) {
    IssueSend(op.get());
  } else {
    ctx->waiting.push_back(op);
  }
}

void UcxTransport::IssueSend(SendOp* op) {
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
  if (!sent && op->ep != nullptr) {
    FailEp(op->ep, absl::UnavailableError(
                       absl::StrCat("kv connection to ", op->peer, " reset after a timeout")));
  }
}

void UcxTransport::MarkSent(SendOp* op, ucs_status_t status) {
  std::shared_ptr<SendOp> keep;  // `op` may be owned by sends_ only
  if (auto it = sends_.find(op->id); it != sends_.end()) keep = it->second;
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
  if (done && keep != nullptr) sends_.erase(op->id);
}

void UcxTransport::Settle(SendOp* op, absl::Status verdict) {
  std::shared_ptr<SendOp> keep;
  if (auto it = sends_.find(op->id); it != sends_.end()) keep = it->second;
  bool done;
  {
    absl::MutexLock lock(&op->mu);
    if (!op->settled) {
      op->settled = true;
      op->verdict = std::move(verdict);
    }
    done = op->Done();
  }
  if (done && keep != nullptr) sends_.erase(op->id);
}

void UcxTransport::ConnHandlerCb(ucp_conn_request_h request, void* arg) {
  static_cast<UcxTransport*>(arg)->OnConnRequest(request);
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
  ctx->self->OnConnected(ctx, status);
}

void UcxTransport::SendCb(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<SendOp*>(user_data);
  ucp_request_free(request);
  op->self->MarkSent(op, status);
}

}  // namespace ced::kv_transport::ucx
