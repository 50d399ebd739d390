// Sticky placement of sessions (GenerateRequest.session_id): where each
// session's last turn went. A hint only: an unknown or reused id just routes
// like a request without one, and never decides what cached data is reused.
// Pure C++ (no gRPC): the cluster simulator uses it too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace ced::router {

struct SessionPlacement {
  std::string decode_id;
  std::string prefill_id;  // the worker that prefilled (the decode worker when local)
  int64_t prompt_tokens = 0;
  // What that turn added to the workers' pending work (PendingWork).
  int64_t prefill_work = 0;
  int64_t kv_blocks = 0;
  absl::Time last_used;
};

// Not thread-safe: the owner serializes calls (the policy does, under its
// selection lock). Memory: at most max_sessions entries, kept in two
// generations (an approximate LRU); entries older than ttl are not returned.
class SessionTable {
 public:
  struct Options {
    int64_t max_sessions = int64_t{1} << 16;
    absl::Duration ttl = absl::Minutes(30);
  };

  explicit SessionTable(const Options& options) : options_(options) {}

  // The session's last placement, if known and fresher than ttl.
  std::optional<SessionPlacement> Find(const std::string& session_id, absl::Time now) const;
  // Records (replaces) the session's placement.
  void Record(const std::string& session_id, const SessionPlacement& placement);

  int64_t size() const { return static_cast<int64_t>(current_.size() + previous_.size()); }

 private:
  const Options options_;
  absl::flat_hash_map<std::string, SessionPlacement> current_, previous_;
};

}  // namespace ced::router
