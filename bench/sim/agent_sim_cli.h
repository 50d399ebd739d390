// `ced-sim --workload agent`: the agent-trace flags (the same names as
// ced-loadgen's) and the run. Use from main() only.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "bench/common/flags.h"
#include "bench/sim/simulator.h"

namespace ced::sim {

struct AgentSimArgs {
  int sessions = 4, turns = 8, first_prompt_tokens = 1024, output_tokens = 16;
  double tool_result_mean = 1024, tool_result_cv = 0.5;
  double think_time_ms = 1000, stagger_ms = -1;
  bool prefix_cache = true;
  int held_sequences = 8;
  double kv_cache_mb = 0;
  bool compare_no_cache = false;
  std::string routing = "cache_aware";  // the router's --routing: cache_aware or load
  std::string json_out;                 // the run's figures as JSON (AgentSimJson)
};

void AddAgentSimFlags(bench::FlagSet* flags, AgentSimArgs* args);

// Runs the agent trace on `base`'s fleet, model and device (its Poisson
// workload and SLOs unused) and prints the per-turn tables; with
// --compare-no-cache, also without prefix caches, side by side.
absl::Status RunAgentSim(const AgentSimArgs& args, const SimOptions& base, int seed);

}  // namespace ced::sim
