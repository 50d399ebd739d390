// Discrete-event, iteration-level simulator of a disaggregated fleet: a
// prefill pool (FIFO, one prompt per step) and a decode pool whose instances
// run the decode worker's own scheduler (engine/scheduler: admission bounds,
// continuous batching, FIFO starts, the per-step token budget) on the cost
// model (decode_instance.h), with admission by KV reservation (admission.h),
// placed by the router's own policy library (services/router_policy) on
// simulated time, fed load reports at a heartbeat period. K/V goes over one
// link per prefill instance, serialized, after the prompt's prefill step.
// Optionally (colocated) prefill and decode instances share machines and
// slow each other down while both compute, by the device's measured
// slowdowns.
//
// Time to first token: for decoder-only models and replay on prefill, the
// prefill instance makes the first token and the gateway relays it at once;
// with replay on decode it is made by the decode step that starts the
// request (after the transfer). Either way the request decodes from the step
// after its start, as in the worker. TPOT = (finish - first token) /
// (output - 1), 0 for one-token outputs.
//
// Deterministic: the same options give the same summary. Thread-compatible
// (each call owns its state).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/sim/hardware.h"
#include "bench/sim/workload.h"
#include "engine/model/config.h"
#include "services/router_policy/policy.h"

namespace ced::sim {

struct SimOptions {
  ModelConfig model;  // the served model (E == L: the decoder-only baseline)
  GpuSpec gpu;
  int prefill_instances = 3;
  int decode_instances = 3;
  int prefill_gpus = 4;  // tensor-parallel GPUs per instance
  int decode_gpus = 4;
  double link_bytes_per_s = 50e9;
  router::ReplayOnChoice replay_on = router::ReplayOnChoice::kPrefill;
  bool count_inflight = true;  // false: the naive router (queued tokens only)
  double heartbeat_s = 0.05;
  int block_size = 16;
  // The decode worker's scheduler (engine/scheduler, linked): sequences per
  // decode instance, and the per-step token budget (one per decoding
  // sequence plus the replay tokens of the step's starts).
  int max_batch = 256;
  int64_t max_step_tokens = 2048;
  // Prefill instance i and decode instance i share one machine (the CPU
  // cluster: i < min(prefill, decode) instances): while one computes, the
  // other runs slower by the device's measured colocated slowdown, applied
  // to the part of each step that overlaps (the rest runs at full speed).
  bool colocated = false;
  // A request no decode instance has K/V room for (the router finds none, or
  // the instance refuses the reservation: its blocks or queue bounds):
  // false: it waits and is routed again at the next load report, FIFO behind
  //   the others waiting (what clients that retry their refused requests
  //   amount to; capacity searches use this: refusals would count a shed
  //   request as a met request's equal, and overload would read as capacity);
  // true: as the gateway serves a client that does not retry (ced-loadgen),
  //   the request goes to another decode instance at most reserve_retries
  //   times (the gateway's --reserve-retries), then it is refused
  //   (RESOURCE_EXHAUSTED): counted in `refused`, never completed.
  bool refuse_when_full = false;
  int reserve_retries = 2;
  double tpot_slo_s = 0.025;
  double ttft_slo_s = 1;
  WorkloadOptions workload;
  // When non-empty, replaces the generated trace (sorted by arrival).
  std::vector<RequestSpec> requests;
};

struct RequestResult {
  double arrival_s = 0, first_token_s = -1, finish_s = -1;
  double prefill_s = 0;  // its prefill step on the prefill instance (as it ran)
  int64_t prompt_tokens = 0, output_tokens = 0;
  bool completed = false;
  bool refused = false;  // RESOURCE_EXHAUSTED: no decode instance had room
  bool replayed_on_decode = false;
  double ttft_s() const { return first_token_s - arrival_s; }
  double tpot_s() const;
};

struct SimSummary {
  int requests = 0, completed = 0, failed = 0, met_slo = 0;
  int refused = 0;        // of the failed: refused for want of decode room (RESOURCE_EXHAUSTED)
  double attainment = 0;  // met both SLOs / requests
  double ttft_p50 = 0, ttft_p90 = 0, ttft_p99 = 0;
  double tpot_p50 = 0, tpot_p90 = 0, tpot_p99 = 0;
  double makespan_s = 0;  // first arrival to last finish
  double throughput = 0;  // completed requests / makespan
  double goodput = 0;     // requests meeting both SLOs / makespan
  double output_tokens_per_s = 0;
  int64_t decode_steps = 0;  // decode batches run, over all decode instances
  int replays_on_decode = 0;
  std::vector<RequestResult> results;  // in arrival order
  // One line, every figure with full precision (determinism checks).
  std::string ToString() const;
};

// INVALID_ARGUMENT for bad sizes or a model the instances cannot hold.
absl::StatusOr<SimSummary> RunSimulation(const SimOptions& options);

}  // namespace ced::sim
