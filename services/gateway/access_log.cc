#include "services/gateway/access_log.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace ced::gateway {

absl::StatusOr<std::unique_ptr<AccessLog>> AccessLog::Open(const std::string& target) {
  if (target == "-") return std::unique_ptr<AccessLog>(new AccessLog(stderr, false));
  std::FILE* f = std::fopen(target.c_str(), "a");
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--access-log: cannot open '", target,
                                                   "' for appending: ", std::strerror(errno)));
  }
  return std::unique_ptr<AccessLog>(new AccessLog(f, true));
}

AccessLog::~AccessLog() {
  if (owned_) std::fclose(file_);
}

namespace {
double Ms2(double ms) { return std::round(ms * 100) / 100; }  // 0.01 ms
}  // namespace

std::string AccessLog::Line(const AccessRecord& r) {
  nlohmann::ordered_json j;
  j["time"] = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", r.received, absl::UTCTimeZone());
  j["api"] = r.api;
  if (!r.client.empty()) j["client"] = r.client;
  j["request_id"] = r.request_id;
  if (!r.session_id.empty()) j["session_id"] = r.session_id;
  j["outcome"] = r.outcome;
  j["status"] = r.status;
  if (!r.error.empty()) j["error"] = r.error;
  if (r.prompt_tokens >= 0) j["prompt_tokens"] = r.prompt_tokens;
  j["cached_prompt_tokens"] = r.cached_prompt_tokens;
  j["completion_tokens"] = r.completion_tokens;
  j["ttft_ms"] = r.ttft_ms >= 0 ? nlohmann::ordered_json(Ms2(r.ttft_ms)) : nlohmann::ordered_json();
  j["total_ms"] = Ms2(r.total_ms);
  if (!r.decode_worker.empty()) {
    j["prefill_worker"] = r.prefill_worker;
    j["decode_worker"] = r.decode_worker;
  }
  if (r.migrations > 0) j["migrations"] = r.migrations;
  if (r.kv_waits > 0) j["kv_waits"] = r.kv_waits;
  if (r.seed.has_value()) j["seed"] = *r.seed;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void AccessLog::Write(const AccessRecord& record) {
  const std::string line = Line(record) + "\n";
  absl::MutexLock lock(&mu_);
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

}  // namespace ced::gateway
