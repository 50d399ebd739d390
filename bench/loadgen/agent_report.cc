#include "bench/loadgen/agent_report.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/loadgen/report.h"

namespace ced::loadgen {
namespace {

using nlohmann::json;

json LatencyJson(const LatencySummary& s) {
  return {{"count", s.count}, {"mean", s.mean}, {"p50", s.p50},
          {"p90", s.p90},     {"p99", s.p99},   {"max", s.max}};
}

double Ratio(int64_t a, int64_t b) { return b > 0 ? static_cast<double>(a) / b : 0; }

std::string Model(const AgentRunSummary& run) {
  return ModelLabel(run.model_name, run.num_layers, run.num_encoder_layers, run.decoder_only);
}

std::string Pair(const LatencySummary& s) {
  if (s.count == 0) return "–";
  return absl::StrFormat("%.0f / %.0f", s.p50, s.p90);
}

std::string Bytes(double b) {
  if (b >= 1 << 30) return absl::StrFormat("%.2f GiB", b / (1 << 30));
  if (b >= 1 << 20) return absl::StrFormat("%.1f MiB", b / (1 << 20));
  return absl::StrFormat("%.1f KiB", b / 1024);
}

}  // namespace

AgentReport ComputeAgentReport(const AgentRunResult& result, int64_t kv_bytes_per_token) {
  AgentReport rep;
  std::vector<RequestRecord> requests;
  int max_turn = -1;
  for (const AgentTurnRecord& t : result.turns) {
    requests.push_back(t.request);
    max_turn = std::max(max_turn, t.turn);
  }
  rep.overall = ComputeReport(requests, Slo{}, result.duration_s);
  rep.by_turn.resize(static_cast<size_t>(max_turn + 1));
  std::vector<std::vector<double>> ttft(rep.by_turn.size());
  std::vector<int64_t> timed(rep.by_turn.size(), 0);
  std::vector<double> ttft_later;
  for (const AgentTurnRecord& t : result.turns) {
    AgentTurnStats& s = rep.by_turn[static_cast<size_t>(t.turn)];
    ++s.issued;
    if (!t.request.ok()) continue;
    ++s.ok;
    if (t.request.first_token_s >= 0) {
      ttft[static_cast<size_t>(t.turn)].push_back(TtftMs(t.request));
      if (t.turn >= 1) ttft_later.push_back(TtftMs(t.request));
    }
    if (t.cached_prompt_tokens < 0) ++rep.usage_missing;
    if (t.request.server_ttft_ms >= 0) {
      ++timed[static_cast<size_t>(t.turn)];
      s.server_queue_ms += t.request.server_queue_ms;
      s.server_prefill_ms += t.request.server_prefill_ms;
      s.server_transfer_ms += t.request.server_transfer_ms;
    }
    const int64_t cached = std::max<int64_t>(0, t.cached_prompt_tokens);
    s.prompt_tokens_mean += static_cast<double>(t.request.prompt_tokens);
    s.cached_tokens += cached;
    s.reusable_tokens += t.reusable_tokens;
    if (t.turn >= 1) {
      rep.cached_later += cached;
      rep.reusable_later += t.reusable_tokens;
    }
  }
  for (size_t k = 0; k < rep.by_turn.size(); ++k) {
    AgentTurnStats& s = rep.by_turn[k];
    s.turn = static_cast<int>(k) + 1;
    s.ttft = Summarize(ttft[k]);
    if (s.ok > 0) {
      s.prompt_tokens_mean /= static_cast<double>(s.ok);
      s.cached_tokens_mean = static_cast<double>(s.cached_tokens) / static_cast<double>(s.ok);
      s.reusable_tokens_mean = static_cast<double>(s.reusable_tokens) / static_cast<double>(s.ok);
    }
    s.hit_rate = Ratio(s.cached_tokens, s.reusable_tokens);
    if (timed[k] > 0) {
      s.server_queue_ms /= static_cast<double>(timed[k]);
      s.server_prefill_ms /= static_cast<double>(timed[k]);
      s.server_transfer_ms /= static_cast<double>(timed[k]);
    }
  }
  rep.ttft_later = Summarize(ttft_later);
  rep.hit_rate_later = Ratio(rep.cached_later, rep.reusable_later);
  rep.planned_turns = result.planned_turns;
  rep.sessions = static_cast<int>(result.session_final_tokens.size());
  std::vector<int> ok_turns(static_cast<size_t>(rep.sessions), 0);
  for (const AgentTurnRecord& t : result.turns) {
    if (t.request.ok() && t.session < rep.sessions) ++ok_turns[static_cast<size_t>(t.session)];
  }
  const int planned_per_session =
      rep.sessions > 0 ? static_cast<int>(result.planned_turns / rep.sessions) : 0;
  for (int n : ok_turns) rep.sessions_complete += n == planned_per_session;
  rep.kv_bytes_per_token = kv_bytes_per_token;
  for (int64_t tokens : result.session_final_tokens) {
    const double bytes = static_cast<double>(tokens) * static_cast<double>(kv_bytes_per_token);
    rep.final_tokens_mean += static_cast<double>(tokens);
    rep.bytes_per_session_mean += bytes;
    rep.bytes_per_session_max = std::max(rep.bytes_per_session_max, bytes);
  }
  if (rep.sessions > 0) {
    rep.final_tokens_mean /= rep.sessions;
    rep.bytes_per_session_mean /= rep.sessions;
  }
  rep.session_id_sent = result.session_id_sent;
  return rep;
}

std::string AgentReportJson(const AgentReportContext& c, const std::vector<AgentRunSummary>& runs) {
  const sim::AgentTraceOptions& t = c.trace;
  json doc;
  doc["workload"] = {{"kind", "agent"},
                     {"sessions", t.sessions},
                     {"turns", t.turns},
                     {"first_prompt_tokens", t.first_prompt_tokens},
                     {"tool_result_mean", t.tool_result_mean},
                     {"tool_result_cv", t.tool_result_cv},
                     {"output_tokens", t.output_tokens},
                     {"think_time_ms", t.think_time_s * 1e3},
                     {"stagger_ms", t.stagger_s * 1e3},
                     {"seed", t.seed}};
  doc["run"] = {{"request_timeout_s", c.run.request_timeout_s},
                {"temperature", c.run.temperature},
                {"replay_on", ced::v1::ReplayOn_Name(c.run.replay_on)},
                {"replay_mode", ced::v1::ReplayMode_Name(c.run.replay_mode)},
                {"send_session_id", c.run.send_session_id}};
  doc["runs"] = json::array();
  for (const AgentRunSummary& run : runs) {
    const AgentReport& r = run.report;
    json turns = json::array();
    for (const AgentTurnStats& s : r.by_turn) {
      turns.push_back({{"turn", s.turn},
                       {"issued", s.issued},
                       {"ok", s.ok},
                       {"ttft_ms", LatencyJson(s.ttft)},
                       {"prompt_tokens_mean", s.prompt_tokens_mean},
                       {"cached_tokens_mean", s.cached_tokens_mean},
                       {"reusable_tokens_mean", s.reusable_tokens_mean},
                       {"hit_rate", s.hit_rate},
                       {"server_ms",
                        {{"queue", s.server_queue_ms},
                         {"prefill", s.server_prefill_ms},
                         {"transfer", s.server_transfer_ms}}}});
    }
    json j = {{"label", run.label},
              {"target", run.target},
              {"model",
               {{"name", run.model_name},
                {"num_layers", run.num_layers},
                {"num_encoder_layers", run.num_encoder_layers},
                {"decoder_only", run.decoder_only},
                {"kv_cache_dtype", run.kv_cache_dtype}}},
              {"issued", r.overall.issued},
              {"succeeded", r.overall.succeeded},
              {"failed", r.overall.failed},
              {"errors", r.overall.errors},
              {"first_errors", r.overall.first_errors},
              {"planned_turns", r.planned_turns},
              {"duration_s", r.overall.duration_s},
              {"ttft_ms", LatencyJson(r.overall.ttft)},
              {"ttft_later_turns_ms", LatencyJson(r.ttft_later)},
              {"tpot_ms", LatencyJson(r.overall.tpot)},
              {"cached_tokens_later_turns", r.cached_later},
              {"reusable_tokens_later_turns", r.reusable_later},
              {"hit_rate_later_turns", r.hit_rate_later},
              {"usage_missing", r.usage_missing},
              {"sessions", r.sessions},
              {"sessions_complete", r.sessions_complete},
              {"kv_bytes_per_token", r.kv_bytes_per_token},
              {"final_tokens_per_session_mean", r.final_tokens_mean},
              {"bytes_per_session_mean", r.bytes_per_session_mean},
              {"bytes_per_session_max", r.bytes_per_session_max},
              {"session_id_sent", r.session_id_sent},
              {"flush_workers", run.flush_workers},
              {"turns", std::move(turns)}};
    if (c.include_records) {
      json recs = json::array();
      for (const AgentTurnRecord& t : run.turns) {
        json rec = {{"session", t.session},
                    {"turn", t.turn + 1},
                    {"prompt_tokens", t.request.prompt_tokens},
                    {"cached_prompt_tokens", t.cached_prompt_tokens},
                    {"reusable_tokens", t.reusable_tokens},
                    {"output_tokens", t.request.output_tokens},
                    {"outcome", t.request.outcome},
                    {"sent_s", t.request.sent_s},
                    {"flush_s", t.flush_s}};
        if (t.request.first_token_s >= 0) rec["ttft_ms"] = TtftMs(t.request);
        if (t.request.server_ttft_ms >= 0) {
          rec["server_ms"] = {{"queue", t.request.server_queue_ms},
                              {"prefill", t.request.server_prefill_ms},
                              {"transfer", t.request.server_transfer_ms},
                              {"ttft", t.request.server_ttft_ms}};
        }
        recs.push_back(std::move(rec));
      }
      j["records"] = std::move(recs);
    }
    doc["runs"].push_back(std::move(j));
  }
  return doc.dump(2) + "\n";
}

std::string AgentReportMarkdown(const AgentReportContext& c,
                                const std::vector<AgentRunSummary>& runs) {
  std::string out = absl::StrCat("Agent trace: ", sim::DescribeAgentTrace(c.trace), ".\n\n");
  absl::StrAppend(&out,
                  "| target | model | KV | turns ok | TTFT ms turn 1 p50 / p90 "
                  "| TTFT ms turns >= 2 p50 / p90 | cached / reusable (turns >= 2) | hit rate "
                  "| context / session | bytes at rest / session | session_id |\n"
                  "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
  for (const AgentRunSummary& run : runs) {
    const AgentReport& r = run.report;
    const LatencySummary first = r.by_turn.empty() ? LatencySummary{} : r.by_turn[0].ttft;
    absl::StrAppend(
        &out, absl::StrFormat("| %s | %s | %s | %d/%d | %s | %s | %d / %d | %.1f%% | %.0f | %s | %s |\n",
                              run.label, Model(run), run.kv_cache_dtype, r.overall.succeeded,
                              r.planned_turns, Pair(first), Pair(r.ttft_later), r.cached_later,
                              r.reusable_later, 100 * r.hit_rate_later, r.final_tokens_mean,
                              Bytes(r.bytes_per_session_mean),
                              r.session_id_sent ? "sent" : "not in proto / off"));
  }
  for (const AgentRunSummary& run : runs) {
    absl::StrAppend(&out, "\nPer turn, ", run.label, ":\n\n",
                    "| turn | ok | TTFT ms p50 / p90 | prompt tokens | cached | reusable "
                    "| hit rate | gateway ms: queue / prefill / transfer (means) |\n"
                    "|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const AgentTurnStats& s : run.report.by_turn) {
      absl::StrAppend(&out, absl::StrFormat("| %d | %d/%d | %s | %.0f | %.0f | %.0f | %s | %.0f / %.0f / %.0f |\n",
                                            s.turn, s.ok, s.issued, Pair(s.ttft),
                                            s.prompt_tokens_mean, s.cached_tokens_mean,
                                            s.reusable_tokens_mean,
                                            s.reusable_tokens > 0
                                                ? absl::StrFormat("%.1f%%", 100 * s.hit_rate)
                                                : "–",
                                            s.server_queue_ms, s.server_prefill_ms,
                                            s.server_transfer_ms));
    }
    if (!run.flush_workers.empty()) {
      std::vector<double> flush_ms;
      for (const AgentTurnRecord& t : run.turns) {
        if (t.turn > 0) flush_ms.push_back(1e3 * t.flush_s);
      }
      std::sort(flush_ms.begin(), flush_ms.end());
      absl::StrAppend(&out, "\nBefore every turn >= 2 the prefix caches of ", run.label,
                      "'s workers (", absl::StrJoin(run.flush_workers, ", "),
                      ") were flushed, waiting for their KV tiers' writes (FlushCache; not in "
                      "the TTFT): ",
                      flush_ms.empty()
                          ? std::string("no such turn")
                          : absl::StrFormat("%.0f ms p50, %.0f ms max per flush",
                                            flush_ms[flush_ms.size() / 2], flush_ms.back()),
                      ".\n");
    }
    if (!run.report.overall.errors.empty()) {
      absl::StrAppend(&out, "\nErrors, ", run.label, ": ",
                      ErrorsLine(run.report.overall.errors, run.report.overall.first_errors), "\n");
    }
  }
  absl::StrAppend(&out,
                  "\nHit rate: usage.cached_prompt_tokens / (previous turn's prompt + answer). "
                  "Bytes at rest: the model's global K/V bytes per token (cache format) x the "
                  "session's final context.\n");
  return out;
}

}  // namespace ced::loadgen
