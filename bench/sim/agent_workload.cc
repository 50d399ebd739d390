#include "bench/sim/agent_workload.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/sim/workload.h"

namespace ced::sim {

int64_t AgentTurnPromptTokens(const AgentSessionSpec& session, int turn) {
  int64_t n = session.first_prompt_tokens;
  for (int j = 0; j < turn; ++j) {
    n += session.output_tokens[static_cast<size_t>(j)] +
         session.tool_result_tokens[static_cast<size_t>(j)];
  }
  return n;
}

absl::StatusOr<std::vector<AgentSessionSpec>> MakeAgentTrace(const AgentTraceOptions& o) {
  if (o.sessions < 1) return absl::InvalidArgumentError("agent trace: sessions must be >= 1");
  if (o.turns < 1) return absl::InvalidArgumentError("agent trace: turns must be >= 1");
  if (o.first_prompt_tokens < 1) {
    return absl::InvalidArgumentError("agent trace: first_prompt_tokens must be >= 1");
  }
  if (!(o.tool_result_mean >= 1) || !(o.tool_result_cv >= 0)) {
    return absl::InvalidArgumentError(
        "agent trace: tool_result_mean must be >= 1 and tool_result_cv >= 0");
  }
  if (o.output_tokens < 1) return absl::InvalidArgumentError("agent trace: output_tokens must be >= 1");
  if (!(o.think_time_s >= 0) || !std::isfinite(o.think_time_s) || !std::isfinite(o.stagger_s)) {
    return absl::InvalidArgumentError("agent trace: think time must be >= 0");
  }
  const double stagger = o.stagger_s >= 0 ? o.stagger_s : o.think_time_s / o.sessions;
  // One stream per session: adding sessions or turns does not change the
  // earlier sessions' first turns.
  std::vector<AgentSessionSpec> out(static_cast<size_t>(o.sessions));
  for (int s = 0; s < o.sessions; ++s) {
    TraceRng rng(o.seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(s) + 1);
    AgentSessionSpec& spec = out[static_cast<size_t>(s)];
    spec.start_s = stagger * s;
    spec.think_time_s = o.think_time_s;
    spec.first_prompt_tokens = o.first_prompt_tokens;
    for (int k = 0; k < o.turns; ++k) {
      spec.output_tokens.push_back(o.output_tokens);
      if (k + 1 < o.turns) {
        spec.tool_result_tokens.push_back(
            LogNormalLength(rng, o.tool_result_mean, o.tool_result_cv));
      }
    }
  }
  return out;
}

std::string DescribeAgentTrace(const AgentTraceOptions& o) {
  return absl::StrFormat(
      "%d sessions x %d turns, first prompt %d tokens, tool results %g tokens (cv %g), answers "
      "%d tokens, think %g ms, seed %d",
      o.sessions, o.turns, o.first_prompt_tokens, o.tool_result_mean, o.tool_result_cv,
      o.output_tokens, o.think_time_s * 1e3, o.seed);
}

}  // namespace ced::sim
