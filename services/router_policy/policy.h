// The router's placement policy: which prefill worker, which decode worker,
// and where the decoder replay runs. Pure C++ over a WorkerTable, no gRPC, so
// the cluster simulator runs the same code as the router service.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/router_policy/block_index.h"
#include "services/router_policy/session_table.h"
#include "services/router_policy/worker_table.h"

namespace ced::router {

// Where the decoder replay of the prompt's last R tokens runs.
enum class ReplayOn { kPrefill, kDecode };

// What a request (or the fleet configuration) asks for.
enum class ReplayOnChoice { kUnspecified, kPrefill, kDecode, kAuto };

// kLoad: placement by load alone (caches ignored, for comparison).
// kCacheAware: by tokens left to compute plus load (DESIGN.md 1.6).
enum class Routing { kLoad, kCacheAware };

// Why a placement went where it did (metrics). kCache: a worker's predicted
// cached prefix counted; kSession: only the session hint did; kLoad: neither.
enum class PlacementReason { kLoad, kCache, kSession };
// Why the decode worker prefills itself (kPool: it does not).
enum class LocalPrefillReason { kPool, kShortSuffix, kShortPrompt, kNoPrefillWorker };

struct RouteRequest {
  int64_t prompt_tokens = 0;  // >= 1
  int64_t max_tokens = 0;     // >= 1
  // kUnspecified: the policy's configured default; anything else wins over it.
  ReplayOnChoice replay_on = ReplayOnChoice::kUnspecified;
  // Workers this request must not go to (they failed under it: migration).
  std::vector<std::string> exclude_ids;
  // Optional sticky-placement hint (never an error when unknown).
  std::string session_id;
  // The prompt's block hash chain h_1, h_2, ... (its full blocks) under
  // `hash_root` and `hash_block_size`; empty: unknown (no cache matching).
  std::vector<BlockKey> block_hashes;
  BlockKey hash_root;
  int hash_block_size = 0;
};

struct Decision {
  std::string prefill_id;  // empty when local_prefill
  std::string decode_id;
  ReplayOn replay_on = ReplayOn::kPrefill;  // always kPrefill for decoder-only models
  bool local_prefill = false;               // the decode worker runs the prefill itself
  // Prefill tokens ahead of this request on the worker that will prefill it.
  int64_t est_prefill_wait_tokens = 0;
  // Global-pool blocks the decode worker needs: ceil((prompt + max) / block_size).
  int64_t kv_blocks = 0;
  // Prompt tokens predicted cached on the worker that prefills (the decode
  // worker when local_prefill) and on the decode worker.
  int64_t prefill_cached_tokens = 0;
  int64_t decode_cached_tokens = 0;
  PlacementReason reason = PlacementReason::kLoad;
  LocalPrefillReason local_reason = LocalPrefillReason::kPool;
};

// One method, like a load-balancing policy. Implementations are thread-safe.
class RoutingPolicy {
 public:
  virtual ~RoutingPolicy() = default;
  // Picks workers for one request and records the assignment so that the
  // next call sees it. INVALID_ARGUMENT for bad sizes, UNAVAILABLE when no
  // live worker can take the request, RESOURCE_EXHAUSTED when no decode
  // worker has room.
  virtual absl::StatusOr<Decision> Select(const RouteRequest& request) = 0;
};

// The ced-serve policy.
//
// Cached prefix c(w) of a worker (kCacheAware, DESIGN.md 1.6): the longest run
// of the request's block chain that options.block_index says w holds, at most
// N - 1 tokens (N = prompt_tokens). With a session_id whose last turn went to
// w, c(w) is at least that turn's prompt (whole blocks, <= N - 1): the index
// may not have heard of it yet. kLoad ignores both (c = 0).
//
// Prefill worker: the live prefill worker with the least
//   cost = outstanding + (N - c(p)),
//   outstanding = queued + inflight prefill tokens (last report)
//               + prefill tokens this policy assigned since that report,
//   i.e. a cached prefix wins until the load gap exceeds the work it saves.
//   With count_inflight = false outstanding is the reported queued tokens
//   alone (the naive policy the simulator compares against).
// Decode worker: among live decode workers whose free blocks, less the blocks
//   this policy reserved since their last report, cover
//   need = ceil((prompt_tokens + max_tokens) / block_size), the highest
//     score = (free - pending - need) / total_kv_blocks
//           - batch_load_weight * (running + waiting + pending sequences)
//                               / decode_batch_reference
//           + decode_cache_weight * c(d) / N,
//   i.e. the KV headroom left after admission minus the batch pressure, plus
//   the share of the prompt whose K/V need not move.
// Local prefill (conditional disaggregation), in this order:
//   - kCacheAware: when the chosen decode worker's verified hit (index only,
//     not the session hint) leaves N - c(d) <= local_prefill_max_uncached_tokens,
//     and the placement is the policy's to choose: the request's replay_on is
//     kAuto, or kUnspecified while options.replay_on is not kPrefill;
//   - a prompt of at most local_prefill_max_prompt_tokens when the best
//     prefill worker's outstanding work exceeds local_prefill_threshold_tokens;
//   - no live prefill worker: short suffixes or prompts as above, others only
//     with local_prefill_fallback; otherwise UNAVAILABLE.
// replay_on: the request's choice, else options.replay_on. kAuto replays on
//   the prefill worker unless its outstanding work exceeds
//   auto_prefill_busy_tokens while the decode worker has fewer than
//   auto_decode_idle_sequences running + waiting (+ pending) sequences: then
//   decode has the slack. Never on a prefill worker holding kEncoderOnly
//   weights (decode instead), always decode for a local prefill, and reported
//   as kPrefill for decoder-only models, where there is no replay.
// After a decision the chosen workers' index entries get the prompt's chain
// (they will publish it) and the session remembers the placement.
// A session's next turn is taken to mean its last one finished: the pending
// work that turn added to its workers no longer counts (until they report).
// Workers named in request.exclude_ids count as not live for that request.
// Ties go to the smaller worker id.
class CedRoutingPolicy final : public RoutingPolicy {
 public:
  struct Options {
    bool count_inflight = true;
    bool decoder_only = false;                         // E == L: replay_on is irrelevant
    ReplayOnChoice replay_on = ReplayOnChoice::kAuto;  // kUnspecified means kAuto
    int64_t auto_prefill_busy_tokens = 8192;
    int64_t auto_decode_idle_sequences = 8;
    int64_t local_prefill_max_prompt_tokens = 0;  // 0 disables short-prompt local prefill
    int64_t local_prefill_threshold_tokens = 4096;
    bool local_prefill_fallback = false;
    double batch_load_weight = 0.5;
    int64_t decode_batch_reference = 64;
    Routing routing = Routing::kCacheAware;
    // Who holds which blocks; not owned, may be null (then no cache matching).
    BlockIndex* block_index = nullptr;
    int64_t local_prefill_max_uncached_tokens = 256;  // 0: never for this reason
    double decode_cache_weight = 1.0;
    SessionTable::Options sessions;
    // Current time; absl::Now when empty. The simulator and tests inject theirs.
    std::function<absl::Time()> clock;
  };

  // `table` is not owned and must outlive the policy. INVALID_ARGUMENT for a
  // null table or negative / zero thresholds where they make no sense.
  static absl::StatusOr<std::unique_ptr<CedRoutingPolicy>> Create(WorkerTable* table,
                                                                  const Options& options);

  absl::StatusOr<Decision> Select(const RouteRequest& request) override;

 private:
  CedRoutingPolicy(WorkerTable* table, const Options& options);

  int64_t Outstanding(const WorkerState& worker) const;
  absl::StatusOr<Decision> Decide(const RouteRequest& request, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(select_mu_);
  // Index-verified cached prefix of `worker` for the request (tokens).
  int64_t MatchedTokens(const WorkerState& worker, const RouteRequest& request) const;

  WorkerTable* const table_;
  const Options options_;
  // Serializes Select so that the snapshot, the decision and the recorded
  // pending work form one step.
  absl::Mutex select_mu_;
  SessionTable sessions_ ABSL_GUARDED_BY(select_mu_);
};

const char* ReplayOnName(ReplayOn replay_on);                   // "prefill" / "decode"
const char* PlacementReasonName(PlacementReason reason);        // "load" / "cache" / "session"
const char* LocalPrefillReasonName(LocalPrefillReason reason);  // "pool" / "short_suffix" / ...

}  // namespace ced::router
