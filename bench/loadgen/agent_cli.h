// `ced-loadgen --workload agent`: the agent-session flags and the run over
// every target (one after the other, the same trace), reports included.
// Use from main() only.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "bench/common/flags.h"
#include "ced/v1/gateway.pb.h"

namespace ced::loadgen {

struct AgentArgs {
  int64_t sessions = 4, turns = 8;
  int64_t first_prompt_tokens = 1024;
  double tool_result_mean = 1024, tool_result_cv = 0.5;
  int64_t output_tokens = 16;
  double think_time_ms = 1000;
  double stagger_ms = -1;
  bool session_id = true;
  std::string replay_mode;
  // --flush-workers: LABEL=ADDR+ADDR,... the workers of target LABEL whose
  // prefix caches are flushed before every turn after a session's first.
  std::string flush_workers;
};

// Registers --sessions, --turns, --first-prompt-tokens, --tool-result-mean,
// --tool-result-cv, --output-tokens, --think-time-ms, --session-stagger-ms,
// --session-id and --replay-mode.
void AddAgentFlags(bench::FlagSet* flags, AgentArgs* args);

// What the agent run shares with the Poisson mode's flags.
struct AgentCommon {
  std::string target;  // --target
  int64_t seed = 1;
  double timeout_s = 300, temperature = 0;
  ced::v1::ReplayOn replay_on = ced::v1::REPLAY_ON_UNSPECIFIED;
  std::string api;  // must be "grpc": a turn's prompt holds the answer's token ids
  std::string json_out, md_out;
  bool json_requests = false;
  const std::atomic<bool>* interrupt = nullptr;
};

absl::Status RunAgentWorkload(const AgentArgs& args, const AgentCommon& common);

}  // namespace ced::loadgen
