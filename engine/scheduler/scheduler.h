// The decode scheduler (DESIGN.md §2, STYLE.md "a scheduler that decides, a
// loop that executes"): continuous batching with admission by bounded queue,
// K/V-landed gating, timeouts, and a per-step token budget. It decides; the
// caller (the decode worker's loop, the simulator, a test's fake executor)
// executes each StepPlan and reports back with Update. No engine, proto or
// gRPC types: requests are named by id and described by token counts.
//
// A request's life: Add (admission; counted in the queue) -> Activate (its
// KV blocks are reserved: schedulable) -> waiting for K/V (OnKvProgress
// resets the inactivity timer) -> ready (OnKvLanded, or at once for a local
// prefill once a consumer attached) -> start work (prefill / import /
// replay, its first token) -> running (one decode token per step) -> ended
// (the executor reports it finished, or the scheduler ends it: cancelled,
// transfer failed, never attached, no K/V progress). An ended request is
// forgotten by the scheduler.
//
// Thread-compatible: one caller at a time (the worker holds its mutex).
// Time is the caller's: every call that needs it takes `now`, so tests drive
// it with a fake clock. Nothing blocks.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ced {

using SchedulerClock = std::chrono::steady_clock;
using SchedulerTime = SchedulerClock::time_point;

struct SchedulerOptions {
  // Sequences holding a batch slot: running, plus those whose start work is
  // planned or (chunked) under way.
  int max_batch = 64;
  // Admission (Add): requests not yet running and their prompt tokens;
  // beyond either bound Add answers RESOURCE_EXHAUSTED.
  int max_queued_requests = 256;
  int64_t max_queued_tokens = int64_t{1} << 20;
  // Per-step token budget: every running sequence counts 1 (its decode
  // token), start work counts its tokens. Decode is never cut; start work
  // takes what is left, FIFO. The first start of a step is always planned
  // (when a slot is free) even past the budget, so no request waits forever.
  int64_t max_step_tokens = 2048;
  // false: start work runs whole in one step (an executor that cannot pause
  // a prefill). true: it is split into chunks over steps; the first chunk of
  // a step gets at least min_chunk_tokens even when decode used the budget.
  bool chunked_start = false;
  int64_t min_chunk_tokens = 32;
  // A request awaiting K/V ends (kKvTimeout) when no K/V progress was
  // reported for longer than this; 0 disables.
  std::chrono::milliseconds kv_timeout{30000};
  // A request with no consumer attached this long after Add ends
  // (kNeverAttached); 0 disables.
  std::chrono::milliseconds attach_timeout{10000};
  // false: StepPlan::decode stays empty and only decode_count says how many
  // sequences decode (an executor that keeps its own batch, like the
  // simulator's: a plan then costs O(ended + started), not O(running)).
  bool list_decode = true;
};

struct ScheduledRequest {
  std::string id;
  int64_t prompt_tokens = 0;  // counts toward max_queued_tokens while queued
  // true: the K/V arrives from elsewhere (OnKvLanded makes it ready).
  // false: local prefill, ready once a consumer is attached.
  bool awaits_kv = true;
};

// Why Add refused a request.
enum class AddRejection { kNone, kDuplicate, kQueueRequests, kQueueTokens };

// Why the scheduler ended a request.
enum class EndReason { kCancelled, kTransferFailed, kNeverAttached, kKvTimeout };
const char* EndReasonName(EndReason reason);

struct EndedRequest {
  std::string id;
  EndReason reason;
  std::string detail;  // the Cancel / FailTransfer text; empty for timeouts
};

struct StartWork {
  std::string id;
  int64_t tokens = 0;  // charged to this step's budget
  // This chunk completes the start work: the request makes its first token
  // and decodes from the next step.
  bool completes = true;
};

struct StepPlan {
  std::vector<EndedRequest> ended;  // end these before anything else
  std::vector<StartWork> start;     // FIFO (Add order)
  std::vector<std::string> decode;  // one token each, FIFO (Add order); see list_decode
  int64_t decode_count = 0;         // every running sequence (listed or not)
  int64_t start_tokens = 0;         // sum of start[].tokens
  int64_t budget_tokens() const { return decode_count + start_tokens; }
  bool empty() const { return ended.empty() && start.empty() && decode_count == 0; }
};

struct StepResult {
  // Requests of the plan that finished during the step (a stop condition,
  // max tokens, an error): the scheduler forgets them. Every other request
  // of the plan advanced as planned.
  std::vector<std::string> finished;
};

class Scheduler {
 public:
  // INVALID_ARGUMENT for bad options.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(const SchedulerOptions& options);

  // Admission: INVALID_ARGUMENT for a bad request, ALREADY_EXISTS for a
  // live id, RESOURCE_EXHAUSTED past a queue bound (`*rejection`, when
  // given, says which). Once added, the request counts in the queue but is
  // not scheduled before Activate.
  absl::Status Add(const ScheduledRequest& request, SchedulerTime now,
                   AddRejection* rejection = nullptr);
  // The request's resources are reserved: schedulable from now on.
  // `start_tokens`: its start work (a local prefill's tokens); a request
  // awaiting K/V gets its own in OnKvLanded. NOT_FOUND when unknown.
  absl::Status Activate(const std::string& id, int64_t start_tokens);
  // Forgets a request without ending it (admission failed after Add).
  void Remove(const std::string& id);

  // A consumer attached (the stream): stops the attach timeout; a local
  // prefill becomes ready.
  void Attach(const std::string& id);
  // K/V of the request made progress (a message accepted or landed): the
  // K/V inactivity timeout counts from `now`.
  void OnKvProgress(const std::string& id, SchedulerTime now);
  // All of its K/V landed: ready to start, with `start_tokens` of start work
  // (a replay; 0 for an import alone).
  void OnKvLanded(const std::string& id, SchedulerTime now, int64_t start_tokens);
  // The request is ended at the next Schedule (kCancelled / kTransferFailed)
  // unless the executor reports it finished first. false when unknown.
  bool Cancel(const std::string& id, const std::string& reason);
  bool FailTransfer(const std::string& id, const std::string& detail);

  // Decides one step. Every Schedule is followed by Update before the next.
  // Costs O(started + ended + watched), plus O(waiting) with a timeout set
  // and O(running) when options.list_decode.
  StepPlan Schedule(SchedulerTime now);
  // Applies the executed plan: planned starts advance (complete ones run),
  // finished requests are forgotten.
  void Update(const StepResult& result);

  // Counts (all O(1)).
  int running() const { return running_; }
  // Requests known and not running (queued, incl. admitting and cancelled).
  int waiting() const { return static_cast<int>(by_id_.size()) - running_; }
  // Added, not yet activated (admissions in progress).
  int admitting() const { return admitting_; }
  // What the queue bounds count: not running, not cancelled.
  int queued_requests() const { return queued_; }
  int64_t queued_tokens() const { return queued_tokens_; }
  bool Contains(const std::string& id) const { return by_id_.count(id) > 0; }
  const SchedulerOptions& options() const { return options_; }

 private:
  enum class State { kAdmitting, kAwaitingKv, kAwaitingAttach, kReady, kStarting, kRunning };
  struct Entry {
    ScheduledRequest request;
    State state = State::kAdmitting;
    SchedulerTime added, progress;
    bool attached = false;
    bool cancelled = false;
    bool failed = false;
    std::string detail;
    int64_t work_left = 0;  // start work not yet run
  };

  using Entries = std::map<uint64_t, Entry>;  // by Add order: FIFO

  explicit Scheduler(const SchedulerOptions& options) : options_(options) {}
  Entry* Find(const std::string& id);
  // Why `e` ends at a Schedule at `now`, if it does.
  std::optional<EndReason> EndsNow(const Entry& e, SchedulerTime now) const;
  bool Queued(const Entry& e) const { return e.state != State::kRunning && !e.cancelled; }
  // Schedule must look at `e` even without timeouts: it may end.
  bool Watched(const Entry& e) const {
    return e.cancelled || e.failed ||
           (e.state == State::kRunning && !e.attached && options_.attach_timeout.count() > 0);
  }
  void MakeReady(const std::string& id, Entry* e);
  // Keep the counters in step with a change of `e`.
  void Unqueue(const Entry& e);
  void Erase(uint64_t order);

  SchedulerOptions options_;
  // Not running, and running. A step looks at the startable and watched
  // entries (and every waiting one when a timeout is set), never at all of
  // the running ones unless it lists them.
  Entries waiting_, running_entries_;
  std::set<uint64_t> startable_;  // ready or starting, by Add order
  std::set<uint64_t> watched_;    // may end (Watched)
  std::unordered_map<std::string, uint64_t> by_id_;
  uint64_t next_order_ = 0;
  int running_ = 0, starting_ = 0, admitting_ = 0, queued_ = 0;
  int64_t queued_tokens_ = 0;
  std::vector<StartWork> planned_starts_;  // of the plan awaiting Update
  bool in_step_ = false;
};

}  // namespace ced
