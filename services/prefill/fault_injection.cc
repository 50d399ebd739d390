#include "services/prefill/fault_injection.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ced::services {

namespace {

absl::StatusOr<PrefillFaultRule> ParseRule(absl::string_view spec) {
  PrefillFaultRule f;
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    const size_t eq = item.find('=');
    const std::string key(item.substr(0, eq));
    const std::string value(eq == absl::string_view::npos ? "" : item.substr(eq + 1));
    auto millis = [&](int* out) -> absl::Status {
      if (!absl::SimpleAtoi(value, out) || *out < 0 || *out > 600000) {
        return absl::InvalidArgumentError(
            absl::StrCat("fault injection: ", key, " must be 0..600000 ms, got '", value, "'"));
      }
      return absl::OkStatus();
    };
    absl::Status s;
    if (key == "match") {
      f.match = value;
    } else if (key == "chunk_delay_ms") {
      s = millis(&f.chunk_delay_ms);
    } else if (key == "send_delay_ms") {
      s = millis(&f.send_delay_ms);
    } else if (key == "stall_after_chunks") {
      if (!absl::SimpleAtoi(value, &f.stall_after_chunks) || f.stall_after_chunks < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("fault injection: stall_after_chunks must be >= 1, got '", value, "'"));
      }
    } else if (key == "corrupt_checksum" && value.empty()) {
      f.corrupt_checksum = true;
    } else if (key == "truncate" && value.empty()) {
      f.truncate = true;
    } else if (key == "ignore_cancel" && value.empty()) {
      f.ignore_cancel = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("fault injection: unknown item '", item,
                                                     "' (match=, chunk_delay_ms=, send_delay_ms=, "
                                                     "corrupt_checksum, truncate, ignore_cancel, "
                                                     "stall_after_chunks=)"));
    }
    if (!s.ok()) return s;
  }
  return f;
}

}  // namespace

absl::StatusOr<PrefillFaults> ParsePrefillFaults(const std::string& spec) {
  PrefillFaults faults;
  for (absl::string_view rule : absl::StrSplit(spec, ';', absl::SkipEmpty())) {
    auto r = ParseRule(rule);
    if (!r.ok()) return r.status();
    faults.rules.push_back(*std::move(r));
  }
  return faults;
}

}  // namespace ced::services
