#include "services/router_policy/policy.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"

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
  return std::unique_ptr<CedRoutingPolicy>(new CedRoutingPolicy(table, options));
}

CedRoutingPolicy::CedRoutingPolicy(WorkerTable* table, const Options& options)
    : table_(table), options_(options) {}

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
  const int64_t total_tokens = request.prompt_tokens + request.max_tokens;

  // Prefill: least outstanding work; the snapshot is sorted, so the first
  // minimum is the smallest id.
  const WorkerState* prefill = nullptr;
  int64_t prefill_outstanding = 0;
  // Decode: enough room, then the best score.
  const WorkerState* decode = nullptr;
  double decode_score = 0;
  int64_t decode_blocks = 0;
  bool any_live_decode = false;
  int64_t largest_room = 0;
  for (const WorkerState& worker : workers) {
    if (!worker.live || absl::c_linear_search(request.exclude_ids, worker.info.id)) continue;
    if (worker.info.role == Role::kPrefill) {
      const int64_t outstanding = Outstanding(worker);
      if (prefill == nullptr || outstanding < prefill_outstanding) {
        prefill = &worker;
        prefill_outstanding = outstanding;
      }
      continue;
    }
    any_live_decode = true;
    const int64_t need = BlocksFor(total_tokens, worker.info.block_size);
    const int64_t room = worker.load.free_kv_blocks - worker.pending.kv_blocks;
    largest_room = std::max(largest_room, room);
    if (room < need || worker.info.total_kv_blocks <= 0) continue;
    const double score =
        static_cast<double>(room - need) / static_cast<double>(worker.info.total_kv_blocks) -
        options_.batch_load_weight * static_cast<double>(DecodeBatch(worker)) /
            static_cast<double>(options_.decode_batch_reference);
    if (decode == nullptr || score > decode_score) {
      decode = &worker;
      decode_score = score;
      decode_blocks = need;
    }
  }
  if (!any_live_decode) return absl::UnavailableError("no decode worker available");
  if (decode == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("no decode worker has KV room for ", total_tokens,
                     " tokens (prompt + max_tokens); largest free: ", largest_room, " blocks"));
  }

  Decision decision;
  decision.decode_id = decode->info.id;
  decision.kv_blocks = decode_blocks;

  const bool short_prompt = options_.local_prefill_max_prompt_tokens > 0 &&
                            request.prompt_tokens <= options_.local_prefill_max_prompt_tokens;
  if (prefill == nullptr) {
    if (!short_prompt && !options_.local_prefill_fallback) {
      return absl::UnavailableError("no prefill worker available");
    }
    decision.local_prefill = true;
  } else if (short_prompt && prefill_outstanding > options_.local_prefill_threshold_tokens) {
    decision.local_prefill = true;
  }

  if (decision.local_prefill) {
    decision.est_prefill_wait_tokens = Outstanding(*decode);
    decision.replay_on = ReplayOn::kDecode;
  } else {
    decision.prefill_id = prefill->info.id;
    decision.est_prefill_wait_tokens = prefill_outstanding;
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

  // Record the assignment so that the next Select sees it before the workers
  // report it. A worker removed since the snapshot fails the request: the
  // caller may retry.
  const std::string& prefill_worker =
      decision.local_prefill ? decision.decode_id : decision.prefill_id;
  RETURN_IF_ERROR(table_->AddPending(prefill_worker, PendingWork{request.prompt_tokens, 0, 0}));
  RETURN_IF_ERROR(table_->AddPending(decision.decode_id, PendingWork{0, decision.kv_blocks, 1}));
  return decision;
}

}  // namespace ced::router
