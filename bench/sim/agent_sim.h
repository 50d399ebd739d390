// The agent trace (agent_workload.h) on a simulated disaggregated fleet with
// prefix caches (prefix_cache_model.h): turn k of a session arrives when turn
// k-1's last token was made plus the think time; the router's policy library
// (services/router_policy, linked, on simulated time) places it; the prefill
// instance computes only what its cache lacks (§1.6, bounded mode) and caches
// the prompt's full blocks; the K/V link carries only the blocks the decode
// instance lacks. Each decode instance is a SimDecodeInstance
// (decode_instance.h): the decode worker's own scheduler (engine/scheduler)
// decides its steps (admission bounds, max_batch, FIFO starts, the per-step
// token budget) and the cost model prices them, as in the request-level
// simulator. A turn is reserved there once its blocks are held and starts
// when its K/V has landed (an import, or a replay on decode that makes its
// first token). A local prefill decision is reserved with the prefix the
// decode instance's cache holds at that moment and runs as the start work of
// one of its steps, priced as a resumed prefill. The decode instance caches
// prompt + answer when the turn ends.
//
// Cache-aware routing as in the router (DESIGN.md §1.6): a session's
// conversation is one synthetic block hash chain under one root (block j of
// session s has the key (s + 1, j + 1)), so turn k's prompt chain extends
// turn k-1's prompt + answer. Each route carries the prompt's full blocks'
// keys, the root, the block size and the session id ("s<index>"); the policy
// matches them against a BlockIndex and predicts the chosen instances' keys.
// The instances' caches log their stored and evicted blocks, and each
// heartbeat reports the net effect since the last one (a delta; the first
// one full), as the workers' router client does. Without prefix caches the
// instances register as not cache-aware (block size 0).
//
// Deterministic; thread-compatible (each call owns its state).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/sim/agent_workload.h"
#include "bench/sim/hardware.h"
#include "engine/model/config.h"
#include "services/router_policy/policy.h"

namespace ced::sim {

struct AgentSimOptions {
  ModelConfig model;
  GpuSpec gpu;
  int prefill_instances = 1;
  int decode_instances = 1;
  int prefill_gpus = 1;
  int decode_gpus = 1;
  double link_bytes_per_s = 50e9;
  router::ReplayOnChoice replay_on = router::ReplayOnChoice::kPrefill;
  // The router's --routing: kCacheAware (its default) or kLoad (caches and
  // session hints ignored, for comparison).
  router::Routing routing = router::Routing::kCacheAware;
  double heartbeat_s = 0.05;
  int block_size = 16;
  // The decode worker's scheduler: sequences per decode instance, and the
  // per-step token budget (one per decoding sequence plus the start work of
  // the step: replayed tokens, a local prefill's recomputed positions).
  int max_batch = 256;
  int64_t max_step_tokens = 2048;
  bool prefix_cache = true;  // false: every turn recomputes its whole prompt
  // Prefill workers' --held-sequences (prefix_cache_model.h).
  int held_sequences = 8;
  // Prefill instance i and decode instance i share one machine (`ced
  // cluster` on one host): each runs slower while the other computes, by the
  // device's measured colocated slowdowns (as SimOptions::colocated).
  bool colocated = false;
  // Global K/V budget per instance in bytes; 0: the cost model's KV room.
  double kv_cache_bytes = 0;
  // A turn no decode instance has room for waits for the next load report
  // (false), or is refused as the gateway refuses it (true, after
  // reserve_retries other decode instances), which ends its session as it
  // ends in ced-loadgen (the next prompt would need its answer). As
  // SimOptions::refuse_when_full.
  bool refuse_when_full = false;
  int reserve_retries = 2;
  AgentTraceOptions trace;
};

struct AgentTurnResult {
  int session = 0, turn = 0;  // turn from 0
  double arrival_s = 0, first_token_s = -1, finish_s = -1;
  int64_t prompt_tokens = 0, output_tokens = 0;
  int64_t cached_tokens = 0;    // on the instance that prefilled it
  int64_t reusable_tokens = 0;  // the previous turn's prompt + answer
  int64_t transferred_tokens = 0;  // global K/V tokens sent to the decode instance
  bool local_prefill = false;
  bool completed = false;
  bool refused = false;  // RESOURCE_EXHAUSTED (refuse_when_full); its session ended
  double ttft_s() const { return first_token_s - arrival_s; }
};

struct AgentTurnSummary {
  int turn = 1;  // 1-based
  int completed = 0;
  double ttft_p50_s = 0, ttft_p90_s = 0;
  double prompt_tokens_mean = 0, cached_tokens_mean = 0;
  double hit_rate = 0;  // Σ cached / Σ reusable
};

struct AgentSimSummary {
  std::vector<AgentTurnResult> turns;  // by (session, turn)
  std::vector<AgentTurnSummary> by_turn;
  double ttft_later_p50_s = 0, ttft_later_p90_s = 0;  // turns >= 2
  double hit_rate_later = 0;
  int failed = 0;   // turns not completed (a refused or failed turn and its session's rest)
  int refused = 0;  // turns refused for want of decode room (refuse_when_full)
  double makespan_s = 0;
  int64_t evicted_blocks = 0;  // over every instance
  double kv_bytes_per_token = 0;
  int64_t decode_steps = 0;  // decode batches run, over all decode instances
  int peak_running = 0;      // most sequences running on one decode instance
  // "turns=.. ttft_later=../.. hit=.." with full precision (determinism checks).
  std::string ToString() const;
};

// INVALID_ARGUMENT for bad sizes, a bad trace or a model the instances
// cannot hold.
absl::StatusOr<AgentSimSummary> RunAgentSimulation(const AgentSimOptions& options);

// Markdown: a summary line, then TTFT, prompt and cached tokens per turn.
std::string AgentSimTable(const AgentSimSummary& summary);
// The same as JSON, with every turn of every session (turns 1-based, as the
// load generator's report numbers them; TTFT in ms, -1 when not completed).
std::string AgentSimJson(const AgentSimSummary& summary);

}  // namespace ced::sim
