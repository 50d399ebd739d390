#include "services/kv_store/tls_relay.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <future>

#include "absl/strings/str_cat.h"

namespace ced::services {
namespace {

using Clock = std::chrono::steady_clock;

struct CtxDeleter {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
using Ctx = std::unique_ptr<SSL_CTX, CtxDeleter>;

// OpenSSL's queued reasons, oldest first, and the queue cleared.
std::string SslErrors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    absl::StrAppend(&out, out.empty() ? "" : "; ", buf);
  }
  return out.empty() ? "no OpenSSL reason" : out;
}

bool Readable(const std::string& path) { return std::ifstream(path).good(); }

// A client context from the options' files; errors name the flag.
absl::StatusOr<Ctx> NewContext(const TlsClientOptions& o) {
  ERR_clear_error();
  if (o.cert_file.empty() != o.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--kv-store-tls-cert and --kv-store-tls-key go together (mutual TLS)");
  }
  for (const auto& [flag, file] : {std::pair<const char*, const std::string*>{"ca", &o.ca_file},
                                   {"cert", &o.cert_file},
                                   {"key", &o.key_file}}) {
    if (!file->empty() && !Readable(*file)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kv-store-tls-", flag, ": cannot read ", *file));
    }
  }
  Ctx ctx(SSL_CTX_new(TLS_client_method()));
  if (ctx == nullptr) return absl::InternalError("redis TLS: SSL_CTX_new: " + SslErrors());
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  if (!o.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx.get(), o.ca_file.c_str(), nullptr) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("--kv-store-tls-ca: no PEM CA certificate in ",
                                                     o.ca_file, " (", SslErrors(), ")"));
    }
  } else if (SSL_CTX_set_default_verify_paths(ctx.get()) != 1) {
    return absl::InternalError("redis TLS: no system trust store: " + SslErrors());
  }
  if (!o.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx.get(), o.cert_file.c_str()) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("--kv-store-tls-cert: no PEM certificate in ",
                                                     o.cert_file, " (", SslErrors(), ")"));
    }
    if (SSL_CTX_use_PrivateKey_file(ctx.get(), o.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("--kv-store-tls-key: no PEM private key in ",
                                                     o.key_file, " (", SslErrors(), ")"));
    }
    if (SSL_CTX_check_private_key(ctx.get()) != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--kv-store-tls-key: ", o.key_file, " does not match --kv-store-tls-cert ", o.cert_file));
    }
  }
  return ctx;
}

int MsLeft(Clock::time_point deadline) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms <= 0 ? 0 : static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

// Waits for `events` on fd until the deadline; false on timeout or error.
// What an SSL call that returned `rc` (<= 0) waits for on the socket:
// POLLIN or POLLOUT, or 0 when it failed for good (closed or broken).
short SslWaitEvents(SSL* ssl, int rc) {
  switch (SSL_get_error(ssl, rc)) {
    case SSL_ERROR_WANT_READ:
      return POLLIN;
    case SSL_ERROR_WANT_WRITE:
      return POLLOUT;
    default:
      return 0;
  }
}

bool WaitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, MsLeft(deadline));
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

// A non-blocking TCP connection to host:port within the deadline, or -1.
int TcpConnect(const std::string& host, int port, Clock::time_point deadline, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    *error = absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc));
    return -1;
  }
  int fd = -1;
  *error = absl::StrCat("cannot connect to ", host, ":", port);
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int err = connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      socklen_t len = sizeof err;
      err = !WaitFor(fd, POLLOUT, deadline)                         ? ETIMEDOUT
            : getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 ? errno
                                                                    : err;
    }
    if (err != 0) {
      absl::StrAppend(error, " (", std::strerror(err), ")");
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd >= 0) {
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

bool IsIpLiteral(const std::string& host) {
  unsigned char buf[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

}  // namespace

struct TlsRelay::Tls {
  Ctx ctx;
  SSL* ssl = nullptr;
  ~Tls() {
    if (ssl != nullptr) SSL_free(ssl);
  }
};

absl::Status CheckTlsClientFiles(const TlsClientOptions& options) {
  return NewContext(options).status();
}

absl::StatusOr<std::unique_ptr<TlsRelay>> TlsRelay::Connect(const TlsClientOptions& options) {
  std::unique_ptr<TlsRelay> r(new TlsRelay());
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    return absl::UnavailableError(absl::StrCat("redis TLS: socketpair: ", std::strerror(errno)));
  }
  r->client_ = pair[0];
  r->local_ = pair[1];
  r->stop_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (r->stop_ < 0 || fcntl(r->local_, F_SETFL, fcntl(r->local_, F_GETFL) | O_NONBLOCK) != 0) {
    return absl::UnavailableError(absl::StrCat("redis TLS: ", std::strerror(errno)));
  }
  // The handshake runs on the relay's thread too: SIGPIPE is blocked there.
  std::promise<absl::Status> ready;
  std::future<absl::Status> result = ready.get_future();
  TlsRelay* self = r.get();
  r->thread_ = std::thread([self, options, ready = std::move(ready)]() mutable {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
    const absl::Status s = self->Handshake(options);
    const bool ok = s.ok();
    ready.set_value(s);
    if (ok) self->Pump();
    // hiredis reads EOF from here on; its writes still land (no SIGPIPE).
    shutdown(self->local_, SHUT_WR);
  });
  absl::Status s = result.get();
  if (!s.ok()) return s;  // ~TlsRelay joins the finished thread
  return r;
}

absl::Status TlsRelay::Handshake(const TlsClientOptions& o) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(o.connect_timeout_ms);
  tls_ = std::make_unique<Tls>();
  absl::StatusOr<Ctx> ctx = NewContext(o);
  if (!ctx.ok()) return absl::UnavailableError(absl::StrCat("redis TLS: ", ctx.status().message()));
  tls_->ctx = *std::move(ctx);
  std::string error;
  tcp_ = TcpConnect(o.host, o.port, deadline, &error);
  if (tcp_ < 0) return absl::UnavailableError("redis TLS: " + error);
  SSL* ssl = tls_->ssl = SSL_new(tls_->ctx.get());
  if (ssl == nullptr || SSL_set_fd(ssl, tcp_) != 1) {
    return absl::InternalError("redis TLS: SSL_new: " + SslErrors());
  }
  SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (IsIpLiteral(o.host)) {
    if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), o.host.c_str()) != 1) {
      return absl::InternalError("redis TLS: bad IP " + o.host);
    }
  } else if (SSL_set_tlsext_host_name(ssl, o.host.c_str()) != 1 ||
             SSL_set1_host(ssl, o.host.c_str()) != 1) {
    return absl::InternalError("redis TLS: bad host name " + o.host);
  }
  for (;;) {
    const int rc = SSL_connect(ssl);
    if (rc == 1) return absl::OkStatus();
    if (const short wait = SslWaitEvents(ssl, rc); wait != 0) {
      if (!WaitFor(tcp_, wait, deadline)) {
        return absl::DeadlineExceededError("redis TLS: handshake timed out");
      }
      continue;
    }
    const long verify = SSL_get_verify_result(ssl);
    return absl::UnavailableError(absl::StrCat(
        "redis TLS: handshake with ", o.host, ":", o.port,
        " failed: ", verify != X509_V_OK ? X509_verify_cert_error_string(verify) : SslErrors()));
  }
}

void TlsRelay::Pump() {
  constexpr size_t kMaxBuffered = 256 << 10;
  SSL* ssl = tls_->ssl;
  std::string up, down;  // up: hiredis -> Redis, down: Redis -> hiredis
  char buf[16384];
  bool local_eof = false;
  for (;;) {
    short tcp_events = 0;
    for (bool progress = true; progress;) {
      progress = false;
      tcp_events = 0;
      if (!local_eof && up.size() < kMaxBuffered) {
        const ssize_t n = recv(local_, buf, sizeof buf, 0);
        if (n > 0) {
          up.append(buf, static_cast<size_t>(n));
          progress = true;
        } else if (n == 0) {
          local_eof = true;  // redisFree
        } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          return;
        }
      }
      if (!up.empty()) {
        const int n =
            SSL_write(ssl, up.data(), static_cast<int>(std::min<size_t>(up.size(), INT_MAX)));
        if (n > 0) {
          up.erase(0, static_cast<size_t>(n));
          progress = true;
        } else if (const short wait = SslWaitEvents(ssl, n); wait != 0) {
          tcp_events |= wait;
        } else {
          return;  // the server or the network failed
        }
      }
      if (down.size() < kMaxBuffered) {
        const int n = SSL_read(ssl, buf, sizeof buf);
        if (n > 0) {
          down.append(buf, static_cast<size_t>(n));
          progress = true;
        } else if (const short wait = SslWaitEvents(ssl, n); wait != 0) {
          tcp_events |= wait;
        } else {
          return;  // closed (close_notify or not) or broken
        }
      }
      if (!down.empty()) {
        const ssize_t n = send(local_, down.data(), down.size(), MSG_NOSIGNAL);
        if (n > 0) {
          down.erase(0, static_cast<size_t>(n));
          progress = true;
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          return;  // hiredis is gone
        }
      }
    }
    if (local_eof && up.empty()) {
      SSL_shutdown(ssl);  // best effort close_notify
      return;
    }
    pollfd p[3] = {{stop_, POLLIN, 0},
                   {local_,
                    static_cast<short>((!local_eof && up.size() < kMaxBuffered ? POLLIN : 0) |
                                       (down.empty() ? 0 : POLLOUT)),
                    0},
                   {tcp_, tcp_events, 0}};
    if (poll(p, 3, -1) < 0 && errno != EINTR) return;
    if (p[0].revents != 0) return;
  }
}

int TlsRelay::ReleaseClientFd() {
  const int fd = client_;
  client_ = -1;
  return fd;
}

TlsRelay::~TlsRelay() {
  if (thread_.joinable()) {
    if (stop_ >= 0) {
      const uint64_t one = 1;
      (void)!write(stop_, &one, sizeof one);
    }
    thread_.join();
  }
  tls_.reset();
  for (int fd : {tcp_, local_, client_, stop_}) {
    if (fd >= 0) close(fd);
  }
}

}  // namespace ced::services
