// A private redis-server for `ced cluster --kv-store local` / `ced up` and
// for tests: on a
// free loopback port, in a temporary directory (no persistence, LRU past
// --maxmemory), stopped (SIGTERM, then SIGKILL) and its directory removed on
// Stop() or destruction. Not thread-safe.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ced::services {

class Subprocess;

// TLS for a LocalRedis (tests of rediss://): PEM files; the plain port is off.
struct LocalRedisTls {
  std::string cert_file, key_file, ca_file;  // redis-server needs a CA file
  bool auth_clients = false;  // require a client certificate (mutual TLS)
};

class LocalRedis {
 public:
  // `max_memory_mb`: Redis's maxmemory; `password`: requirepass (empty:
  // none); `tls`: serve TLS only (null: plain). UNAVAILABLE when
  // redis-server is not installed or does not answer within 10 s.
  static absl::StatusOr<std::unique_ptr<LocalRedis>> Start(int max_memory_mb,
                                                          const std::string& password = "",
                                                          const LocalRedisTls* tls = nullptr);
  ~LocalRedis();
  LocalRedis(const LocalRedis&) = delete;
  LocalRedis& operator=(const LocalRedis&) = delete;

  // redis://127.0.0.1:PORT (rediss:// with TLS)
  std::string url() const {
    return (tls_ ? "rediss" : "redis") + std::string("://127.0.0.1:") + std::to_string(port_);
  }
  int port() const { return port_; }
  pid_t pid() const;  // -1 once stopped
  // Whether redis-server still runs (reaps it when it ended).
  bool Running();
  // Starts redis-server again on the same port with the same options (empty:
  // what it held is gone); stops the old one first if it still runs.
  absl::Status Restart();
  void Stop();

 private:
  LocalRedis() = default;
  // redis-server on `port`, answering within 10 s; ABORTED when it did not
  // (e.g. the port was taken meanwhile).
  absl::Status Launch(int port);
  std::unique_ptr<Subprocess> proc_;
  std::string binary_;
  int max_memory_mb_ = 0;
  std::string password_;
  int port_ = 0;
  bool tls_ = false;
  LocalRedisTls tls_options_;
  std::string dir_;
};

// The path of redis-server on $PATH ("" when absent).
std::string FindRedisServer();

}  // namespace ced::services
