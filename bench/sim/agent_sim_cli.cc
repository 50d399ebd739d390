#include "bench/sim/agent_sim_cli.h"

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/sim/agent_sim.h"
#include "engine/common/status.h"

namespace ced::sim {

void AddAgentSimFlags(bench::FlagSet* f, AgentSimArgs* a) {
  f->Int("sessions", &a->sessions, "agent: concurrent sessions");
  f->Int("turns", &a->turns, "agent: turns per session");
  f->Int("first-prompt-tokens", &a->first_prompt_tokens, "agent: tokens of a session's first prompt");
  f->Double("tool-result-mean", &a->tool_result_mean,
            "agent: mean tokens a tool result appends before each later turn (lognormal)");
  f->Double("tool-result-cv", &a->tool_result_cv, "agent: tool result length cv (0 = fixed)");
  f->Int("output-tokens", &a->output_tokens, "agent: answer tokens per turn");
  f->Double("think-time-ms", &a->think_time_ms, "agent: from a turn's last token to the next turn");
  f->Double("session-stagger-ms", &a->stagger_ms,
            "agent: session i starts at i x this (< 0: think time / sessions)");
  f->Bool("prefix-cache", &a->prefix_cache, "agent: model the workers' prefix caches");
  f->Int("held-sequences", &a->held_sequences,
         "agent: the prefill workers' --held-sequences (finished prompts kept with their local "
         "windows; the session's next turn continues them instead of rebuilding; 0: off)");
  f->Double("kv-cache-mb", &a->kv_cache_mb,
            "agent: global K/V budget per instance, MiB (0: the device's KV room)");
  f->Bool("compare-no-cache", &a->compare_no_cache,
          "agent: run the same trace again without prefix caches and print both");
  f->String("json-out", &a->json_out,
            "agent: write the run's figures (per turn, and every turn of every session) as JSON "
            "here; with --compare-no-cache, the run with the caches");
  f->String("routing", &a->routing,
            "agent: the router's placement, as its --routing: cache_aware (block hash chains, "
            "the workers' cache reports and session hints, plus load) or load (load alone)");
}

absl::Status RunAgentSim(const AgentSimArgs& a, const SimOptions& base, int seed) {
  AgentSimOptions o;
  o.model = base.model;
  o.gpu = base.gpu;
  o.prefill_instances = base.prefill_instances;
  o.decode_instances = base.decode_instances;
  o.prefill_gpus = base.prefill_gpus;
  o.decode_gpus = base.decode_gpus;
  o.link_bytes_per_s = base.link_bytes_per_s;
  o.replay_on = base.replay_on;
  if (a.routing == "cache_aware") {
    o.routing = router::Routing::kCacheAware;
  } else if (a.routing == "load") {
    o.routing = router::Routing::kLoad;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--routing: expected cache_aware or load, got '", a.routing, "'"));
  }
  o.heartbeat_s = base.heartbeat_s;
  o.block_size = base.block_size;
  o.max_batch = base.max_batch;
  o.max_step_tokens = base.max_step_tokens;
  o.prefix_cache = a.prefix_cache;
  o.held_sequences = a.held_sequences;
  o.colocated = base.colocated;
  o.refuse_when_full = base.refuse_when_full;
  o.reserve_retries = base.reserve_retries;
  o.kv_cache_bytes = a.kv_cache_mb * (1 << 20);
  o.trace.sessions = a.sessions;
  o.trace.turns = a.turns;
  o.trace.first_prompt_tokens = a.first_prompt_tokens;
  o.trace.tool_result_mean = a.tool_result_mean;
  o.trace.tool_result_cv = a.tool_result_cv;
  o.trace.output_tokens = a.output_tokens;
  o.trace.think_time_s = a.think_time_ms / 1e3;
  o.trace.stagger_s = a.stagger_ms / 1e3;
  o.trace.seed = static_cast<uint64_t>(seed);
  std::printf("Agent trace: %s; %d prefill + %d decode instances; %s routing\n\n",
              DescribeAgentTrace(o.trace).c_str(), o.prefill_instances, o.decode_instances,
              a.routing.c_str());
  ASSIGN_OR_RETURN(AgentSimSummary with, RunAgentSimulation(o));
  if (!a.json_out.empty()) {
    std::ofstream json(a.json_out);
    json << AgentSimJson(with);
    json.close();
    if (!json) return absl::InternalError(absl::StrCat("--json-out: cannot write '", a.json_out, "'"));
  }
  std::printf("### %s\n\n%s", o.prefix_cache ? "With prefix caches" : "Without prefix caches",
              AgentSimTable(with).c_str());
  if (a.compare_no_cache && o.prefix_cache) {
    o.prefix_cache = false;
    ASSIGN_OR_RETURN(AgentSimSummary without, RunAgentSimulation(o));
    std::printf("\n### Without prefix caches\n\n%s", AgentSimTable(without).c_str());
    if (with.ttft_later_p50_s > 0) {
      std::printf("\nTTFT turns >= 2, p50: %.2fx lower with the caches\n",
                  without.ttft_later_p50_s / with.ttft_later_p50_s);
    }
  }
  return absl::OkStatus();
}

}  // namespace ced::sim
