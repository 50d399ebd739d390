// A simulated decode instance: the decode worker's own scheduler
// (engine/scheduler, linked) decides every step, and this class executes
// the StepPlan the way services/decode/loop.cc does, with the cost model
// for a clock. Each step runs the planned starts (a K/V import, a replay on
// decode, or a local prefill; the latter two make the request's first
// token) and one batched decode token for every running sequence; started
// requests decode from the next step. Admission bounds, max_batch, FIFO
// starts and the per-step token budget are the scheduler's.
//
// Step price: the cost model's decode step over the running batch, with
// the replays of the step riding in it (their work and MoE experts on top
// of one weight read), plus each local prefill's own seconds. An import
// alone costs nothing (the worker copies the tail in; the cost model has no
// term for it): a step of imports only is applied at once, so K/V landing
// on an idle instance decodes from the next instant; unless an import ends
// its request (its only token came from the prefill instance), which is then
// a step of 0 seconds so that EndStep reports it finished.
//
// The running batch is priced without a pass over it: every sequence past
// its first token advances one position per step, so the batch's context
// sums move by known amounts and change otherwise only when a sequence
// joins, reaches the local window or finishes (heaps keyed by step).
//
// Requests are named by the caller's int index. Thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <queue>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/sim/cost_model.h"
#include "engine/scheduler/scheduler.h"

namespace ced::sim {

class SimDecodeInstance {
 public:
  struct Options {
    const CostModel* cost = nullptr;  // not owned; outlives the instance
    int gpus = 1;
    // The worker's scheduler options (timeouts are off: nothing here
    // cancels or stalls a transfer).
    int max_batch = 256;
    int64_t max_step_tokens = 2048;
    int max_queued_requests = 256;
    int64_t max_queued_tokens = int64_t{1} << 20;
  };
  // INVALID_ARGUMENT for bad options (the scheduler's checks).
  static absl::StatusOr<std::unique_ptr<SimDecodeInstance>> Create(const Options& options);

  // The worker's Reserve once the KV blocks are held: false when the
  // scheduler's queue bounds refuse the request (the gateway retries).
  // `generated`: tokens made before it gets here (1 when the prefill
  // instance made the first token). A local prefill (`local_prefill_s` >= 0:
  // its prefill's seconds at full speed, `work_tokens` charged to the step
  // budget) is ready at once; any other request waits for OnKvLanded.
  bool Reserve(int request, int64_t prompt_tokens, int64_t output_tokens, int64_t generated,
               double now_s, double local_prefill_s = -1, int64_t work_tokens = 0);
  // All its K/V landed. `replay`: the instance replays the prompt's tail
  // (replay on decode) and so makes the first token.
  void OnKvLanded(int request, bool replay, double now_s);

  // Plans the next step and returns its seconds at full speed, or a
  // negative value when there is nothing to run (idle until a request is
  // reserved or lands). Every BeginStep >= 0 is followed by EndStep.
  double BeginStep(double now_s);
  // Applies the step: the requests that made their first token in it, and
  // those that finished (forgotten here; their blocks are the caller's).
  void EndStep(std::vector<int>* first_token, std::vector<int>* finished);

  int running() const { return sched_->running(); }
  int waiting() const { return sched_->waiting(); }
  // Steps that ran a decode batch (the worker's ced_decode_steps_total).
  int64_t decode_steps() const { return decode_steps_; }

 private:
  struct Seq {
    int64_t prompt = 0, output = 0, generated = 0;
    bool replay = false;       // start = replay on decode (first token)
    double local_s = -1;       // start = local prefill of these seconds
  };
  SimDecodeInstance(const Options& options, std::unique_ptr<Scheduler> sched)
      : o_(options), sched_(std::move(sched)) {}
  // Joins the running batch priced from the next step on.
  void Join(int request, const Seq& s);
  // Applies the plan awaiting Update: starts advance, the batch moves one token.
  void Apply(std::vector<int>* first_token, std::vector<int>* finished);

  Options o_;
  std::unique_ptr<Scheduler> sched_;
  std::unordered_map<int, Seq> seqs_;
  StepPlan plan_;  // the step under way
  bool in_step_ = false;
  int64_t decode_steps_ = 0;
  int64_t steps_done_ = 0;  // steps that moved the batch
  int64_t batch_ = 0, sum_context_ = 0, sum_local_ = 0;
  int64_t below_window_ = 0;  // batch sequences whose context is below W
  using StepEvent = std::pair<int64_t, int>;  // (steps_done_, request)
  std::priority_queue<StepEvent, std::vector<StepEvent>, std::greater<StepEvent>> finish_at_,
      reach_window_at_;
};

}  // namespace ced::sim
