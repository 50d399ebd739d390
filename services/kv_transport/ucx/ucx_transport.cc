#include "services/kv_transport/ucx/ucx_transport.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "engine/common/status.h"
#include "services/kv_transport/payload.h"
#include "services/kv_transport/ucx/ucx_factory.h"
#include "services/kv_transport/ucx/ucx_ops.h"

namespace ced::kv_transport::ucx {
namespace {

// Upper bound on one idle wait; wakeups normally come from UCX's event fd or a post.
constexpr int kIdleWaitMs = 20;
// Progress calls between two looks at the command queue.
constexpr int kProgressBatch = 64;
// How long shutdown keeps progressing to let closes and cancelled operations finish.
constexpr absl::Duration kShutdownGrace = absl::Seconds(2);

// True for 127.0.0.0/8 and ::1 (and ::ffff:127.x.y.z).
bool IsLoopback(const SockAddr& a) {
  if (a.storage.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a.storage);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (a.storage.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a.storage);
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) return in6->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

}  // namespace

UcxTransport::UcxTransport(const TransportOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<KvTransport>> CreateUcxTransport(const TransportOptions& options) {
  return UcxTransport::Create(options);
}

absl::StatusOr<std::unique_ptr<KvTransport>> UcxTransport::Create(const TransportOptions& options) {
  if (options.send_timeout_ms <= 0) {
    return absl::InvalidArgumentError("ucx transport: send_timeout_ms must be positive");
  }
  std::unique_ptr<UcxTransport> transport(new UcxTransport(options));
  RETURN_IF_ERROR(transport->Init());
  return std::unique_ptr<KvTransport>(std::move(transport));
}

absl::Status UcxTransport::Init() {
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return UcsError(absl::StatusCode::kInternal, "ucp_config_read", s);
  if (!options_.ucx_tls.empty()) {
    s = ucp_config_modify(config, "TLS", options_.ucx_tls.c_str());
    if (s != UCS_OK) {
      ucp_config_release(config);
      return UcsError(absl::StatusCode::kInvalidArgument,
                      absl::StrCat("ucx option ucx_tls='", options_.ucx_tls, "'"), s);
    }
  }
  // Endpoints use peer error handling (needed for failure detection and forced
  // close); UCX 1.13 only selects the shared-memory transports for such endpoints
  // when their error handling is switched on, so switch it on unless the
  // environment decides.
  const char* env_tls = std::getenv("UCX_TLS");
  const std::string tls = !options_.ucx_tls.empty()                ? options_.ucx_tls
                          : env_tls != nullptr && *env_tls != '\0' ? env_tls
                                                                   : "all";
  if (MayUseSharedMemory(tls) && std::getenv("UCX_MM_ERROR_HANDLING") == nullptr &&
      std::getenv("UCX_POSIX_ERROR_HANDLING") == nullptr &&
      std::getenv("UCX_SYSV_ERROR_HANDLING") == nullptr) {
    ucp_config_modify(config, "MM_ERROR_HANDLING", "y");  // unknown to other versions: ignored
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  s = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (s != UCS_OK) return UcsError(absl::StatusCode::kUnavailable, "ucp_init", s);

  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
  s = ucp_worker_create(context_, &worker_params, &worker_);
  if (s != UCS_OK) return UcsError(absl::StatusCode::kUnavailable, "ucp_worker_create", s);

  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER;
  s = ucp_worker_query(worker_, &attr);
  if (s != UCS_OK) return UcsError(absl::StatusCode::kInternal, "ucp_worker_query", s);
  if (attr.max_am_header < kEnvelopeBytes) {
    return absl::UnavailableError(absl::StrCat(
        "ucx: max active message header is ", attr.max_am_header, " bytes, need ", kEnvelopeBytes));
  }
  s = ucp_worker_get_efd(worker_, &ucx_efd_);
  if (s != UCS_OK) return UcsError(absl::StatusCode::kInternal, "ucp_worker_get_efd", s);

  const std::pair<unsigned, ucp_am_recv_callback_t> handlers[] = {{kAmData, &DataCb},
                                                                  {kAmAck, &AckCb}};
  for (const auto& [id, cb] : handlers) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                    UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = id;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    hp.cb = cb;
    hp.arg = this;
    s = ucp_worker_set_am_recv_handler(worker_, &hp);
    if (s != UCS_OK)
      return UcsError(absl::StatusCode::kInternal, "ucp_worker_set_am_recv_handler", s);
  }
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return absl::InternalError("ucx transport: eventfd failed");
  thread_ = std::thread([this] { ProgressLoop(); });
  return absl::OkStatus();
}

UcxTransport::~UcxTransport() {
  if (thread_.joinable()) {
    Post([this] { stop_ = true; });
    thread_.join();
  }
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
  if (wake_fd_ >= 0) close(wake_fd_);
  recvs_.clear();
  abandoned_sends_.clear();
}

void UcxTransport::Post(std::function<void()> fn) {
  {
    absl::MutexLock lock(&queue_mu_);
    queue_.push_back(std::move(fn));
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
}

bool UcxTransport::DrainCommands() {
  std::deque<std::function<void()>> batch;
  {
    absl::MutexLock lock(&queue_mu_);
    batch.swap(queue_);
  }
  for (auto& fn : batch) fn();
  return !batch.empty();
}

void UcxTransport::ProgressLoop() {
  while (true) {
    uint64_t ignored;
    [[maybe_unused]] ssize_t n = read(wake_fd_, &ignored, sizeof(ignored));
    const bool had_commands = DrainCommands();
    if (stop_) break;
    bool progressed = false;
    for (int i = 0; i < kProgressBatch && ucp_worker_progress(worker_) != 0; ++i) {
      progressed = true;
    }
    CloseFailedEps();
    if (had_commands || progressed || !to_close_.empty()) continue;
    if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) continue;
    pollfd fds[2] = {{ucx_efd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    poll(fds, 2, closing_.empty() ? kIdleWaitMs : 1);
  }
  Shutdown();
}

void UcxTransport::Shutdown() {
  shutting_down_ = true;
  StopVerifier();
  guard_.reset();
  if (listener_ != nullptr) ucp_listener_destroy(listener_);
  listener_ = nullptr;
  // Sends posted during destruction settle as CANCELLED; verdicts the verifier
  // posted before it stopped are delivered.
  DrainCommands();
  // Payloads the verifier never got to.
  std::vector<RecvOp*> unverified;
  for (auto& [raw, op] : recvs_) {
    if (op->verifying) unverified.push_back(raw);
  }
  for (RecvOp* op : unverified) {
    op->verifying = false;
    --verifying_;
    ConcludeRecv(op, absl::CancelledError("kv transport shutting down"));
  }
  for (auto& [ep, ctx] : eps_) {
    FailEp(ctx.get(), absl::CancelledError("kv transport shutting down"));
  }
  CloseFailedEps();
  const absl::Time deadline = absl::Now() + kShutdownGrace;
  auto busy = [this] {
    if (!closing_.empty() || !to_close_.empty() || !recvs_.empty()) return true;
    for (auto& [id, op] : sends_) {
      absl::MutexLock lock(&op->mu);
      if (!op->sent) return true;
    }
    return false;
  };
  while (busy() && absl::Now() < deadline) {
    ucp_worker_progress(worker_);
    CloseFailedEps();
  }
  // Whatever is left dies with the worker. Its operations stay allocated until the
  // worker is destroyed, in case UCX still calls back.
  for (auto& [raw, op] : recvs_) {
    op->abandoned = true;
    sink_->Complete(op->header, absl::CancelledError("kv transport shutting down"));
  }
  for (auto& [id, op] : sends_) abandoned_sends_.push_back(op);
  for (auto& op : abandoned_sends_) {
    Settle(op.get(), absl::CancelledError("kv transport shutting down"));
    MarkSent(op.get(), UCS_ERR_CANCELED);
  }
  for (auto& [request, ctx] : closing_) ucp_request_free(request);
  closing_.clear();
}

absl::StatusOr<std::string> UcxTransport::Listen(const std::string& address, KvSink* sink) {
  if (sink == nullptr) return absl::InvalidArgumentError("ucx listen: null sink");
  ASSIGN_OR_RETURN(const HostPort hp, ParseHostPort(address));
  ASSIGN_OR_RETURN(const SockAddr addr, Resolve(hp, /*passive=*/true));
  {
    absl::MutexLock lock(&queue_mu_);
    if (listening_) return absl::FailedPreconditionError("ucx transport already listens");
    listening_ = true;
  }
  absl::StatusOr<std::string> result;
  absl::Notification done;
  Post([&] {
    sink_ = sink;
    ucp_listener_params_t params{};
    params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    // On a loopback address UCX listens on an ephemeral port of the same
    // address, behind the guard (ucx_guard.h). On any other address the guard
    // would hide the peer's address from UCX's connection manager (which takes
    // the client's TCP device address from the socket peer), so peers on other
    // hosts could not connect: there UCX owns the port itself.
    const bool guarded = IsLoopback(addr);
    SockAddr inner = addr;
    if (guarded && inner.storage.ss_family == AF_INET) {
      reinterpret_cast<sockaddr_in*>(&inner.storage)->sin_port = 0;
    } else if (guarded && inner.storage.ss_family == AF_INET6) {
      reinterpret_cast<sockaddr_in6*>(&inner.storage)->sin6_port = 0;
    }
    params.sockaddr.addr = inner.get();
    params.sockaddr.addrlen = inner.length;
    params.conn_handler.cb = &ConnHandlerCb;
    params.conn_handler.arg = this;
    ucs_status_t s = ucp_listener_create(worker_, &params, &listener_);
    if (s != UCS_OK) {
      listener_ = nullptr;
      sink_ = nullptr;
      result = UcsError(absl::StatusCode::kUnavailable, absl::StrCat("ucx listen on ", address), s);
    } else {
      ucp_listener_attr_t attr{};
      attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
      s = ucp_listener_query(listener_, &attr);
      if (s == UCS_OK && !guarded) {
        result = FormatHostPort(hp.host.empty() ? "0.0.0.0" : hp.host, PortOf(attr.sockaddr));
      } else if (s == UCS_OK) {
        auto guard = HandshakeGuard::Start(addr.get(), addr.length, PortOf(attr.sockaddr));
        if (guard.ok()) {
          guard_ = *std::move(guard);
          result = FormatHostPort(hp.host.empty() ? "0.0.0.0" : hp.host, guard_->port());
        } else {
          result = guard.status();
          ucp_listener_destroy(listener_);
          listener_ = nullptr;
          sink_ = nullptr;
        }
      } else {
        result = UcsError(absl::StatusCode::kInternal, "ucp_listener_query", s);
      }
      if (result.ok()) verifier_ = std::thread([this] { VerifierLoop(); });
    }
    done.Notify();
  });
  done.WaitForNotification();
  if (!result.ok()) {
    absl::MutexLock lock(&queue_mu_);
    listening_ = false;
  }
  return result;
}

absl::StatusOr<SockAddr> UcxTransport::ResolvePeer(const std::string& peer) {
  {
    absl::MutexLock lock(&resolve_mu_);
    auto it = resolved_.find(peer);
    if (it != resolved_.end()) return it->second;
  }
  ASSIGN_OR_RETURN(const HostPort hp, ParseHostPort(peer));
  ASSIGN_OR_RETURN(const SockAddr addr, Resolve(hp, /*passive=*/false));
  absl::MutexLock lock(&resolve_mu_);
  resolved_[peer] = addr;
  return addr;
}

absl::Status UcxTransport::Send(const std::string& peer, const KvMessageHeader& h,
                                const std::vector<ConstSpan>& payload) {
  RETURN_IF_ERROR(ValidateHeader(h, options_.max_payload_bytes));
  RETURN_IF_ERROR(CheckSendSpans(payload, h.payload_bytes));
  auto op = std::make_shared<SendOp>();
  ASSIGN_OR_RETURN(op->addr, ResolvePeer(peer));
  op->self = this;
  op->id = next_send_id_.fetch_add(1);
  op->peer = peer;
  KvMessageHeader sent = h;
  sent.payload_checksum = ChecksumSpans(payload);
  if (options_.corrupt_payload_checksum_for_testing) sent.payload_checksum ^= 0xA5A5A5A5u;
  const KvHeaderBytes header = EncodeHeader(sent);
  std::copy(header.begin(), header.end(), op->envelope.begin());
  PutU64(op->envelope.data() + kKvHeaderBytes, op->id);
  for (const ConstSpan& span : payload) {
    if (span.size > 0) op->iov.push_back({const_cast<uint8_t*>(span.data), span.size});
  }
  Post([this, op] { StartSend(op); });

  absl::MutexLock lock(&op->mu);
  const absl::Time deadline = absl::Now() + absl::Milliseconds(options_.send_timeout_ms);
  if (!op->mu.AwaitWithDeadline(absl::Condition(op.get(), &SendOp::Done), deadline)) {
    Post([this, op] { AbortSend(op); });
    // The abort settles the verdict and, if UCX still holds the payload,
    // force-closes the connection, which completes the UCX request.
    op->mu.Await(absl::Condition(op.get(), &SendOp::Done));
  }
  return op->verdict;
}

}  // namespace ced::kv_transport::ucx
