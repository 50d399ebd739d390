// Decode-instance admission, as the decode worker does it (services/decode,
// Reserve -> Engine::CreateSequence): a request is admitted only when the
// engine's block allocator (engine/kv/block_allocator.h, linked, the same
// class the worker's KV cache uses) hands out the global-pool blocks for
// prompt + max_tokens positions, and they stay allocated until it finishes.
// Allocation is all-or-nothing. Thread-compatible.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/block_allocator.h"
#include "services/router_policy/policy.h"

namespace ced::sim {

// ceil((prompt + max_tokens) / block_size) blocks: Engine::CreateSequence's
// figure for a sequence of that capacity, and the router's.
int64_t BlocksForRequest(int64_t prompt_tokens, int64_t max_tokens, int block_size);

// One decode instance's global KV pool.
class DecodeKvPool {
 public:
  DecodeKvPool(int64_t num_blocks, int block_size);
  // Allocates the request's blocks into `*blocks` and returns true, or
  // leaves the pool unchanged and returns false when they do not fit.
  bool TryAdmit(int64_t prompt_tokens, int64_t max_tokens, std::vector<int>* blocks);
  // Returns blocks from TryAdmit to the pool (cleared).
  void Release(std::vector<int>* blocks);
  int64_t free_blocks() const { return allocator_.num_free(); }
  int64_t total_blocks() const { return allocator_.num_total(); }

 private:
  BlockAllocator allocator_;
  int block_size_;
};

// A decode instance's early load reports, for both simulators, as the decode
// worker sends them (RouterClient::ReportSoon): short of room (it refused a
// reservation for room, its last report showed under a quarter of its blocks
// free, or the router refused a request for room in the last 3 s and said so
// in its heartbeat answer), it reports freed blocks at once, at most every
// 10 ms, not at the next heartbeat.
class EarlyReports {
 public:
  // A reservation was refused for room here.
  void Refused() { refused_for_room_ = true; }
  // A load report of `free_blocks` of `total_blocks` is sent at `now`;
  // `router_refused_at` is when the router last refused a request for room
  // (< 0: never).
  void OnReport(int64_t free_blocks, int64_t total_blocks, double now, double router_refused_at) {
    reported_tight_ = free_blocks * 4 < total_blocks;
    if (router_refused_at >= 0 && now - router_refused_at < 3.0) refused_for_room_ = true;
  }
  // Blocks were freed at `now`: when to send an early report, or < 0 for none.
  double AfterRelease(double now) {
    if (!refused_for_room_ && !reported_tight_) return -1;
    refused_for_room_ = false;
    last_ = std::max(now, last_ + 0.010);
    return last_;
  }

 private:
  bool refused_for_room_ = false;
  bool reported_tight_ = false;
  double last_ = -1;  // the last early report's time
};

// How the gateway places a request, for both simulators: the router's
// policy picks a (prefill, decode) pair and `reserve(decision)` asks the
// decode instance (its blocks, its scheduler's queue bounds; true when it
// took the request).
enum class Placement {
  kPlaced,
  kWait,     // no room now: route it again at the next load report
  kRefused,  // RESOURCE_EXHAUSTED to the client (refuse_when_full)
  kFailed,   // the policy found no worker at all (not a question of room)
};
// Without refuse_when_full a request no decode instance has room for waits
// (kWait). With it, as the gateway: a decode instance that refuses the
// reservation is excluded and the request routed again, at most
// reserve_retries times, and the router finding no decode instance with room
// refuses it. `*router_refused` (may be null) is set when the router's
// policy found no decode instance with room (the router then asks the
// workers for early load reports: HeartbeatResponse.report_freed_room).
template <typename Reserve>
Placement PlaceLikeTheGateway(router::RoutingPolicy* policy, router::RouteRequest route,
                              bool refuse_when_full, int reserve_retries, Reserve&& reserve,
                              bool* router_refused = nullptr) {
  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<router::Decision> decision = policy->Select(route);
    if (!decision.ok()) {
      if (!absl::IsResourceExhausted(decision.status())) return Placement::kFailed;
      if (router_refused != nullptr) *router_refused = true;
      return refuse_when_full ? Placement::kRefused : Placement::kWait;
    }
    if (reserve(*decision)) return Placement::kPlaced;
    if (!refuse_when_full) return Placement::kWait;  // the router's view was stale
    if (attempt >= reserve_retries) return Placement::kRefused;
    route.exclude_ids.push_back(decision->decode_id);
  }
}

}  // namespace ced::sim
