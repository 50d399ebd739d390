// Reports of agent-trace runs (agent_runner.h): TTFT per turn, prompt and
// cached tokens per turn, the prefix-cache hit rate over reusable tokens and
// the bytes each session keeps at rest. Turns are numbered from 1 in reports
// ("turns >= 2" are those that could reuse a cache). Pure functions;
// thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/loadgen/agent_runner.h"
#include "bench/loadgen/stats.h"
#include "bench/sim/agent_workload.h"

namespace ced::loadgen {

struct AgentTurnStats {
  int turn = 1;        // 1-based
  int64_t issued = 0;  // calls made for this turn index
  int64_t ok = 0;
  LatencySummary ttft;  // OK turns, ms
  double prompt_tokens_mean = 0, cached_tokens_mean = 0, reusable_tokens_mean = 0;
  int64_t cached_tokens = 0, reusable_tokens = 0;  // sums over OK turns
  double hit_rate = 0;  // cached / reusable (0 when nothing was reusable)
  // The gateway's split of TTFT (ced.v1.Timings), means over OK turns that
  // carried timings, ms: receipt -> prefill start, prefill compute, exposed
  // K/V transfer.
  double server_queue_ms = 0, server_prefill_ms = 0, server_transfer_ms = 0;
};

struct AgentReport {
  RunReport overall;  // every turn as one request (stats.h)
  std::vector<AgentTurnStats> by_turn;
  // Turns >= 2 together.
  LatencySummary ttft_later;
  int64_t cached_later = 0, reusable_later = 0;
  double hit_rate_later = 0;
  int64_t usage_missing = 0;  // OK turns whose final message had no usage
  // Sessions: count, those that ran every turn, and what each keeps at rest
  // in a prefix cache: global K/V bytes per token x its final context.
  int sessions = 0, sessions_complete = 0;
  int64_t planned_turns = 0;
  int64_t kv_bytes_per_token = 0;  // ModelInfo.kv_bytes_per_token (the cache format)
  double final_tokens_mean = 0;
  double bytes_per_session_mean = 0, bytes_per_session_max = 0;
  bool session_id_sent = false;
};

// `kv_bytes_per_token`: global K/V bytes per token of the served model in
// its cache format (the gateway's ModelInfo; `ced model info`).
AgentReport ComputeAgentReport(const AgentRunResult& result, int64_t kv_bytes_per_token);

// One agent run against one target.
struct AgentRunSummary {
  std::string label, target;
  std::string model_name;  // from ModelInfo
  int num_layers = 0, num_encoder_layers = 0;
  bool decoder_only = false;
  std::string kv_cache_dtype;
  std::vector<std::string> flush_workers;  // AgentRunOptions::flush_workers
  AgentReport report;
  std::vector<AgentTurnRecord> turns;  // written to JSON only when asked
};

struct AgentReportContext {
  sim::AgentTraceOptions trace;
  AgentRunOptions run;  // target unused
  bool include_records = false;
};

// {"workload": {"kind": "agent", ...}, "run": {...}, "runs": [{..., "turns":
// [per turn index], ...}]}; latencies in ms, bytes in bytes.
std::string AgentReportJson(const AgentReportContext& context,
                            const std::vector<AgentRunSummary>& runs);

// A summary row per run (TTFT turn 1 and turns >= 2, hit rate, bytes per
// session), then a per-turn table per run.
std::string AgentReportMarkdown(const AgentReportContext& context,
                                const std::vector<AgentRunSummary>& runs);

}  // namespace ced::loadgen
