#include "bench/loadgen/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "bench/common/stats.h"

namespace ced::loadgen {

LatencySummary Summarize(const std::vector<double>& values_ms) {
  LatencySummary s;
  s.count = static_cast<int64_t>(values_ms.size());
  if (values_ms.empty()) return s;
  s.mean = std::accumulate(values_ms.begin(), values_ms.end(), 0.0) / values_ms.size();
  s.p50 = bench::Percentile(values_ms, 50);
  s.p90 = bench::Percentile(values_ms, 90);
  s.p99 = bench::Percentile(values_ms, 99);
  s.max = *std::max_element(values_ms.begin(), values_ms.end());
  return s;
}

double TtftMs(const RequestRecord& r) { return (r.first_token_s - r.sent_s) * 1e3; }

double E2eMs(const RequestRecord& r) { return (r.end_s - r.sent_s) * 1e3; }

bool TpotMs(const RequestRecord& r, double* tpot_ms) {
  if (r.output_tokens < 2 || r.first_token_s < 0) return false;
  *tpot_ms = (E2eMs(r) - TtftMs(r)) / static_cast<double>(r.output_tokens - 1);
  return true;
}

bool MeetsSlo(const RequestRecord& r, const Slo& slo) {
  if (!r.ok() || r.first_token_s < 0) return false;
  if (slo.ttft_ms > 0 && TtftMs(r) > slo.ttft_ms) return false;
  double tpot = 0;
  if (slo.tpot_ms > 0 && TpotMs(r, &tpot) && tpot > slo.tpot_ms) return false;
  return true;
}

RunReport ComputeReport(const std::vector<RequestRecord>& records, const Slo& slo,
                        double duration_s) {
  RunReport rep;
  rep.slo = slo;
  std::vector<double> ttft, tpot, e2e, queue, prefill, transfer, server_ttft, lag;
  std::map<std::string, int64_t> first_error_index;  // records come in the order they ended
  double last_end = 0;
  for (const RequestRecord& r : records) {
    ++rep.issued;
    rep.output_tokens += r.output_tokens;
    last_end = std::max(last_end, r.end_s);
    if (r.planned_s >= 0) lag.push_back((r.sent_s - r.planned_s) * 1e3);
    if (!r.ok()) {
      ++rep.errors[r.outcome];
      auto [first, added] = first_error_index.emplace(r.outcome, r.index);
      if (added || r.index < first->second) {
        first->second = r.index;
        rep.first_errors[r.outcome] = r.error_message;
      }
      continue;
    }
    ++rep.succeeded;
    rep.prompt_tokens += r.prompt_tokens;
    if (r.first_token_s >= 0) ttft.push_back(TtftMs(r));
    e2e.push_back(E2eMs(r));
    double t = 0;
    if (TpotMs(r, &t)) tpot.push_back(t);
    if (MeetsSlo(r, slo)) ++rep.slo_met;
    if (r.server_ttft_ms >= 0) {
      queue.push_back(r.server_queue_ms);
      prefill.push_back(r.server_prefill_ms);
      transfer.push_back(r.server_transfer_ms);
      server_ttft.push_back(r.server_ttft_ms);
    }
    if (r.replay_on_decode) ++rep.replays_on_decode;
  }
  rep.failed = rep.issued - rep.succeeded;
  rep.duration_s = duration_s > 0 ? duration_s : last_end;
  if (rep.duration_s > 0) {
    rep.request_throughput = rep.succeeded / rep.duration_s;
    rep.output_throughput = rep.output_tokens / rep.duration_s;
    rep.goodput = rep.slo_met / rep.duration_s;
  }
  if (rep.issued > 0) rep.slo_attainment = static_cast<double>(rep.slo_met) / rep.issued;
  rep.ttft = Summarize(ttft);
  rep.tpot = Summarize(tpot);
  rep.e2e = Summarize(e2e);
  rep.server_queue = Summarize(queue);
  rep.server_prefill = Summarize(prefill);
  rep.server_transfer = Summarize(transfer);
  rep.server_ttft = Summarize(server_ttft);
  rep.send_lag = Summarize(lag);
  return rep;
}

void NoteFirstError(const RequestRecord& r, std::set<std::string>* seen) {
  if (r.ok() || !seen->insert(r.outcome).second) return;
  std::fprintf(stderr,
               "loadgen: request %lld failed: %s%s%s (the first %s; the report counts them)\n",
               static_cast<long long>(r.index), r.outcome.c_str(),
               r.error_message.empty() ? "" : ": ", r.error_message.c_str(), r.outcome.c_str());
}

std::string ErrorsLine(const std::map<std::string, int64_t>& errors,
                       const std::map<std::string, std::string>& first_errors) {
  std::string out;
  for (const auto& [code, n] : errors) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", code, " ", n);
    const auto first = first_errors.find(code);
    if (first != first_errors.end() && !first->second.empty()) {
      absl::StrAppend(&out, " (first: \"", first->second, "\")");
    }
  }
  return out;
}

}  // namespace ced::loadgen
