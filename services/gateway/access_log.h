// The gateway's access log (--access-log): one JSON object per line for every
// Generate request it answered, whichever API it came by, as it ended
// (refused, failed, cancelled or finished), with what an operator asks of
// it: who, how long, how many tokens, where it ran.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ced::gateway {

struct AccessRecord {
  absl::Time received;     // when the gateway got the request
  std::string api;         // "grpc" or "openai"
  std::string client;      // the caller's address, host:port
  std::string request_id;  // empty when it was refused before it had one
  std::string session_id;  // the client's routing hint, if any
  std::string outcome;     // the ced_gateway_requests_total outcome label
  std::string status;      // "OK" or the gRPC status code's name
  std::string error;       // the error message (empty when OK)
  int prompt_tokens = -1;  // -1: not known (refused before tokenizing)
  int cached_prompt_tokens = 0;
  int completion_tokens = 0;
  double ttft_ms = -1;         // -1: no token
  double total_ms = 0;         // receipt to the end
  std::string prefill_worker;  // "local" when the decode worker prefilled
  std::string decode_worker;
  int migrations = 0;
  int kv_waits = 0;  // placements again after waiting for K/V room
  // The sampling seed of a request that samples (temperature > 0), so that
  // an answer can be reproduced (the OpenAI API draws one when the client
  // gives none).
  std::optional<uint64_t> seed;
};

// Thread-safe; every line is written whole and flushed.
class AccessLog {
 public:
  // `target`: "-" for stderr, else a file opened for appending (created when
  // missing). InvalidArgument naming the flag when it cannot be opened.
  static absl::StatusOr<std::unique_ptr<AccessLog>> Open(const std::string& target);
  ~AccessLog();
  void Write(const AccessRecord& record);
  // The JSON line of `record` (no newline).
  static std::string Line(const AccessRecord& record);

 private:
  AccessLog(std::FILE* file, bool owned) : file_(file), owned_(owned) {}
  absl::Mutex mu_;
  std::FILE* const file_;
  const bool owned_;
};

}  // namespace ced::gateway
