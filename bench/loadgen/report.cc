#include "bench/loadgen/report.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ced::loadgen {
namespace {

using nlohmann::json;

json LatencyJson(const LatencySummary& s) {
  return {{"count", s.count}, {"mean", s.mean}, {"p50", s.p50},
          {"p90", s.p90},     {"p99", s.p99},   {"max", s.max}};
}

json RecordJson(const RequestRecord& r) {
  json j = {{"index", r.index},           {"prompt_tokens", r.prompt_tokens},
            {"max_tokens", r.max_tokens}, {"output_tokens", r.output_tokens},
            {"outcome", r.outcome},       {"sent_s", r.sent_s},
            {"e2e_ms", E2eMs(r)}};
  if (r.first_token_s >= 0) j["ttft_ms"] = TtftMs(r);
  if (r.server_ttft_ms >= 0) {
    j["server_ms"] = {{"queue", r.server_queue_ms},
                      {"prefill", r.server_prefill_ms},
                      {"transfer", r.server_transfer_ms},
                      {"ttft", r.server_ttft_ms}};
  }
  double tpot = 0;
  if (TpotMs(r, &tpot)) j["tpot_ms"] = tpot;
  return j;
}

json RunJson(const RunSummary& run, bool include_records) {
  const RunReport& r = run.report;
  json j = {
      {"label", run.label},
      {"target", run.target},
      {"model",
       {{"name", run.model_name},
        {"num_layers", run.num_layers},
        {"num_encoder_layers", run.num_encoder_layers},
        {"decoder_only", run.decoder_only}}},
      {"rate", run.rate},
      {"concurrency", run.concurrency},
      {"issued", r.issued},
      {"succeeded", r.succeeded},
      {"failed", r.failed},
      {"errors", r.errors},
      {"first_errors", r.first_errors},
      {"prompt_tokens", r.prompt_tokens},
      {"output_tokens", r.output_tokens},
      {"duration_s", r.duration_s},
      {"request_throughput", r.request_throughput},
      {"output_throughput", r.output_throughput},
      {"ttft_ms", LatencyJson(r.ttft)},
      {"tpot_ms", LatencyJson(r.tpot)},
      {"e2e_ms", LatencyJson(r.e2e)},
      {"server_ms",
       {{"queue", LatencyJson(r.server_queue)},
        {"prefill", LatencyJson(r.server_prefill)},
        {"transfer", LatencyJson(r.server_transfer)},
        {"ttft", LatencyJson(r.server_ttft)}}},
      {"replays_on_decode", r.replays_on_decode},
      {"send_lag_ms", LatencyJson(r.send_lag)},
      {"slo_met", r.slo_met},
      {"slo_attainment", r.slo_attainment},
      {"goodput", r.goodput},
  };
  if (include_records) {
    json records = json::array();
    for (const RequestRecord& rec : run.records) records.push_back(RecordJson(rec));
    j["requests"] = std::move(records);
  }
  return j;
}

std::string Load(const RunSummary& run) {
  if (run.concurrency > 0) return absl::StrCat("c=", run.concurrency);
  return absl::StrFormat("%g/s", run.rate);
}

std::string Triple(const LatencySummary& s) {
  if (s.count == 0) return "–";
  return absl::StrFormat("%.0f / %.0f / %.0f", s.p50, s.p90, s.p99);
}

std::string TripleFine(const LatencySummary& s) {
  if (s.count == 0) return "–";
  return absl::StrFormat("%.1f / %.1f / %.1f", s.p50, s.p90, s.p99);
}

}  // namespace

std::string ModelLabel(const std::string& model_name, int num_layers, int num_encoder_layers,
                       bool decoder_only) {
  if (model_name.empty()) return "?";
  if (num_layers <= 0) return model_name;
  if (decoder_only) return absl::StrCat(model_name, " (decoder-only ", num_layers, ")");
  return absl::StrCat(model_name, " (CED ", num_encoder_layers, "+",
                      num_layers - num_encoder_layers, ")");
}

std::string ReportJson(const ReportContext& c, const std::vector<RunSummary>& runs) {
  const WorkloadOptions& w = c.workload;
  json doc;
  doc["workload"] = {
      {"input_mean", w.input_mean},      {"input_cv", w.input_cv}, {"output_mean", w.output_mean},
      {"output_cv", w.output_cv},        {"seed", w.seed},         {"prompt_file", c.prompt_file},
      {"prompt_lines", w.prompts.size()}};
  doc["run"] = {
      {"duration_s", c.run.duration_s},   {"max_requests", c.run.max_requests},
      {"concurrency", c.run.concurrency}, {"request_timeout_s", c.run.request_timeout_s},
      {"temperature", c.run.temperature}, {"replay_on", ced::v1::ReplayOn_Name(c.run.replay_on)}};
  const Slo slo = runs.empty() ? Slo{} : runs.front().report.slo;
  doc["slo"] = {{"ttft_ms", slo.ttft_ms}, {"tpot_ms", slo.tpot_ms}};
  doc["runs"] = json::array();
  for (const RunSummary& run : runs) doc["runs"].push_back(RunJson(run, c.include_records));
  return doc.dump(2) + "\n";
}

std::string ReportMarkdown(const std::vector<RunSummary>& runs) {
  std::string out =
      "| target | model | load | issued | ok | err | req/s | out tok/s "
      "| TTFT ms p50 / p90 / p99 | TPOT ms p50 / p90 / p99 | E2E ms p50 / p90 / p99 "
      "| SLO met | goodput req/s |\n"
      "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const RunSummary& run : runs) {
    const RunReport& r = run.report;
    absl::StrAppend(
        &out,
        absl::StrFormat(
            "| %s | %s | %s | %d | %d | %d | %.2f | %.1f | %s | %s | %s | %.1f%% | %.2f |\n",
            run.label,
            ModelLabel(run.model_name, run.num_layers, run.num_encoder_layers, run.decoder_only),
            Load(run), r.issued, r.succeeded, r.failed, r.request_throughput, r.output_throughput,
            Triple(r.ttft), TripleFine(r.tpot), Triple(r.e2e), r.slo_attainment * 100, r.goodput));
  }
  absl::StrAppend(&out,
                  "\nWhere TTFT goes (means, ms; gateway timings of the succeeded requests; "
                  "– where the API carries none, as OpenAI's does not):\n\n"
                  "| target | load | client TTFT | gateway TTFT | queue | prefill | transfer "
                  "| replay on decode |\n|---|---|---:|---:|---:|---:|---:|---:|\n");
  for (const RunSummary& run : runs) {
    const RunReport& r = run.report;
    auto mean = [](const LatencySummary& s) {
      return s.count == 0 ? std::string("–") : absl::StrFormat("%.1f", s.mean);
    };
    absl::StrAppend(
        &out, absl::StrFormat("| %s | %s | %s | %s | %s | %s | %s | %s |\n", run.label, Load(run),
                              mean(r.ttft), mean(r.server_ttft), mean(r.server_queue),
                              mean(r.server_prefill), mean(r.server_transfer),
                              r.server_ttft.count == 0
                                  ? std::string("–")
                                  : absl::StrCat(r.replays_on_decode, "/", r.succeeded)));
  }
  for (const RunSummary& run : runs) {
    if (run.report.errors.empty()) continue;
    absl::StrAppend(&out, "\nErrors, ", run.label, " at ", Load(run), ": ",
                    ErrorsLine(run.report.errors, run.report.first_errors), "\n");
  }
  if (!runs.empty()) {
    const Slo& slo = runs.front().report.slo;
    absl::StrAppend(&out, "\nSLO: TTFT ",
                    slo.ttft_ms > 0 ? absl::StrFormat("<= %g ms", slo.ttft_ms) : "unbounded",
                    ", TPOT ",
                    slo.tpot_ms > 0 ? absl::StrFormat("<= %g ms", slo.tpot_ms) : "unbounded",
                    " (both; failed requests count as misses).\n");
  }
  return out;
}

}  // namespace ced::loadgen
