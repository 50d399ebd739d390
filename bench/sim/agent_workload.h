// The agent trace (issue 16): S sessions of T turns. Turn 0 sends a first
// prompt; turn k >= 1 sends turn k-1's prompt + its answer + a new tool
// result (lognormal length), after a think time that starts when turn k-1's
// answer ended. Sessions start `stagger_s` apart and then interleave.
//
// Only lengths and times live here; the load generator fills in the token
// ids (bench/loadgen/agent_workload.h) and the simulator runs the lengths
// (agent_sim.h), so both replay the same trace for a seed. Deterministic on
// every platform; pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ced::sim {

struct AgentTraceOptions {
  int sessions = 4;
  int turns = 8;
  int64_t first_prompt_tokens = 1024;
  double tool_result_mean = 1024, tool_result_cv = 0.5;  // tokens added per turn (lognormal)
  int64_t output_tokens = 16;                            // answer per turn (= max_tokens)
  double think_time_s = 1;  // from a turn's last token to the next turn's send
  // Session i starts at i * stagger_s; < 0 means think_time_s / sessions.
  double stagger_s = -1;
  uint64_t seed = 1;
};

struct AgentSessionSpec {
  double start_s = 0;       // turn 0's send time, from the start of the run
  double think_time_s = 0;  // from a turn's end to the next turn's send
  int64_t first_prompt_tokens = 1;
  // tool_result_tokens[k - 1] is appended before turn k (k >= 1).
  std::vector<int64_t> tool_result_tokens;
  std::vector<int64_t> output_tokens;  // per turn
};

// Prompt length of `turn` when every earlier turn produced its planned
// answer: first + Σ_{j < turn} (output_j + tool_result_j).
int64_t AgentTurnPromptTokens(const AgentSessionSpec& session, int turn);

// One spec per session. INVALID_ARGUMENT naming the option for bad values.
absl::StatusOr<std::vector<AgentSessionSpec>> MakeAgentTrace(const AgentTraceOptions& options);

// "4 sessions x 8 turns, first prompt 1024, tool results 1024 (cv 0.5),
// answers 16, think 1000 ms" — for report headers.
std::string DescribeAgentTrace(const AgentTraceOptions& options);

}  // namespace ced::sim
