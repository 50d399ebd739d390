#include "bench/loadgen/agent_workload.h"

#include "bench/loadgen/workload.h"

namespace ced::loadgen {

std::vector<int32_t> AgentTurnTokens(uint64_t seed, int session, int turn,
                                     const sim::AgentSessionSpec& spec) {
  const int64_t length = turn == 0 ? spec.first_prompt_tokens
                                   : spec.tool_result_tokens[static_cast<size_t>(turn - 1)];
  // A stream apart from the Poisson workload's prompts (another seed), one
  // index per (session, turn).
  const uint64_t agent_seed = seed ^ 0x5e55104a6e7ULL;
  return RandomPromptTokens(agent_seed, (static_cast<int64_t>(session) << 20) + turn, length);
}

std::vector<int32_t> AppendTurn(absl::Span<const int32_t> prompt,
                                absl::Span<const int32_t> answer,
                                absl::Span<const int32_t> tool_result) {
  std::vector<int32_t> out;
  out.reserve(prompt.size() + answer.size() + tool_result.size());
  out.insert(out.end(), prompt.begin(), prompt.end());
  out.insert(out.end(), answer.begin(), answer.end());
  out.insert(out.end(), tool_result.begin(), tool_result.end());
  return out;
}

}  // namespace ced::loadgen
