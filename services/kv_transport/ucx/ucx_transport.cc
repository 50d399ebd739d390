#include "services/kv_transport/ucx/ucx_transport.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
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
// The progress thread keeps polling this long after the last progress before it
// sleeps, whether or not operations are in flight: a payload moves as a stream
// of fragments (shared memory, tcp) and messages come in trains (a receiver
// idles between one message's end and the next one's start), and a
// sleep/wakeup between two of them costs more than the fragment. The spin
// yields the core to other runnable threads every kYieldEvery idle rounds.
constexpr auto kSpinAfterProgress = std::chrono::microseconds(500);
// Idle spins between two looks at the clock, and between two yields of the core.
constexpr int kClockEvery = 32;
constexpr int kYieldEvery = 32;
// Progress calls between two looks at the command queue.
constexpr int kProgressBatch = 64;
// How long shutdown keeps progressing to let closes and cancelled operations finish.
constexpr absl::Duration kShutdownGrace = absl::Seconds(2);
// Peer failure detection on lanes without a connection to break (shared memory):
// UCX's keepalive round, unless UCX_KEEPALIVE_INTERVAL says otherwise.
constexpr char kKeepaliveInterval[] = "1s";
// No zero-copy sends, unless UCX_ZCOPY_THRESH says otherwise. UCX 1.13
// (protocols v1) fast-forwards a send request when its endpoint fails
// (ucp_request_send_state_ff, from the pending-queue purge or the error of a
// later fragment): it zeroes the request's completion count and completes it
// while the tcp transport still owns a zero-copy fragment of it (an am_zcopy
// fragment half-written to a full socket). When tcp purges that
// fragment it completes the same completion again: "uct_iface.h:884 Assertion
// `comp->count > 0' failed" aborts the process (a use of the freed request
// where UCX is built without assertions). A peer that goes away while a large
// message is flow-controlled on tcp is enough (ReceiverShutdownDuringLargeTransfer
// /Tcp with CPU hogs: 50 aborts in 100 runs; bench/results/reliability.md).
// With the threshold at infinity, messages go as bcopy fragments, which UCX
// completes once. It costs tcp bandwidth (about 3x on loopback, same file);
// UCX_TCP_MAX_IOV=0, the narrower switch, makes UCX 1.13 refuse its own short
// IOV sends. Shared-memory lanes (posix/sysv active messages) have no zero-copy
// sends anyway.
constexpr char kZcopyThresh[] = "inf";

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
  if (std::getenv("UCX_KEEPALIVE_INTERVAL") == nullptr) {
    ucp_config_modify(config, "KEEPALIVE_INTERVAL", kKeepaliveInterval);
  }
  if (std::getenv("UCX_ZCOPY_THRESH") == nullptr) {
    ucp_config_modify(config, "ZCOPY_THRESH", kZcopyThresh);
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
  ucp_address_t* address = nullptr;
  size_t address_length = 0;
  s = ucp_worker_get_address(worker_, &address, &address_length);
  if (s != UCS_OK) return UcsError(absl::StatusCode::kInternal, "ucp_worker_get_address", s);
  own_address_.assign(reinterpret_cast<const char*>(address), address_length);
  ucp_worker_release_address(worker_, address);
  if (own_address_.empty() || own_address_.size() > kMaxWorkerAddressBytes) {
    return absl::InternalError(
        absl::StrCat("ucx: worker address of ", own_address_.size(), " bytes"));
  }
  s = ucp_worker_get_efd(worker_, &ucx_efd_);
  if (s != UCS_OK) return UcsError(absl::StatusCode::kInternal, "ucp_worker_get_efd", s);

  const std::pair<unsigned, ucp_am_recv_callback_t> handlers[] = {
      {kAmData, &DataCb}, {kAmAck, &AckCb}, {kAmBye, &ByeCb}};
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
  ucp_generic_dt_ops_t fused_ops{};
  fused_ops.start_pack = [](void*, const void*, size_t) -> void* { return nullptr; };
  fused_ops.start_unpack = &FusedStartUnpack;
  fused_ops.packed_size = &FusedPackedSize;
  fused_ops.pack = [](void*, size_t, void*, size_t) -> size_t { return 0; };  // receive only
  fused_ops.unpack = &FusedUnpack;
  fused_ops.finish = &FusedFinish;
  s = ucp_dt_create_generic(&fused_ops, this, &fused_dt_);
  if (s != UCS_OK) return UcsError(absl::StatusCode::kInternal, "ucp_dt_create_generic", s);
  have_fused_dt_ = true;
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return absl::InternalError("ucx transport: eventfd failed");
  thread_ = std::thread([this] { ProgressLoop(); });
  return absl::OkStatus();
}

UcxTransport::~UcxTransport() {
  if (thread_.joinable()) {
    Post([this] { stop_ = true; });
    thread_.join();
    // Sends posted during the shutdown (e.g. by SendAsync callbacks) settle as
    // CANCELLED; nothing else runs on this state any more.
    while (DrainCommands()) {
    }
  }
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
  if (have_fused_dt_) ucp_dt_destroy(fused_dt_);
  if (wake_fd_ >= 0) close(wake_fd_);
  recvs_.clear();
  abandoned_sends_.clear();
}

bool UcxTransport::UseVerifierThread() const {
  if (options_.verifier_threads >= 0) return options_.verifier_threads > 0;
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof cpus, &cpus) != 0) return true;
  return CPU_COUNT(&cpus) >= 4;
}

void UcxTransport::Post(std::function<void()> fn) {
  {
    absl::MutexLock lock(&queue_mu_);
    queue_.push_back(std::move(fn));
    posted_.fetch_add(1);
  }
  if (may_sleep_.load()) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
  }
}

bool UcxTransport::DrainCommands() {
  if (posted_.load() == 0) return false;  // the common case while spinning: no lock
  {
    absl::MutexLock lock(&queue_mu_);
    drained_.swap(queue_);
    posted_.store(0);
  }
  for (auto& fn : drained_) fn();
  drained_.clear();
  return true;
}

void UcxTransport::ProgressLoop() {
  // Idle iterations in a row, and when they began (read every kClockEvery of them).
  int idle = 0;
  bool spin = false;  // from an activity until kSpinAfterProgress passed without one
  int since_expiry = 0;
  auto idle_since = std::chrono::steady_clock::now();
  while (true) {
    const bool had_commands = DrainCommands();
    if (stop_) break;
    bool progressed = false;
    for (int i = 0; i < kProgressBatch && ucp_worker_progress(worker_) != 0; ++i) {
      progressed = true;
    }
    if (!deferred_.empty() && RunDeferred()) progressed = true;
    if (!to_close_.empty() || !closing_.empty()) CloseFailedEps();
    if ((!deadlines_.empty() || !retiring_.empty()) && ++since_expiry >= kClockEvery) {
      since_expiry = 0;
      ExpireSends();
      if (!retiring_.empty()) CloseRetiredEps();
    }
    if (had_commands || progressed || !to_close_.empty()) {
      idle = 0;
      spin = true;
      continue;
    }
    if (spin) {
      if (idle++ == 0) idle_since = std::chrono::steady_clock::now();
      if (idle % kClockEvery != 0 ||
          std::chrono::steady_clock::now() - idle_since < kSpinAfterProgress) {
        // Spinning, but the core goes to any other runnable thread first (the
        // engine's compute, on a machine without cores to spare): a transfer
        // should overlap compute, not take its time. Every kYieldEvery rounds
        // only (a few microseconds apart): a system call costs ~1.5 us on a VM,
        // some twenty idle rounds.
        if (idle % kYieldEvery == 0) sched_yield();
        continue;
      }
    }
    // Nothing happened for kSpinAfterProgress, or the last wait ended without
    // an event: sleep (an idle transport does not spin after each timeout).
    spin = false;
    idle = 0;
    ExpireSends();
    if (!retiring_.empty()) CloseRetiredEps();
    if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) continue;
    may_sleep_.store(true);
    if (posted_.load() == 0) {
      pollfd fds[2] = {{ucx_efd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      poll(fds, 2, closing_.empty() ? kIdleWaitMs : 1);
      if (fds[1].revents & POLLIN) {
        uint64_t ignored;
        [[maybe_unused]] ssize_t n = read(wake_fd_, &ignored, sizeof(ignored));
      }
    }
    may_sleep_.store(false);
  }
  Shutdown();
}

void UcxTransport::Shutdown() {
  shutting_down_ = true;
  exchange_stop_ = true;
  StopVerifier();
  // The listener's exchanges give up (their accepts, posted here, see
  // shutting_down_); so do the client's, which post their results here.
  exchange_.reset();
  for (auto& [raw, ctx] : exchanging_) {
    if (ctx->exchange.joinable()) ctx->exchange.join();
  }
  // Sends posted during destruction settle as CANCELLED; verdicts the verifier
  // posted before it stopped are delivered; finished exchanges fail their Sends.
  DrainCommands();
  SayGoodbye();
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
    RunDeferred();
    CloseFailedEps();
  }
  deferred_.clear();
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
  ASSIGN_OR_RETURN(const services::HostPort hp, services::ParseHostPort(address));
  ASSIGN_OR_RETURN(const SockAddr addr, Resolve(hp, /*passive=*/true));
  {
    absl::MutexLock lock(&queue_mu_);
    if (listening_) return absl::FailedPreconditionError("ucx transport already listens");
    listening_ = true;
  }
  absl::StatusOr<std::string> result;
  absl::Notification done;
  Post([&] {
    // The exchange server owns the public port on the configured address; the
    // data lanes are UCX's own (on the interfaces UCX_NET_DEVICES allows).
    auto accept = [this](const Hello& hello,
                         const std::string& client_address) -> absl::StatusOr<ConnectionGrant> {
      struct Pending {
        absl::Notification done;
        absl::StatusOr<ConnectionGrant> grant = absl::UnavailableError("kv listener stopping");
      };
      auto pending = std::make_shared<Pending>();
      Post([this, pending, first = hello.first, client_address] {
        pending->grant = AcceptConnection(first, client_address);
        pending->done.Notify();
      });
      const absl::Time deadline =
          absl::Now() + absl::Milliseconds(AddressExchangeServer::kHandshakeTimeoutMs);
      while (!pending->done.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
        if (exchange_stop_.load() || absl::Now() > deadline) {
          return absl::UnavailableError("kv listener busy or stopping");
        }
      }
      return pending->grant;
    };
    auto server = AddressExchangeServer::Start(addr.get(), addr.length, own_address_,
                                               options_.max_payload_bytes, accept);
    if (!server.ok()) {
      result = absl::Status(server.status().code(), absl::StrCat("kv listen on ", address, ": ",
                                                                 server.status().message()));
    } else {
      sink_ = sink;
      exchange_ = *std::move(server);
      result = services::FormatHostPort(hp.host.empty() ? "0.0.0.0" : hp.host, exchange_->port());
      if (UseVerifierThread()) verifier_ = std::thread([this] { VerifierLoop(); });
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
  ASSIGN_OR_RETURN(const services::HostPort hp, services::ParseHostPort(peer));
  ASSIGN_OR_RETURN(const SockAddr addr, Resolve(hp, /*passive=*/false));
  absl::MutexLock lock(&resolve_mu_);
  resolved_[peer] = addr;
  return addr;
}

absl::Status UcxTransport::Send(const std::string& peer, const KvMessageHeader& h,
                                const std::vector<ConstSpan>& payload) {
  return SendMessage(peer, h, payload, /*checksum_given=*/false);
}

absl::Status UcxTransport::SendChecksummed(const std::string& peer, const KvMessageHeader& h,
                                           const std::vector<ConstSpan>& payload) {
  return SendMessage(peer, h, payload, /*checksum_given=*/true);
}

absl::StatusOr<std::shared_ptr<UcxTransport::SendOp>> UcxTransport::PrepareSend(
    const std::string& peer, const KvMessageHeader& h, const std::vector<ConstSpan>& payload,
    bool checksum_given) {
  RETURN_IF_ERROR(ValidateHeader(h, options_.max_payload_bytes));
  RETURN_IF_ERROR(CheckSendSpans(payload, h.payload_bytes));
  auto op = std::make_shared<SendOp>();
  ASSIGN_OR_RETURN(op->addr, ResolvePeer(peer));
  op->self = this;
  op->id = next_send_id_.fetch_add(1);
  op->peer = peer;
  KvMessageHeader sent = h;
  if (!checksum_given) sent.payload_checksum = ChecksumSpans(payload);
  if (options_.corrupt_payload_checksum_for_testing) sent.payload_checksum ^= 0xA5A5A5A5u;
  op->header = sent;
  const KvHeaderBytes header = EncodeHeader(sent);
  std::copy(header.begin(), header.end(), op->envelope.begin());
  PutU64(op->envelope.data() + kKvHeaderBytes, op->id);
  for (const ConstSpan& span : payload) {
    if (span.size > 0) op->iov.push_back({const_cast<uint8_t*>(span.data), span.size});
  }
  return op;
}

absl::Status UcxTransport::SendMessage(const std::string& peer, const KvMessageHeader& h,
                                       const std::vector<ConstSpan>& payload, bool checksum_given) {
  ASSIGN_OR_RETURN(std::shared_ptr<SendOp> op, PrepareSend(peer, h, payload, checksum_given));
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

void UcxTransport::SendAsync(const std::string& peer, const KvMessageHeader& h,
                             const std::vector<ConstSpan>& payload, bool checksum_given,
                             SendDone done) {
  absl::StatusOr<std::shared_ptr<SendOp>> prepared = PrepareSend(peer, h, payload, checksum_given);
  if (!prepared.ok()) {
    done(prepared.status());
    return;
  }
  std::shared_ptr<SendOp> op = *std::move(prepared);
  op->on_done = std::move(done);
  const absl::Time deadline = absl::Now() + absl::Milliseconds(options_.send_timeout_ms);
  Post([this, op, deadline] {
    op->deadline = deadlines_.emplace(deadline, op->id);
    StartSend(op);
  });
}

}  // namespace ced::kv_transport::ucx
