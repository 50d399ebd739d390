#include "services/kv_transport/ucx/ucx_exchange.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "services/kv_transport/ucx/ucx_util.h"

namespace ced::kv_transport::ucx {
namespace {

constexpr char kMagic[8] = {'C', 'E', 'D', 'K', 'V', 'X', '0', '1'};
constexpr uint32_t kVersion = 1;

using Clock = std::chrono::steady_clock;

void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

int MsLeft(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 100));
}

// Waits until `fd` is ready for `events`, polling `stop` every 100 ms.
absl::Status WaitFd(int fd, short events, Clock::time_point deadline,
                    const std::atomic<bool>& stop) {
  while (true) {
    if (stop.load()) return absl::CancelledError("kv exchange: transport stopping");
    const int wait = MsLeft(deadline);
    if (wait == 0) return absl::DeadlineExceededError("kv exchange: timed out");
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, wait);
    if (r < 0 && errno != EINTR) return absl::UnavailableError("kv exchange: poll failed");
    if (r > 0) return absl::OkStatus();
  }
}

absl::Status ReadExact(int fd, uint8_t* out, size_t n, Clock::time_point deadline,
                       const std::atomic<bool>& stop) {
  size_t got = 0;
  while (got < n) {
    if (absl::Status s = WaitFd(fd, POLLIN, deadline, stop); !s.ok()) return s;
    const ssize_t k = recv(fd, out + got, n - got, MSG_DONTWAIT);
    if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (k <= 0) return absl::UnavailableError("kv exchange: connection closed by the peer");
    got += static_cast<size_t>(k);
  }
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, const std::string& data, Clock::time_point deadline,
                      const std::atomic<bool>& stop) {
  size_t off = 0;
  while (off < data.size()) {
    if (absl::Status s = WaitFd(fd, POLLOUT, deadline, stop); !s.ok()) return s;
    const ssize_t k = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (k <= 0) return absl::UnavailableError("kv exchange: connection lost while sending");
    off += static_cast<size_t>(k);
  }
  return absl::OkStatus();
}

}  // namespace

std::string EncodeHello(const KvMessageHeader& first, absl::Span<const uint8_t> worker_address) {
  std::string out(kHelloBytes, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  std::memcpy(p, kMagic, sizeof kMagic);
  PutU32(p + 8, kVersion);
  PutU32(p + 12, static_cast<uint32_t>(worker_address.size()));
  const KvHeaderBytes kv = EncodeHeader(first);
  std::memcpy(p + 24, kv.data(), kv.size());
  out.append(reinterpret_cast<const char*>(worker_address.data()), worker_address.size());
  return out;
}

absl::StatusOr<Hello> DecodeHelloHeader(absl::Span<const uint8_t> header,
                                        uint64_t max_payload_bytes) {
  if (header.size() != kHelloBytes || std::memcmp(header.data(), kMagic, sizeof kMagic) != 0) {
    return absl::InvalidArgumentError("kv exchange: not a ced-serve KV hello");
  }
  const uint32_t version = GetU32(header.data() + 8);
  if (version != kVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv exchange: hello field 'version' is ", version, ", expected ", kVersion));
  }
  const uint32_t length = GetU32(header.data() + 12);
  if (length == 0 || length > kMaxWorkerAddressBytes) {
    return absl::InvalidArgumentError(absl::StrCat("kv exchange: hello field 'address_bytes' is ",
                                                   length, ", must be in [1, ",
                                                   kMaxWorkerAddressBytes, "]"));
  }
  if (GetU64(header.data() + 16) != 0) {
    return absl::InvalidArgumentError("kv exchange: hello field 'reserved' must be 0");
  }
  absl::StatusOr<KvMessageHeader> first =
      DecodeHeader(header.subspan(24, kKvHeaderBytes), max_payload_bytes);
  if (!first.ok()) return first.status();
  return Hello{length, *first};
}

std::string EncodeReply(const absl::StatusOr<ConnectionGrant>& grant,
                        absl::Span<const uint8_t> server_address) {
  std::string body;
  if (grant.ok()) {
    body.assign(reinterpret_cast<const char*>(server_address.data()), server_address.size());
  } else {
    body = std::string(grant.status().message().substr(0, kMaxExchangeMessageBytes));
  }
  std::string out(kReplyBytes, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  std::memcpy(p, kMagic, sizeof kMagic);
  PutU32(p + 8, static_cast<uint32_t>(grant.status().code()));
  PutU32(p + 12, static_cast<uint32_t>(body.size()));
  if (grant.ok()) {
    PutU64(p + 16, grant->id);
    PutU64(p + 24, grant->secret);
  }
  out += body;
  return out;
}

absl::StatusOr<ReplyHeader> DecodeReplyHeader(absl::Span<const uint8_t> header) {
  if (header.size() != kReplyBytes || std::memcmp(header.data(), kMagic, sizeof kMagic) != 0) {
    return absl::UnavailableError("kv exchange: the peer is not a ced-serve KV listener");
  }
  ReplyHeader out;
  const uint32_t code = GetU32(header.data() + 8);
  out.body_bytes = GetU32(header.data() + 12);
  out.grant.id = GetU64(header.data() + 16);
  out.grant.secret = GetU64(header.data() + 24);
  if (code > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::UnavailableError(absl::StrCat("kv exchange: reply field 'status' is ", code));
  }
  out.status = absl::Status(static_cast<absl::StatusCode>(code), "");
  const uint32_t limit = out.status.ok() ? kMaxWorkerAddressBytes : kMaxExchangeMessageBytes;
  if ((out.status.ok() && out.body_bytes == 0) || out.body_bytes > limit) {
    return absl::UnavailableError(
        absl::StrCat("kv exchange: reply field 'body_bytes' is ", out.body_bytes));
  }
  if (GetU64(header.data() + 32) != 0) {
    return absl::UnavailableError("kv exchange: reply field 'reserved' must be 0");
  }
  return out;
}

absl::StatusOr<ExchangeResult> ExchangeAddresses(const sockaddr* peer, socklen_t peer_length,
                                                 const KvMessageHeader& first,
                                                 absl::Span<const uint8_t> own_address,
                                                 int timeout_ms, const std::atomic<bool>& stop) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  const int fd = socket(peer->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::UnavailableError("kv exchange: socket() failed");
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  if (connect(fd, peer, peer_length) != 0) {
    if (errno != EINPROGRESS) {
      return absl::UnavailableError(absl::StrCat("kv exchange: connect: ", strerror(errno)));
    }
    if (absl::Status s = WaitFd(fd, POLLOUT, deadline, stop); !s.ok()) return s;
    int error = 0;
    socklen_t len = sizeof error;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
    if (error != 0) {
      return absl::UnavailableError(absl::StrCat("kv exchange: connect: ", strerror(error)));
    }
  }
  if (absl::Status s = WriteAll(fd, EncodeHello(first, own_address), deadline, stop); !s.ok())
    return s;
  uint8_t header[kReplyBytes];
  if (absl::Status s = ReadExact(fd, header, sizeof header, deadline, stop); !s.ok()) return s;
  absl::StatusOr<ReplyHeader> reply = DecodeReplyHeader(absl::MakeConstSpan(header));
  if (!reply.ok()) return reply.status();
  std::string body(reply->body_bytes, '\0');
  if (absl::Status s =
          ReadExact(fd, reinterpret_cast<uint8_t*>(body.data()), body.size(), deadline, stop);
      !s.ok()) {
    return s;
  }
  if (!reply->status.ok()) {
    return absl::Status(reply->status.code(), absl::StrCat("kv peer refused: ", body));
  }
  return ExchangeResult{reply->grant, std::move(body)};
}

absl::StatusOr<std::unique_ptr<AddressExchangeServer>> AddressExchangeServer::Start(
    const sockaddr* addr, socklen_t length, std::string server_address, uint64_t max_payload_bytes,
    AcceptFn accept) {
  std::unique_ptr<AddressExchangeServer> s(new AddressExchangeServer());
  s->server_address_ = std::move(server_address);
  s->max_payload_bytes_ = max_payload_bytes;
  s->accept_ = std::move(accept);
  s->listen_fd_ = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s->listen_fd_ < 0) return absl::UnavailableError("kv listener: socket() failed");
  const int one = 1;
  setsockopt(s->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(s->listen_fd_, addr, length) != 0 || listen(s->listen_fd_, 128) != 0) {
    return absl::UnavailableError(absl::StrCat("kv listener: cannot listen: ", strerror(errno)));
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof bound;
  getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &bound_len);
  s->port_ = PortOf(bound);
  s->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->wake_fd_ < 0) return absl::UnavailableError("kv listener: eventfd() failed");
  AddressExchangeServer* raw = s.get();
  s->accept_thread_ = std::thread([raw] { raw->AcceptLoop(); });
  return s;
}

AddressExchangeServer::~AddressExchangeServer() {
  stop_ = true;
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);
  }
  if (accept_thread_.joinable()) accept_thread_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : connections_) {
      if (c->client >= 0) shutdown(c->client, SHUT_RDWR);
    }
  }
  for (auto& c : connections_) {
    if (c->thread.joinable()) c->thread.join();
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void AddressExchangeServer::AcceptLoop() {
  while (!stop_.load()) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, 1000) <= 0 || !(fds[0].revents & POLLIN)) continue;
    const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      if ((*it)->done.load()) {
        (*it)->thread.join();
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
    if (connections_.size() >= static_cast<size_t>(kMaxConnections)) {
      ++refused_;
      close(client);
      continue;
    }
    auto c = std::make_unique<Connection>();
    c->client = client;
    Connection* raw = c.get();
    connections_.push_back(std::move(c));
    raw->thread = std::thread([this, raw] {
      Serve(raw->client);
      std::lock_guard<std::mutex> lock(mu_);
      close(raw->client);
      raw->client = -1;
      raw->done = true;
    });
  }
}

void AddressExchangeServer::Serve(int client) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(kHandshakeTimeoutMs);
  uint8_t header[kHelloBytes];
  if (!ReadExact(client, header, sizeof header, deadline, stop_).ok()) {
    ++refused_;
    return;
  }
  absl::StatusOr<Hello> hello = DecodeHelloHeader(absl::MakeConstSpan(header), max_payload_bytes_);
  if (!hello.ok()) {
    // Answer only what looks like our own protocol (a peer of another version);
    // anything else is closed without a word.
    if (std::memcmp(header, kMagic, sizeof kMagic) == 0) {
      (void)WriteAll(client, EncodeReply(hello.status(), {}), deadline, stop_);
    }
    ++refused_;
    return;
  }
  std::string address(hello->address_bytes, '\0');
  if (!ReadExact(client, reinterpret_cast<uint8_t*>(address.data()), address.size(), deadline,
                 stop_)
           .ok()) {
    ++refused_;
    return;
  }
  const absl::StatusOr<ConnectionGrant> grant = accept_(*hello, address);
  if (!grant.ok()) ++refused_;
  (void)WriteAll(client,
                 EncodeReply(grant, absl::MakeConstSpan(
                                        reinterpret_cast<const uint8_t*>(server_address_.data()),
                                        server_address_.size())),
                 deadline, stop_);
}

}  // namespace ced::kv_transport::ucx
