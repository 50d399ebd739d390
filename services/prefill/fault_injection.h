// Test-only fault injection for the prefill worker's K/V transfers, so that
// the fault tests (tests/fault/) can make a transfer slow, corrupt, short or
// deaf to cancellation on demand. Off unless a spec is given (the hidden
// `--fault-injection-for-testing` flag of `ced serve --role=prefill`).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ced::services {

// One rule: what goes wrong for the requests it matches.
struct PrefillFaultRule {
  // Applies to requests whose id contains this ("" = every request).
  std::string match;
  int chunk_delay_ms = 0;         // compute thread: sleep after each prefill chunk
  int send_delay_ms = 0;          // sender thread: sleep before each K/V message
  bool corrupt_checksum = false;  // K/V messages carry a wrong payload checksum
  bool truncate = false;          // the last global K/V range is never sent; the tail is
  bool ignore_cancel = false;     // keep computing and sending after a cancel (late K/V)
  // > 0: after this many chunks' K/V, the compute stops making progress (no
  // chunk, no progress notice) until the request is cancelled.
  int stall_after_chunks = 0;
};

struct PrefillFaults {
  std::vector<PrefillFaultRule> rules;
  bool any() const { return !rules.empty(); }
  bool any_corrupt() const {
    for (const auto& r : rules) {
      if (r.corrupt_checksum) return true;
    }
    return false;
  }
  // The first rule matching `request_id`, or nullptr.
  const PrefillFaultRule* Find(const std::string& request_id) const {
    for (const auto& r : rules) {
      if (request_id.find(r.match) != std::string::npos) return &r;
    }
    return nullptr;
  }
};

// Parses rules separated by ';', each "key[=value],..." with keys match,
// chunk_delay_ms, send_delay_ms, corrupt_checksum, truncate, ignore_cancel,
// stall_after_chunks;
// "" = no faults. INVALID_ARGUMENT names the offending item.
absl::StatusOr<PrefillFaults> ParsePrefillFaults(const std::string& spec);

}  // namespace ced::services
