// Registry of prefill and decode workers as the router sees them: what each
// holds, its last load report, and the work the router assigned to it since
// that report. Pure C++ (no gRPC): the cluster simulator uses it too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ced::router {

enum class Role { kPrefill, kDecode };

// Weights a worker holds (DESIGN.md 2). A decode worker always holds kFull;
// a prefill worker can replay only with kEncoderReplay or kFull.
enum class WeightsHeld { kEncoderOnly, kEncoderReplay, kFull };

struct WorkerInfo {
  std::string id;
  Role role = Role::kPrefill;
  WeightsHeld weights = WeightsHeld::kEncoderOnly;
  int64_t total_kv_blocks = 0;  // global-pool blocks
  int block_size = 0;           // tokens per block (> 0 for decode workers)
};

// A worker's own report. Prefill tokens are prompt tokens still to compute.
struct WorkerLoad {
  int64_t queued_prefill_tokens = 0;    // accepted, not started
  int64_t inflight_prefill_tokens = 0;  // started, not finished
  int64_t running_sequences = 0;
  int64_t waiting_sequences = 0;
  int64_t free_kv_blocks = 0;                        // reservations already subtracted
  absl::Time last_heartbeat = absl::InfinitePast();  // when the router received it
};

// Work the router assigned to a worker since its last report (which cannot
// include it yet). Cleared by the next Update.
struct PendingWork {
  int64_t prefill_tokens = 0;
  int64_t kv_blocks = 0;
  int64_t sequences = 0;
};

// One worker's entry, copied out of the table.
struct WorkerState {
  WorkerInfo info;
  WorkerLoad load;
  PendingWork pending;
  bool live = false;  // heartbeat age <= heartbeat_timeout at the snapshot time
};

// Thread-safe: every method may be called concurrently. Time is passed in by
// the caller (tests and the simulator use their own clock).
class WorkerTable {
 public:
  struct Options {
    // A worker whose last heartbeat is older than this gets no work.
    absl::Duration heartbeat_timeout = absl::Seconds(5);
  };

  explicit WorkerTable(const Options& options);
  WorkerTable(const WorkerTable&) = delete;
  WorkerTable& operator=(const WorkerTable&) = delete;

  // Adds a worker, or replaces a worker with the same id (a restart: its load
  // and pending work are reset). Registration counts as a heartbeat at `now`
  // with all KV blocks free. INVALID_ARGUMENT on an empty id, a decode worker
  // without kFull weights or without a positive block size, or negative sizes.
  absl::Status Register(const WorkerInfo& info, absl::Time now);

  // Records a load report and clears the worker's pending work. A report with
  // an older last_heartbeat than the stored one is ignored (reordered RPCs).
  // NOT_FOUND for an unknown id (the worker should register again).
  absl::Status Update(const std::string& id, const WorkerLoad& load);

  // NOT_FOUND for an unknown id.
  absl::Status Remove(const std::string& id);

  // Returns the ids (sorted) of workers that went stale since the previous
  // call, for logging and metrics. Selection never depends on this call: a
  // worker is live exactly while now - last_heartbeat <= heartbeat_timeout,
  // and rejoins with its next report.
  std::vector<std::string> MarkStale(absl::Time now);

  // Adds the router's own assignment to a worker's pending work. NOT_FOUND if
  // the worker was removed meanwhile.
  absl::Status AddPending(const std::string& id, const PendingWork& work);

  // Every worker (live or not), sorted by id.
  std::vector<WorkerState> Snapshot(absl::Time now) const;

  absl::Duration heartbeat_timeout() const { return options_.heartbeat_timeout; }

 private:
  struct Entry {
    WorkerInfo info;
    WorkerLoad load;
    PendingWork pending;
    bool reported_stale = false;
  };

  const Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ced::router
