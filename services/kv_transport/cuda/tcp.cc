#include "services/kv_transport/cuda/tcp.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "services/common/host_port.h"

namespace ced::kv_transport::cuda {
namespace {

int PollTimeoutMs(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return 1000;
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  return ms < 0 ? 0 : static_cast<int>(ms < 1000 ? ms + 1 : 1000);
}

absl::Status WaitFd(int fd, short events, absl::Time deadline, const char* what) {
  while (true) {
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, PollTimeoutMs(deadline));
    if (r > 0) return absl::OkStatus();
    if (r < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat(what, ": poll: ", std::strerror(errno)));
    }
    if (absl::Now() >= deadline)
      return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
  }
}

absl::StatusOr<addrinfo*> Resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const std::string h = host == "localhost" ? "127.0.0.1" : host;
  const int rc =
      getaddrinfo(h.empty() ? nullptr : h.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  return res;
}

}  // namespace

absl::StatusOr<int> TcpListen(const std::string& address, std::string* bound) {
  const absl::StatusOr<services::HostPort> hp = services::ParseHostPort(address);
  if (!hp.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("listen address: ", hp.status().message()));
  }
  auto res = Resolve(hp->host, hp->port, /*passive=*/true);
  if (!res.ok()) return res.status();
  absl::Status last = absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  for (addrinfo* ai = *res; ai != nullptr; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 64) != 0) {
      last = absl::UnavailableError(
          absl::StrCat("cannot listen on ", address, ": ", std::strerror(errno)));
      close(fd);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    char buf[INET6_ADDRSTRLEN] = {0};
    int bound_port = 0;
    if (ss.ss_family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
      bound_port = ntohs(a->sin6_port);
      *bound = absl::StrCat("[", buf, "]:", bound_port);
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
      bound_port = ntohs(a->sin_port);
      *bound = absl::StrCat(buf, ":", bound_port);
    }
    freeaddrinfo(*res);
    return fd;
  }
  freeaddrinfo(*res);
  return last;
}

absl::StatusOr<int> TcpConnect(const std::string& address, absl::Duration timeout) {
  const absl::StatusOr<services::HostPort> hp = services::ParseHostPort(address);
  if (!hp.ok()) return absl::InvalidArgumentError(absl::StrCat("peer: ", hp.status().message()));
  auto res = Resolve(hp->host, hp->port, /*passive=*/false);
  if (!res.ok()) return res.status();
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status last = absl::UnavailableError(absl::StrCat("cannot connect to ", address));
  for (addrinfo* ai = *res; ai != nullptr; ai = ai->ai_next) {
    const int fd =
        socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) continue;
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      absl::Status w = WaitFd(fd, POLLOUT, deadline, "connect");
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      rc = (w.ok() && err == 0) ? 0 : -1;
      if (!w.ok())
        errno = ETIMEDOUT;
      else if (err != 0)
        errno = err;
    }
    if (rc != 0) {
      last = absl::UnavailableError(
          absl::StrCat("cannot connect to ", address, ": ", std::strerror(errno)));
      close(fd);
      continue;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    freeaddrinfo(*res);
    return fd;
  }
  freeaddrinfo(*res);
  return last;
}

absl::Status ReadFull(int fd, void* data, size_t size, absl::Time deadline) {
  auto* p = static_cast<uint8_t*>(data);
  while (size > 0) {
    if (absl::Status w = WaitFd(fd, POLLIN, deadline, "read"); !w.ok()) return w;
    const ssize_t n = recv(fd, p, size, MSG_DONTWAIT);
    if (n == 0) return absl::UnavailableError("connection closed by the peer");
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("read: ", std::strerror(errno)));
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status WriteFull(int fd, const void* data, size_t size, absl::Time deadline) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    if (absl::Status w = WaitFd(fd, POLLOUT, deadline, "write"); !w.ok()) return w;
    const ssize_t n = send(fd, p, size, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("write: ", std::strerror(errno)));
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace ced::kv_transport::cuda
