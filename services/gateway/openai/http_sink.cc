#include "services/gateway/openai/http_sink.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace ced::gateway::openai {

HttpSink::HttpSink() : event_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

HttpSink::~HttpSink() {
  if (event_fd_ >= 0) close(event_fd_);
}

void HttpSink::Signal() {
  if (!waiting_ || event_fd_ < 0) return;
  waiting_ = false;
  const uint64_t one = 1;
  (void)!write(event_fd_, &one, sizeof one);
}

void HttpSink::Push(ced::v1::GenerateResponse response) {
  absl::MutexLock lock(&mu_);
  if (status_.has_value()) return;
  queue_.push_back(std::move(response));
  Signal();
}

void HttpSink::Close(const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  if (status_.has_value()) return;
  status_ = status;
  Signal();
}

std::optional<grpc::Status> HttpSink::closed() const {
  absl::MutexLock lock(&mu_);
  if (!queue_.empty()) return std::nullopt;
  return status_;
}

HttpSink::Wake HttpSink::Take(int socket_fd, absl::Time deadline,
                              std::deque<ced::v1::GenerateResponse>* out) {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (!queue_.empty() || status_.has_value()) {
        for (auto& m : queue_) out->push_back(std::move(m));
        queue_.clear();
        waiting_ = false;
        return Wake::kReady;
      }
      waiting_ = true;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      absl::MutexLock lock(&mu_);
      waiting_ = false;
      return Wake::kTimeout;
    }
    pollfd fds[2] = {{event_fd_, POLLIN, 0}, {socket_fd, POLLRDHUP, 0}};
    const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)));
    const int n = poll(fds, socket_fd >= 0 ? 2 : 1, static_cast<int>(std::min<int64_t>(ms, 60000)));
    if (n > 0 && (fds[0].revents & POLLIN)) {
      uint64_t value;
      (void)!read(event_fd_, &value, sizeof value);
    }
    if (socket_fd >= 0 && n > 0 && (fds[1].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
      absl::MutexLock lock(&mu_);
      waiting_ = false;
      if (queue_.empty() && !status_.has_value()) return Wake::kPeerClosed;
    }
  }
}

namespace {

// "host", port of a socket address in httplib's spelling (IPv4 dotted, IPv6 plain).
bool SameEndpoint(const sockaddr_storage& a, const std::string& addr, int port) {
  char host[INET6_ADDRSTRLEN] = {};
  int p = -1;
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    p = ntohs(in->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    p = ntohs(in6->sin6_port);
  } else {
    return false;
  }
  return p == port && addr == host;
}

bool IsConnection(int fd, const std::string& local_addr, int local_port,
                  const std::string& remote_addr, int remote_port) {
  sockaddr_storage peer{}, self{};
  socklen_t peer_len = sizeof peer, self_len = sizeof self;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;
  if (!SameEndpoint(peer, remote_addr, remote_port)) return false;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &self_len) != 0) return false;
  return SameEndpoint(self, local_addr, local_port);
}

}  // namespace

int FindConnectionSocket(const std::string& local_addr, int local_port,
                         const std::string& remote_addr, int remote_port) {
  // A connection stays on one thread of the server's pool: check the last
  // one this thread served first.
  thread_local int cached = -1;
  if (cached >= 0 && IsConnection(cached, local_addr, local_port, remote_addr, remote_port)) {
    return cached;
  }
  cached = -1;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    if (IsConnection(static_cast<int>(fd), local_addr, local_port, remote_addr, remote_port)) {
      cached = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return cached;
}

int ShutdownAcceptedConnections(int local_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  int n = 0;
  while (dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    sockaddr_storage self{}, peer{};
    socklen_t self_len = sizeof self, peer_len = sizeof peer;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&self), &self_len) != 0) {
      continue;
    }
    int port = -1;
    if (self.ss_family == AF_INET) {
      port = ntohs(reinterpret_cast<const sockaddr_in*>(&self)->sin_port);
    } else if (self.ss_family == AF_INET6) {
      port = ntohs(reinterpret_cast<const sockaddr_in6*>(&self)->sin6_port);
    }
    if (port != local_port) continue;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
      continue;  // not connected (a listener)
    }
    if (shutdown(static_cast<int>(fd), SHUT_RDWR) == 0) ++n;
  }
  closedir(dir);
  return n;
}

bool PeerClosed(int fd) {
  if (fd < 0) return false;
  pollfd p = {fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace ced::gateway::openai
