// Prefix cache metrics, the same on both worker kinds (DESIGN.md §1.6):
//   ced_prefix_cache_query_tokens_total  prompt tokens looked up
//   ced_prefix_cache_hit_tokens_total    of those, found cached (not computed)
//   ced_prefix_cache_blocks              blocks held under a hash (state=cached)
//                                        and of those unreferenced (state=evictable)
//   ced_prefix_cache_evicted_blocks_total
//   ced_prefix_cache_held_sequences      finished sequences held with their local
//                                        windows (EngineOptions::max_held_sequences)
//   ced_prefix_cache_continued_total     prompts that continued a held sequence's
//                                        windows instead of rebuilding them
// Not thread-safe beyond what the metric types give: call from one thread or
// under the worker's lock.
#pragma once

#include "absl/status/statusor.h"
#include "engine/runtime/engine.h"
#include "services/metrics/registry.h"

namespace ced::services {

class PrefixCacheMetrics {
 public:
  static absl::StatusOr<PrefixCacheMetrics> Create(metrics::Registry* registry);
  // One prompt of `prompt_tokens`, `hit_tokens` of which came from the cache.
  void CountLookup(int prompt_tokens, int hit_tokens);
  // The cache's block counts now (from Engine::cache_stats()).
  void Update(const CacheStats& stats);

 private:
  metrics::Counter *query_ = nullptr, *hit_ = nullptr, *evicted_ = nullptr, *continued_ = nullptr;
  metrics::Gauge *cached_ = nullptr, *evictable_ = nullptr, *held_ = nullptr;
  int64_t evicted_seen_ = 0, continued_seen_ = 0;
};

}  // namespace ced::services
