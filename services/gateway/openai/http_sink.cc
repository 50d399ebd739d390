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
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

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
  if (status_.has_value() || broken_) return;
  if (direct_fd_ >= 0) {
    std::string events;
    render_(response, &events);
    WriteDirect(events);
    return;
  }
  queue_.push_back(std::move(response));
  Signal();
}

void HttpSink::Started() {
  absl::MutexLock lock(&mu_);
  if (started_) return;
  started_ = true;
  Signal();
}

bool HttpSink::started() const {
  absl::MutexLock lock(&mu_);
  return started_;
}

void HttpSink::Close(const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  if (status_.has_value()) return;
  status_ = status;
  if (direct_fd_ >= 0 && !broken_) WriteDirect(render_end_(status));
  Signal();
}

std::string HttpChunk(const std::string& data) {
  char size[24];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string chunk;
  chunk.reserve(static_cast<size_t>(n) + data.size() + 2);
  chunk.append(size, static_cast<size_t>(n));
  chunk.append(data);
  chunk.append("\r\n");
  return chunk;
}

void HttpSink::WriteDirect(const std::string& events) {
  if (events.empty()) return;
  std::string chunk = HttpChunk(events);
  if (backlog_.empty() && !writing_) {
    const ssize_t n = send(direct_fd_, chunk.data(), chunk.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(chunk.size())) return;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      broken_ = true;  // the connection's thread sees it and gives up
      Signal();
      return;
    }
    if (n > 0) chunk.erase(0, static_cast<size_t>(n));
  }
  backlog_ += chunk;
  Signal();
}

void HttpSink::EndDirect() {
  direct_fd_ = -1;
  render_ = nullptr;
  render_end_ = nullptr;
  backlog_.clear();
  waiting_ = false;
}

namespace {

// Writes all of `bytes` to the socket, waiting for it to take them until
// `deadline`. False on a failure or at the deadline.
bool SendAll(int fd, const std::string& bytes, absl::Time deadline) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        send(fd, bytes.data() + done, bytes.size() - done, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd p = {fd, POLLOUT, 0};
    const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)));
    if (poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 60000))) < 0 && errno != EINTR) {
      return false;
    }
    if ((p.revents & (POLLERR | POLLHUP)) != 0) return false;
  }
  return true;
}

}  // namespace

bool HttpSink::StreamDirect(int socket_fd, absl::Time deadline, absl::Duration write_timeout,
                            Render render, RenderEnd render_end) {
  {
    absl::MutexLock lock(&mu_);
    if (broken_) return false;
    direct_fd_ = socket_fd;
    render_ = std::move(render);
    render_end_ = std::move(render_end);
    std::string events;
    for (const auto& m : queue_) render_(m, &events);
    queue_.clear();
    if (status_.has_value()) events += render_end_(*status_);
    if (!events.empty()) backlog_ += HttpChunk(events);
  }
  while (true) {
    std::string bytes;
    {
      absl::MutexLock lock(&mu_);
      if (broken_) {
        EndDirect();
        return false;
      }
      if (!backlog_.empty()) {
        bytes.swap(backlog_);
        writing_ = true;
        waiting_ = false;
      } else if (status_.has_value()) {
        EndDirect();
        return true;
      } else {
        waiting_ = true;
      }
    }
    if (!bytes.empty()) {
      const bool ok = SendAll(socket_fd, bytes, std::min(deadline, absl::Now() + write_timeout));
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) broken_ = true;
      continue;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      absl::MutexLock lock(&mu_);
      EndDirect();
      return false;
    }
    pollfd fds[2] = {{event_fd_, POLLIN, 0}, {socket_fd, POLLRDHUP, 0}};
    const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)));
    const int n = poll(fds, 2, static_cast<int>(std::min<int64_t>(ms, 60000)));
    if (n > 0 && (fds[0].revents & POLLIN)) {
      uint64_t value;
      (void)!read(event_fd_, &value, sizeof value);
    }
    if (n > 0 && (fds[1].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
      absl::MutexLock lock(&mu_);
      // Gone before the end was written: nobody to write to.
      if (!(status_.has_value() && backlog_.empty() && !broken_)) broken_ = true;
    }
  }
}

std::optional<grpc::Status> HttpSink::closed() const {
  absl::MutexLock lock(&mu_);
  if (!queue_.empty()) return std::nullopt;
  return status_;
}

HttpSink::Wake HttpSink::Take(int socket_fd, absl::Time deadline,
                              std::deque<ced::v1::GenerateResponse>* out) {
  std::vector<std::deque<ced::v1::GenerateResponse>> taken(1);
  taken[0].swap(*out);  // appended to, as the caller's deque
  const Wake wake = TakeAny({this}, socket_fd, deadline, &taken);
  taken[0].swap(*out);
  return wake;
}

HttpSink::Wake HttpSink::TakeAny(const std::vector<HttpSink*>& sinks, int socket_fd,
                                 absl::Time deadline,
                                 std::vector<std::deque<ced::v1::GenerateResponse>>* out) {
  out->resize(sinks.size());
  auto stop_waiting = [&sinks] {
    for (HttpSink* s : sinks) {
      absl::MutexLock lock(&s->mu_);
      s->waiting_ = false;
    }
  };
  std::vector<pollfd> fds;
  while (true) {
    bool ready = false;
    for (size_t i = 0; i < sinks.size(); ++i) {
      HttpSink* s = sinks[i];
      absl::MutexLock lock(&s->mu_);
      if (!s->queue_.empty() || s->status_.has_value() || (s->started_ && !s->started_taken_)) {
        for (auto& m : s->queue_) (*out)[i].push_back(std::move(m));
        s->queue_.clear();
        s->started_taken_ = s->started_;
        ready = true;
      } else {
        s->waiting_ = true;
      }
    }
    if (ready) {
      stop_waiting();
      return Wake::kReady;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      stop_waiting();
      return Wake::kTimeout;
    }
    fds.clear();
    for (HttpSink* s : sinks) fds.push_back({s->event_fd_, POLLIN, 0});
    if (socket_fd >= 0) fds.push_back({socket_fd, POLLRDHUP, 0});
    const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)));
    const int n = poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(ms, 60000)));
    if (n <= 0) continue;
    for (size_t i = 0; i < sinks.size(); ++i) {
      if (fds[i].revents & POLLIN) {
        uint64_t value;
        (void)!read(fds[i].fd, &value, sizeof value);
      }
    }
    if (socket_fd >= 0 && (fds.back().revents & (POLLRDHUP | POLLHUP | POLLERR))) {
      // Gone: unless a sink got messages or its close meanwhile (then the
      // next round reports them ready).
      bool pending = false;
      for (HttpSink* s : sinks) {
        absl::MutexLock lock(&s->mu_);
        pending = pending || !s->queue_.empty() || s->status_.has_value();
      }
      if (!pending) {
        stop_waiting();
        return Wake::kPeerClosed;
      }
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
