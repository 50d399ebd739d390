// TLS for the Redis tier with a hiredis that has none (0.14, Debian 12):
// a TlsRelay holds one OpenSSL client connection to Redis and one end of a
// socketpair; hiredis gets the other end (redisConnectFd) and speaks plain
// RESP on it, while the relay's thread pumps bytes between the two.
//
// Verification: the server's chain against `ca_file` (or the system's trust
// store), and its name against `host` (a DNS name: SNI + SAN check; an IP
// literal: an IP SAN). Optional client certificate for mutual TLS.
//
// Lifetime: the relay's thread ends when hiredis closes its end (redisFree),
// when the server side fails (then the socketpair end is shut for writing, so
// hiredis reads EOF: an error, never SIGPIPE), or when the relay is
// destroyed; the destructor joins it. SIGPIPE is blocked in that thread.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ced::services {

struct TlsClientOptions {
  std::string host;
  int port = 0;
  std::string ca_file;           // PEM CA bundle; empty: the system's trust store
  std::string cert_file;         // PEM client certificate chain (mutual TLS); with key_file
  std::string key_file;          // PEM private key of cert_file
  int connect_timeout_ms = 200;  // TCP connect + handshake
};

// Reads and parses the files (start-up check): INVALID_ARGUMENT naming the
// flag (--kv-store-tls-ca, -cert, -key) when one cannot be read, holds no
// PEM certificate / key, or the key does not match the certificate.
absl::Status CheckTlsClientFiles(const TlsClientOptions& options);

class TlsRelay {
 public:
  // Connects and completes the handshake within connect_timeout_ms (files
  // are read again, so a rotated Secret is picked up), then starts the pump.
  // UNAVAILABLE / DEADLINE_EXCEEDED with OpenSSL's reason on failure.
  // Blocks the caller for at most the timeout (plus name resolution).
  static absl::StatusOr<std::unique_ptr<TlsRelay>> Connect(const TlsClientOptions& options);
  ~TlsRelay();
  TlsRelay(const TlsRelay&) = delete;
  TlsRelay& operator=(const TlsRelay&) = delete;

  // The plain end for hiredis; the caller owns it from now (-1 after the
  // first call).
  int ReleaseClientFd();

 private:
  struct Tls;
  TlsRelay() = default;
  absl::Status Handshake(const TlsClientOptions& options);
  void Pump();

  std::unique_ptr<Tls> tls_;
  int tcp_ = -1;
  int local_ = -1;   // the relay's end of the socketpair
  int client_ = -1;  // hiredis's end until released
  int stop_ = -1;    // eventfd: the destructor's wake-up
  std::thread thread_;
};

}  // namespace ced::services
