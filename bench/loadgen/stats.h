// What one load-generator run measured, and the arithmetic that turns
// per-request records into a report: percentiles, SLO attainment, goodput,
// errors by status. Pure functions over values; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace ced::loadgen {

// One request as the client saw it. Times are seconds since the start of the
// run on a monotonic clock.
struct RequestRecord {
  int64_t index = 0;
  int64_t prompt_tokens = 0;  // as planned (text prompts: bytes)
  int64_t max_tokens = 0;     // as requested
  double planned_s = -1;      // its Poisson arrival time; < 0 in closed loop
  double sent_s = 0;          // the call was started
  double first_token_s = -1;  // the first message with a token arrived; < 0 if none
  double end_s = 0;           // the call finished (any status)
  int64_t output_tokens = 0;  // tokens received
  // "OK" or the gRPC status code name (e.g. "DEADLINE_EXCEEDED"); for an OK
  // stream that ended with finish_reason ERROR or CANCELLED, that reason
  // ("FINISH_ERROR", "FINISH_CANCELLED").
  std::string outcome = "OK";
  std::string error_message;  // the failed call's message (its status, an error event)
  // The gateway's own timings from the final message (ced.v1.Timings),
  // milliseconds; < 0 when the stream ended without them.
  double server_queue_ms = -1, server_prefill_ms = -1, server_transfer_ms = -1;
  double server_ttft_ms = -1;
  bool replay_on_decode = false;  // placement: the replay ran on the decode worker
  bool ok() const { return outcome == "OK"; }
};

// Both limits in milliseconds; 0 turns a limit off.
struct Slo {
  double ttft_ms = 0;
  double tpot_ms = 0;
};

struct LatencySummary {
  int64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // milliseconds
};
LatencySummary Summarize(const std::vector<double>& values_ms);

// Per-request derived latencies, milliseconds. TTFT: sent -> first token;
// E2E: sent -> end; TPOT: (E2E − TTFT) / (output tokens − 1), undefined
// (returns false) with fewer than two tokens or without a first token.
double TtftMs(const RequestRecord& r);
double E2eMs(const RequestRecord& r);
bool TpotMs(const RequestRecord& r, double* tpot_ms);

// A request meets the SLO when it succeeded, TTFT <= slo.ttft_ms and TPOT <=
// slo.tpot_ms (a limit of 0 is not checked; an undefined TPOT meets it).
bool MeetsSlo(const RequestRecord& r, const Slo& slo);

// The first time a failed request's outcome is seen (`seen` remembers them),
// prints it and its message to stderr, so a run that fails says why while
// it runs rather than only as a count at the end.
void NoteFirstError(const RequestRecord& r, std::set<std::string>* seen);

// "INVALID_ARGUMENT 96 (first: \"prompt_token_ids: ...\"), ..." for a report.
std::string ErrorsLine(const std::map<std::string, int64_t>& errors,
                       const std::map<std::string, std::string>& first_errors);

struct RunReport {
  int64_t issued = 0;                     // requests started
  int64_t succeeded = 0;                  // outcome OK
  int64_t failed = 0;                     // issued - succeeded
  std::map<std::string, int64_t> errors;  // outcome -> count, OK excluded
  // outcome -> the message of the first request (by index) that ended so.
  std::map<std::string, std::string> first_errors;
  int64_t prompt_tokens = 0;              // over succeeded requests
  int64_t output_tokens = 0;              // over all requests (tokens received)
  double duration_s = 0;                  // run start -> last request end
  double request_throughput = 0;          // succeeded / duration_s
  double output_throughput = 0;           // output_tokens / duration_s
  // Over succeeded requests; TPOT over those with >= 2 tokens.
  LatencySummary ttft, tpot, e2e;
  // The gateway's view of the succeeded requests (those that carried
  // timings): where TTFT goes. queue: receipt -> prefill start.
  LatencySummary server_queue, server_prefill, server_transfer, server_ttft;
  int64_t replays_on_decode = 0;  // succeeded requests whose replay ran on decode
  // Open loop: how late the client started calls (sent − planned), over all
  // issued requests; a large p99 means the client did not keep up.
  LatencySummary send_lag;
  Slo slo;
  int64_t slo_met = 0;        // requests meeting both SLOs
  double slo_attainment = 0;  // slo_met / issued (failures count as misses)
  double goodput = 0;         // slo_met / duration_s, requests per second
};

// The report of one run. `duration_s` <= 0 means: the latest end_s.
RunReport ComputeReport(const std::vector<RequestRecord>& records, const Slo& slo,
                        double duration_s = 0);

}  // namespace ced::loadgen
