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

class LocalRedis {
 public:
  // `max_memory_mb`: Redis's maxmemory; `password`: requirepass (empty:
  // none). UNAVAILABLE when redis-server is not installed or does not
  // answer within 10 s.
  static absl::StatusOr<std::unique_ptr<LocalRedis>> Start(int max_memory_mb,
                                                          const std::string& password = "");
  ~LocalRedis();
  LocalRedis(const LocalRedis&) = delete;
  LocalRedis& operator=(const LocalRedis&) = delete;

  // redis://127.0.0.1:PORT
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  pid_t pid() const;  // -1 once stopped
  void Stop();

 private:
  LocalRedis() = default;
  std::unique_ptr<Subprocess> proc_;
  int port_ = 0;
  std::string dir_;
};

// The path of redis-server on $PATH ("" when absent).
std::string FindRedisServer();

}  // namespace ced::services
