#include "services/router_policy/policy.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "services/router_policy/errors.h"

namespace ced::router {
namespace {

// Bounds request sizes so that block arithmetic cannot overflow.
constexpr int64_t kMaxRequestTokens = int64_t{1} << 40;

int64_t BlocksFor(int64_t tokens, int block_size) { return (tokens + block_size - 1) / block_size; }

absl::Status ValidateRequest(const RouteRequest& request) {
  if (request.prompt_tokens < 1 || request.prompt_tokens > kMaxRequestTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("route: prompt_tokens must be in [1, 2^40], got ", request.prompt_tokens));
  }
  if (request.max_tokens < 1 || request.max_tokens > kMaxRequestTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("route: max_tokens must be in [1, 2^40], got ", request.max_tokens));
  }
  return absl::OkStatus();
}

int64_t DecodeBatch(const WorkerState& worker) {
  return worker.load.running_sequences + worker.load.waiting_sequences + worker.pending.sequences;
}

}  // namespace

const char* ReplayOnName(ReplayOn replay_on) {
  return replay_on == ReplayOn::kPrefill ? "prefill" : "decode";
}

const char* PlacementReasonName(PlacementReason reason) {
  switch (reason) {
    case PlacementReason::kCache:
      return "cache";
    case PlacementReason::kSession:
      return "session";
    default:
      return "load";
  }
}

const char* LocalPrefillReasonName(LocalPrefillReason reason) {
  switch (reason) {
    case LocalPrefillReason::kShortSuffix:
      return "short_suffix";
    case LocalPrefillReason::kShortPrompt:
      return "short_prompt";
    case LocalPrefillReason::kNoPrefillWorker:
      return "no_prefill_worker";
    default:
      return "pool";
  }
}

absl::StatusOr<std::unique_ptr<CedRoutingPolicy>> CedRoutingPolicy::Create(WorkerTable* table,
                                                                           const Options& options) {
  if (table == nullptr) return absl::InvalidArgumentError("routing policy: worker table is null");
  if (options.auto_prefill_busy_tokens < 0 || options.auto_decode_idle_sequences < 0 ||
      options.local_prefill_max_prompt_tokens < 0 || options.local_prefill_threshold_tokens < 0) {
    return absl::InvalidArgumentError("routing policy: token and sequence thresholds must be >= 0");
  }
  if (options.decode_batch_reference <= 0) {
    return absl::InvalidArgumentError("routing policy: decode_batch_reference must be > 0");
  }
  if (!(options.batch_load_weight >= 0)) {
    return absl::InvalidArgumentError("routing policy: batch_load_weight must be >= 0");
  }
  if (!(options.decode_cache_weight >= 0) || options.local_prefill_max_uncached_tokens < 0) {
    return absl::InvalidArgumentError(
        "routing policy: decode_cache_weight and local_prefill_max_uncached_tokens must be >= 0");
  }
  if (options.sessions.max_sessions < 1 || options.sessions.ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("routing policy: sessions need max_sessions >= 1, ttl > 0");
  }
  return std::unique_ptr<CedRoutingPolicy>(new CedRoutingPolicy(table, options));
}

CedRoutingPolicy::CedRoutingPolicy(WorkerTable* table, const Options& options)
    : table_(table), options_(options), sessions_(options.sessions) {}

int64_t CedRoutingPolicy::MatchedTokens(const WorkerState& worker,
                                        const RouteRequest& request) const {
  if (options_.block_index == nullptr || request.block_hashes.empty() ||
      request.hash_block_size <= 0) {
    return 0;
  }
  // The engine reuses at most N - 1 prompt tokens (the last one is computed).
  const int64_t max_blocks =
      std::min<int64_t>(static_cast<int64_t>(request.block_hashes.size()),
                        (request.prompt_tokens - 1) / request.hash_block_size);
  if (max_blocks <= 0) return 0;
  const int64_t blocks = options_.block_index->MatchBlocks(
      worker.info.id, request.hash_root, request.hash_block_size,
      absl::MakeConstSpan(request.block_hashes).first(static_cast<size_t>(max_blocks)));
  return blocks * request.hash_block_size;
}

int64_t CedRoutingPolicy::Outstanding(const WorkerState& worker) const {
  if (!options_.count_inflight) return worker.load.queued_prefill_tokens;
  return worker.load.queued_prefill_tokens + worker.load.inflight_prefill_tokens +
         worker.pending.prefill_tokens;
}

absl::StatusOr<Decision> CedRoutingPolicy::Select(const RouteRequest& request) {
  RETURN_IF_ERROR(ValidateRequest(request));
  const absl::Time now = options_.clock ? options_.clock() : absl::Now();
  absl::MutexLock lock(&select_mu_);
  return Decide(request, now);
}

absl::StatusOr<Decision> CedRoutingPolicy::Decide(const RouteRequest& request, absl::Time now) {
  const std::vector<WorkerState> workers = table_->Snapshot(now);
  const int64_t n = request.prompt_tokens;
  const int64_t total_tokens = n + request.max_tokens;
  const bool cache_aware = options_.routing == Routing::kCacheAware;
  std::optional<SessionPlacement> session;
  if (cache_aware && !request.session_id.empty()) session = sessions_.Find(request.session_id, now);
  // What the session hint says a worker holds: its last prompt, whole blocks,
  // at most N - 1 tokens.
  auto session_tokens = [&](const WorkerState& worker, const std::string& sticky_id) -> int64_t {
    if (!session || worker.info.id != sticky_id) return 0;
    int64_t t = std::min(session->prompt_tokens, n - 1);
    if (worker.info.block_size > 0) t -= t % worker.info.block_size;
    return std::max<int64_t>(0, t);
  };

  // A session's next turn comes after its last one finished: what that turn
  // added to its workers' pending work is done, unless they reported since
  // (which cleared it already).
  std::vector<WorkerState> adjusted;
  if (session) {
    adjusted = workers;
    for (WorkerState& w : adjusted) {
      if (w.load.last_heartbeat > session->last_used) continue;
      if (w.info.id == session->prefill_id) {
        w.pending.prefill_tokens -= std::min(w.pending.prefill_tokens, session->prefill_work);
      }
      if (w.info.id == session->decode_id) {
        w.pending.kv_blocks -= std::min(w.pending.kv_blocks, session->kv_blocks);
        w.pending.sequences -= std::min<int64_t>(w.pending.sequences, 1);
      }
    }
  }
  const std::vector<WorkerState>& candidates = session ? adjusted : workers;

  // Prefill: least cost; the snapshot is sorted, so the first minimum is the
  // smallest id.
  const WorkerState* prefill = nullptr;
  int64_t prefill_cost = 0, prefill_outstanding = 0, prefill_cached = 0;
  bool prefill_by_session = false;
  // Decode: enough room, then the best score. Room counts the blocks of
  // placements made since the worker's last report (pending); a worker
  // whose last report has room but whose pending work does not fit is
  // taken only when no worker fits with it. Pending work is an estimate:
  // requests placed since the report may be over already (a short request
  // on a small cache ends well within a report interval), and the worker
  // itself refuses a reservation it cannot hold (the gateway then places
  // the request elsewhere), so it must not refuse requests on its own.
  const WorkerState* decode = nullptr;
  bool decode_fits_pending = false;
  double decode_score = 0;
  int64_t decode_blocks = 0, decode_matched = 0, decode_cached = 0;
  bool decode_by_session = false;
  bool any_live_decode = false;
  int64_t largest_room = 0, largest_total = 0;
  bool could_ever_fit = false;  // some decode worker's whole cache holds it
  for (const WorkerState& worker : candidates) {
    if (!worker.live || absl::c_linear_search(request.exclude_ids, worker.info.id)) continue;
    const int64_t matched = MatchedTokens(worker, request);
    if (worker.info.role == Role::kPrefill) {
      const int64_t outstanding = Outstanding(worker);
      int64_t cached = 0, cost = outstanding;
      bool by_session = false;
      if (cache_aware) {
        const int64_t hinted = session_tokens(worker, session ? session->prefill_id : "");
        cached = std::max(matched, hinted);
        by_session = hinted > matched;
        cost += n - cached;
      } else {
        cached = matched;
      }
      if (prefill == nullptr || cost < prefill_cost) {
        prefill = &worker;
        prefill_cost = cost;
        prefill_outstanding = outstanding;
        prefill_cached = cached;
        prefill_by_session = by_session;
      }
      continue;
    }
    any_live_decode = true;
    const int64_t need = BlocksFor(total_tokens, worker.info.block_size);
    const int64_t room = worker.load.free_kv_blocks - worker.pending.kv_blocks;
    largest_room = std::max(largest_room, worker.load.free_kv_blocks);
    largest_total = std::max(largest_total, worker.info.total_kv_blocks);
    could_ever_fit = could_ever_fit || worker.info.total_kv_blocks >= need;
    if (worker.load.free_kv_blocks < need || worker.info.total_kv_blocks <= 0) continue;
    const bool fits_pending = room >= need;
    double score =
        static_cast<double>(room - need) / static_cast<double>(worker.info.total_kv_blocks) -
        options_.batch_load_weight * static_cast<double>(DecodeBatch(worker)) /
            static_cast<double>(options_.decode_batch_reference);
    int64_t cached = matched;
    bool by_session = false;
    if (cache_aware) {
      const int64_t hinted = session_tokens(worker, session ? session->decode_id : "");
      cached = std::max(matched, hinted);
      by_session = hinted > matched;
      score += options_.decode_cache_weight * static_cast<double>(cached) / static_cast<double>(n);
    }
    if (decode == nullptr || (fits_pending && !decode_fits_pending) ||
        (fits_pending == decode_fits_pending && score > decode_score)) {
      decode = &worker;
      decode_fits_pending = fits_pending;
      decode_score = score;
      decode_blocks = need;
      decode_matched = matched;
      decode_cached = cached;
      decode_by_session = by_session;
    }
  }
  if (!any_live_decode) return absl::UnavailableError("no decode worker available");
  if (decode == nullptr && !could_ever_fit) {
    return absl::ResourceExhaustedError(
        absl::StrCat(total_tokens, " tokens (prompt + max_tokens) are ", kLargerThanEveryCache,
                     " (the largest has ", largest_total, " blocks)"));
  }
  if (decode == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no decode worker has KV room for ", total_tokens,
                     " tokens (prompt + max_tokens); largest free: ", largest_room, " blocks"));
  }

  Decision decision;
  decision.decode_id = decode->info.id;
  decision.kv_blocks = decode_blocks;
  decision.decode_cached_tokens = decode_cached;

  // A request that names its replay placement gets the disaggregated path it
  // asked for; so does every request when the fleet forces replay on prefill.
  const bool placement_free = (request.replay_on == ReplayOnChoice::kUnspecified &&
                               options_.replay_on != ReplayOnChoice::kPrefill) ||
                              request.replay_on == ReplayOnChoice::kAuto;
  const bool short_suffix = cache_aware && placement_free && decode_matched > 0 &&
                            options_.local_prefill_max_uncached_tokens > 0 &&
                            n - decode_matched <= options_.local_prefill_max_uncached_tokens;
  const bool short_prompt =
      options_.local_prefill_max_prompt_tokens > 0 && n <= options_.local_prefill_max_prompt_tokens;
  if (short_suffix) {
    decision.local_prefill = true;
    decision.local_reason = LocalPrefillReason::kShortSuffix;
  } else if (prefill == nullptr) {
    if (!short_prompt && !options_.local_prefill_fallback) {
      return absl::UnavailableError("no prefill worker available");
    }
    decision.local_prefill = true;
    decision.local_reason = LocalPrefillReason::kNoPrefillWorker;
  } else if (short_prompt && prefill_outstanding > options_.local_prefill_threshold_tokens) {
    decision.local_prefill = true;
    decision.local_reason = LocalPrefillReason::kShortPrompt;
  }

  bool by_session = decode_by_session;
  bool by_cache = decode_cached > 0 && !decode_by_session;
  if (decision.local_prefill) {
    decision.est_prefill_wait_tokens = Outstanding(*decode);
    decision.replay_on = ReplayOn::kDecode;
    decision.prefill_cached_tokens = decode_matched;
  } else {
    decision.prefill_id = prefill->info.id;
    decision.est_prefill_wait_tokens = prefill_outstanding;
    decision.prefill_cached_tokens = prefill_cached;
    by_session = by_session || prefill_by_session;
    by_cache = by_cache || (prefill_cached > 0 && !prefill_by_session);
    ReplayOnChoice choice =
        request.replay_on != ReplayOnChoice::kUnspecified ? request.replay_on : options_.replay_on;
    if (choice == ReplayOnChoice::kUnspecified) choice = ReplayOnChoice::kAuto;
    switch (choice) {
      case ReplayOnChoice::kPrefill:
        decision.replay_on = ReplayOn::kPrefill;
        break;
      case ReplayOnChoice::kDecode:
        decision.replay_on = ReplayOn::kDecode;
        break;
      default: {
        const bool prefill_busy = prefill_outstanding > options_.auto_prefill_busy_tokens;
        const bool decode_idle = DecodeBatch(*decode) < options_.auto_decode_idle_sequences;
        decision.replay_on = prefill_busy && decode_idle ? ReplayOn::kDecode : ReplayOn::kPrefill;
        break;
      }
    }
    if (prefill->info.weights == WeightsHeld::kEncoderOnly) decision.replay_on = ReplayOn::kDecode;
  }
  if (options_.decoder_only) decision.replay_on = ReplayOn::kPrefill;
  if (cache_aware) {
    decision.reason = by_cache     ? PlacementReason::kCache
                      : by_session ? PlacementReason::kSession
                                   : PlacementReason::kLoad;
  }

  // Record the assignment so that the next Select sees it before the workers
  // report it. A worker removed since the snapshot fails the request: the
  // caller may retry.
  const std::string& prefill_worker =
      decision.local_prefill ? decision.decode_id : decision.prefill_id;
  const int64_t prefill_work = cache_aware ? n - decision.prefill_cached_tokens : n;
  RETURN_IF_ERROR(table_->AddPending(prefill_worker, PendingWork{prefill_work, 0, 0}));
  RETURN_IF_ERROR(table_->AddPending(decision.decode_id, PendingWork{0, decision.kv_blocks, 1}));
  // Both workers will publish the prompt's full blocks.
  if (options_.block_index != nullptr && !request.block_hashes.empty()) {
    for (const std::string* id : {&decision.decode_id, &decision.prefill_id}) {
      if (id->empty()) continue;
      options_.block_index->Predict(*id, request.hash_root, request.hash_block_size,
                                    request.block_hashes);
    }
  }
  if (!request.session_id.empty()) {
    sessions_.Record(request.session_id, SessionPlacement{decision.decode_id, prefill_worker, n,
                                                          prefill_work, decision.kv_blocks, now});
  }
  return decision;
}

}  // namespace ced::router
