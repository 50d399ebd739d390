#include "bench/loadgen/agent_cli.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/common/run_info.h"
#include "bench/loadgen/agent_report.h"
#include "bench/loadgen/agent_runner.h"
#include "bench/loadgen/flags.h"
#include "bench/loadgen/progress.h"
#include "bench/loadgen/runner.h"
#include "engine/common/status.h"

namespace ced::loadgen {

void AddAgentFlags(bench::FlagSet* f, AgentArgs* a) {
  f->Int("sessions", &a->sessions, "agent: concurrent sessions");
  f->Int("turns", &a->turns, "agent: turns per session");
  f->Int("first-prompt-tokens", &a->first_prompt_tokens, "agent: tokens of a session's first prompt");
  f->Double("tool-result-mean", &a->tool_result_mean,
            "agent: mean tokens a tool result appends before each later turn (lognormal)");
  f->Double("tool-result-cv", &a->tool_result_cv,
            "agent: tool result length coefficient of variation (0 = fixed)");
  f->Int("output-tokens", &a->output_tokens, "agent: answer tokens per turn (= max_tokens)");
  f->Double("think-time-ms", &a->think_time_ms,
            "agent: from a turn's last token to the next turn's send");
  f->Double("session-stagger-ms", &a->stagger_ms,
            "agent: session i starts at i x this (< 0: think time / sessions)");
  f->Bool("session-id", &a->session_id,
          "agent: send a session_id per session when ced.v1.GenerateRequest has the field "
          "(a routing hint; ignored otherwise)");
  f->String("replay-mode", &a->replay_mode,
            "agent: per-request replay mode, bounded or exact (default: the router's)");
  f->String("flush-workers", &a->flush_workers,
            "agent: LABEL=ADDR+ADDR,... before every turn after a session's first, empty the "
            "prefix caches of these workers (gRPC addresses) of target LABEL, waiting for their "
            "KV tiers' writes (FlushCache, as `ced client flush-cache --wait-for-tiers`): each "
            "turn then finds its prefix below the hot cache");
}

namespace {

// --flush-workers: target label -> worker addresses.
absl::StatusOr<std::map<std::string, std::vector<std::string>>> ParseFlushWorkers(
    const std::string& spec, const std::vector<Target>& targets) {
  std::map<std::string, std::vector<std::string>> out;
  if (spec.empty()) return out;
  for (absl::string_view item : absl::StrSplit(spec, ',')) {
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos || eq == 0 || eq + 1 == item.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--flush-workers: expected LABEL=ADDR+ADDR,..., got '", item, "'"));
    }
    const std::string label(item.substr(0, eq));
    if (std::none_of(targets.begin(), targets.end(),
                     [&](const Target& t) { return t.label == label; })) {
      return absl::InvalidArgumentError(
          absl::StrCat("--flush-workers: no target labelled '", label, "' in --target"));
    }
    for (absl::string_view addr : absl::StrSplit(item.substr(eq + 1), '+')) {
      if (addr.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--flush-workers: empty worker address for '", label, "'"));
      }
      out[label].emplace_back(addr);
    }
  }
  return out;
}

}  // namespace

absl::Status RunAgentWorkload(const AgentArgs& a, const AgentCommon& c) {
  if (c.api != "grpc") {
    return absl::InvalidArgumentError(
        "--workload agent needs --api grpc: each turn's prompt holds the previous answer's "
        "token ids, which only ced.v1 streams back");
  }
  ASSIGN_OR_RETURN(std::vector<Target> targets, ParseTargets(c.target));
  ASSIGN_OR_RETURN(auto flush, ParseFlushWorkers(a.flush_workers, targets));
  sim::AgentTraceOptions trace;
  if (a.sessions < 1 || a.sessions > 100000 || a.turns < 1 || a.turns > 100000) {
    return absl::InvalidArgumentError("--sessions and --turns must be in [1, 100000]");
  }
  trace.sessions = static_cast<int>(a.sessions);
  trace.turns = static_cast<int>(a.turns);
  trace.first_prompt_tokens = a.first_prompt_tokens;
  trace.tool_result_mean = a.tool_result_mean;
  trace.tool_result_cv = a.tool_result_cv;
  trace.output_tokens = a.output_tokens;
  trace.think_time_s = a.think_time_ms / 1e3;
  trace.stagger_s = a.stagger_ms / 1e3;
  trace.seed = static_cast<uint64_t>(c.seed);
  ASSIGN_OR_RETURN(std::vector<sim::AgentSessionSpec> specs, sim::MakeAgentTrace(trace));
  if (trace.stagger_s < 0) trace.stagger_s = trace.think_time_s / trace.sessions;

  AgentRunOptions run;
  run.request_timeout_s = c.timeout_s;
  run.temperature = static_cast<float>(c.temperature);
  run.replay_on = c.replay_on;
  if (a.replay_mode == "bounded") {
    run.replay_mode = ced::v1::REPLAY_MODE_BOUNDED;
  } else if (a.replay_mode == "exact") {
    run.replay_mode = ced::v1::REPLAY_MODE_EXACT;
  } else if (!a.replay_mode.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--replay-mode: expected bounded or exact, got '", a.replay_mode, "'"));
  }
  run.send_session_id = a.session_id;
  run.seed = static_cast<uint64_t>(c.seed);
  run.interrupt = c.interrupt;

  int64_t longest = 0;  // the longest session's prompt + answer at its last turn
  for (const sim::AgentSessionSpec& s : specs) {
    longest = std::max(longest, sim::AgentTurnPromptTokens(s, trace.turns - 1) +
                                    s.output_tokens.back());
  }
  std::vector<ced::v1::ModelInfoResponse> infos;
  for (const Target& t : targets) {
    ASSIGN_OR_RETURN(ced::v1::ModelInfoResponse info, FetchModelInfo(t.address));
    if (info.max_position() > 0 && longest > info.max_position()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "agent trace: the longest session reaches ", longest, " tokens, over target ", t.label,
          "'s max_position ", info.max_position(), " (fewer turns or shorter tool results)"));
    }
    infos.push_back(std::move(info));
  }
  std::vector<AgentRunSummary> runs;
  for (size_t i = 0; i < targets.size() && !(c.interrupt && c.interrupt->load()); ++i) {
    AgentRunOptions r = run;
    r.target = targets[i].address;
    if (auto it = flush.find(targets[i].label); it != flush.end()) r.flush_workers = it->second;
    ASSIGN_OR_RETURN(std::unique_ptr<AgentRunner> runner, AgentRunner::Create(r, specs));
    AgentRunResult result;
    {
      ProgressPrinter progress([&] { return runner->Snapshot(); },
                               ProgressBounds{0, trace.sessions * static_cast<int64_t>(trace.turns)},
                               stderr, absl::StrCat(targets[i].label, " agent  "));
      ASSIGN_OR_RETURN(result, runner->Run());
    }
    AgentRunSummary s;
    s.label = targets[i].label;
    s.target = targets[i].address;
    s.flush_workers = r.flush_workers;
    s.model_name = infos[i].model_name();
    s.num_layers = infos[i].num_layers();
    s.num_encoder_layers = infos[i].num_encoder_layers();
    s.decoder_only = infos[i].decoder_only();
    s.kv_cache_dtype = infos[i].kv_cache_dtype();
    s.report = ComputeAgentReport(result, infos[i].kv_bytes_per_token());
    s.turns = std::move(result.turns);
    runs.push_back(std::move(s));
  }
  AgentReportContext ctx;
  ctx.trace = trace;
  ctx.run = run;
  ctx.include_records = c.json_requests;
  const std::string md = AgentReportMarkdown(ctx, runs);
  if (c.md_out.empty()) {
    std::printf("%s", md.c_str());
  } else {
    RETURN_IF_ERROR(bench::WriteTextFile(c.md_out, md));
  }
  if (!c.json_out.empty()) {
    RETURN_IF_ERROR(bench::WriteTextFile(c.json_out, AgentReportJson(ctx, runs)));
  }
  if (c.interrupt && c.interrupt->load()) {
    return absl::CancelledError("interrupted; partial results written");
  }
  return absl::OkStatus();
}

}  // namespace ced::loadgen
