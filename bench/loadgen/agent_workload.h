// Token contents of the agent trace (bench/sim/agent_workload.h gives the
// lengths and times): each session's first prompt and tool results are
// random ids in [0, kPromptTokenRange), a pure function of (seed, session,
// turn), distinct between sessions so that no two share a prefix. Turn k's
// prompt is built at run time from turn k-1's prompt and the answer the
// server streamed (AppendTurn). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "bench/sim/agent_workload.h"

namespace ced::loadgen {

// Turn 0: the first prompt; turn k >= 1: the tool result appended before it.
std::vector<int32_t> AgentTurnTokens(uint64_t seed, int session, int turn,
                                     const sim::AgentSessionSpec& spec);

// prompt + answer + tool_result (turn k's prompt from turn k-1's).
std::vector<int32_t> AppendTurn(absl::Span<const int32_t> prompt,
                                absl::Span<const int32_t> answer,
                                absl::Span<const int32_t> tool_result);

}  // namespace ced::loadgen
