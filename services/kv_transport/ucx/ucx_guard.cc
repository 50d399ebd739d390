#include "services/kv_transport/ucx/ucx_guard.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace ced::kv_transport::ucx {
namespace {

constexpr size_t kHeaderBytes = 16;  // tcp_sockcm's {size_t length; uint8_t status;}

uint64_t LoadU64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);  // host order, as UCX writes it
  return v;
}

// Reads exactly n bytes before `deadline`; false on EOF, error or timeout.
bool ReadExact(int fd, uint8_t* out, size_t n, std::chrono::steady_clock::time_point deadline,
               const std::atomic<bool>& stop) {
  size_t got = 0;
  while (got < n) {
    if (stop.load()) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 100)));
    if (r < 0 && errno != EINTR) return false;
    if (r <= 0) continue;
    const ssize_t k = recv(fd, out + got, n - got, 0);
    if (k <= 0) return false;
    got += static_cast<size_t>(k);
  }
  return true;
}

bool WriteAll(int fd, const uint8_t* data, size_t n) {
  size_t off = 0;
  while (off < n) {
    const ssize_t k = send(fd, data + off, n - off, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    off += static_cast<size_t>(k);
  }
  return true;
}

void SetPort(sockaddr_storage* a, uint16_t port) {
  if (a->ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(a)->sin_port = htons(port);
  if (a->ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(a)->sin6_port = htons(port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<HandshakeGuard>> HandshakeGuard::Start(const sockaddr* addr,
                                                                      socklen_t length,
                                                                      uint16_t ucx_port) {
  std::unique_ptr<HandshakeGuard> g(new HandshakeGuard());
  g->ucx_port_ = ucx_port;
  if (const char* len = std::getenv("UCX_TCP_CM_PRIV_DATA_LEN")) {
    char* unit = nullptr;
    uint64_t n = std::strtoull(len, &unit, 10);
    if (unit != nullptr && (*unit == 'k' || *unit == 'K')) n <<= 10;
    if (unit != nullptr && (*unit == 'm' || *unit == 'M')) n <<= 20;
    if (n > g->max_private_data_ && n < (uint64_t{1} << 24)) g->max_private_data_ = n;
  }
  g->listen_fd_ = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (g->listen_fd_ < 0) return absl::UnavailableError("ucx guard: socket() failed");
  const int one = 1;
  setsockopt(g->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(g->listen_fd_, addr, length) != 0 || listen(g->listen_fd_, 128) != 0) {
    return absl::UnavailableError(absl::StrCat("ucx guard: cannot listen: ", strerror(errno)));
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof bound;
  getsockname(g->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &bound_len);
  g->port_ = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                         : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  g->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (g->wake_fd_ < 0) return absl::UnavailableError("ucx guard: eventfd() failed");
  HandshakeGuard* raw = g.get();
  g->accept_thread_ = std::thread([raw] { raw->AcceptLoop(); });
  return g;
}

HandshakeGuard::~HandshakeGuard() {
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

void HandshakeGuard::AcceptLoop() {
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

void HandshakeGuard::Serve(int client) {
  // 1. The request message, complete and well-formed, within the timeout.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kHandshakeTimeoutMs);
  std::string request(kHeaderBytes, '\0');
  auto* bytes = reinterpret_cast<uint8_t*>(request.data());
  if (!ReadExact(client, bytes, kHeaderBytes, deadline, stop_)) {
    ++refused_;
    return;
  }
  const uint64_t length = LoadU64(bytes);
  const uint8_t status = bytes[8];
  if (length == 0 || length > max_private_data_ || status != 0) {
    ++refused_;
    return;
  }
  request.resize(kHeaderBytes + length);
  bytes = reinterpret_cast<uint8_t*>(request.data());
  if (!ReadExact(client, bytes + kHeaderBytes, length, deadline, stop_)) {
    ++refused_;
    return;
  }
  // 2. The UCX listener, on the local address the client reached.
  sockaddr_storage local{};
  socklen_t local_len = sizeof local;
  if (getsockname(client, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return;
  SetPort(&local, ucx_port_);
  const int upstream = socket(local.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (upstream < 0) return;
  if (connect(upstream, reinterpret_cast<sockaddr*>(&local), local_len) != 0 ||
      !WriteAll(upstream, bytes, request.size())) {
    close(upstream);
    return;
  }
  // 3. Relay: everything the server sends; from the client, one notification
  // header of length 0 once the server has replied, then nothing more.
  bool server_replied = false;
  uint8_t notify[kHeaderBytes];
  size_t notify_got = 0;
  bool notified = false;
  uint8_t buf[4096];
  while (!stop_.load()) {
    pollfd fds[2] = {{client, POLLIN, 0}, {upstream, POLLIN, 0}};
    if (notify_got == kHeaderBytes && !server_replied) fds[0].events = 0;  // hold it back
    const int r = poll(fds, 2, 200);
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t k = recv(upstream, buf, sizeof buf, 0);
      if (k <= 0 || !WriteAll(client, buf, static_cast<size_t>(k))) break;
      server_replied = true;
    }
    if (notify_got == kHeaderBytes && server_replied && !notified) {
      if (LoadU64(notify) != 0 || !WriteAll(upstream, notify, kHeaderBytes)) break;
      notified = true;
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      if (notified || notify_got == kHeaderBytes) {
        // Nothing may follow the notification but the end of the connection.
        if (recv(client, buf, sizeof buf, 0) != 0) ++refused_;
        break;
      }
      const ssize_t k = recv(client, notify + notify_got, kHeaderBytes - notify_got, 0);
      if (k <= 0) break;
      notify_got += static_cast<size_t>(k);
      if (notify_got == kHeaderBytes && server_replied) {
        if (LoadU64(notify) != 0) {
          ++refused_;
          break;
        }
        if (!WriteAll(upstream, notify, kHeaderBytes)) break;
        notified = true;
      }
    }
  }
  close(upstream);
}

}  // namespace ced::kv_transport::ucx
