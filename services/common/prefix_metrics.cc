#include "services/common/prefix_metrics.h"

#include "engine/common/status.h"

namespace ced::services {

absl::StatusOr<PrefixCacheMetrics> PrefixCacheMetrics::Create(metrics::Registry* registry) {
  PrefixCacheMetrics m;
  ASSIGN_OR_RETURN(m.query_, metrics::AddUnlabelledCounter(
                                 *registry, "ced_prefix_cache_query_tokens_total",
                                 "Prompt tokens looked up in the prefix cache."));
  ASSIGN_OR_RETURN(m.hit_, metrics::AddUnlabelledCounter(
                               *registry, "ced_prefix_cache_hit_tokens_total",
                               "Prompt tokens whose global K/V the prefix cache held."));
  ASSIGN_OR_RETURN(m.evicted_, metrics::AddUnlabelledCounter(
                                   *registry, "ced_prefix_cache_evicted_blocks_total",
                                   "Cached blocks evicted to make room."));
  ASSIGN_OR_RETURN(auto* blocks,
                   registry->AddGauge("ced_prefix_cache_blocks",
                                      "Global K/V blocks held by the prefix cache: all of them "
                                      "(cached) and those no sequence uses (evictable).",
                                      {"state"}));
  ASSIGN_OR_RETURN(m.continued_,
                   metrics::AddUnlabelledCounter(
                       *registry, "ced_prefix_cache_continued_total",
                       "Prompts that extended a held sequence and continued its local windows "
                       "instead of rebuilding them."));
  ASSIGN_OR_RETURN(m.held_, metrics::AddUnlabelledGauge(
                                *registry, "ced_prefix_cache_held_sequences",
                                "Finished sequences held with their local windows for a prompt "
                                "that extends one."));
  m.cached_ = &blocks->WithLabels({{"state", "cached"}});
  m.evictable_ = &blocks->WithLabels({{"state", "evictable"}});
  return m;
}

void PrefixCacheMetrics::CountLookup(int prompt_tokens, int hit_tokens) {
  query_->Increment(prompt_tokens);
  hit_->Increment(hit_tokens);
}

void PrefixCacheMetrics::Update(const CacheStats& stats) {
  cached_->Set(stats.cached_blocks);
  evictable_->Set(stats.evictable_blocks);
  held_->Set(stats.held_sequences);
  if (stats.held_continued_total > continued_seen_) {
    continued_->Increment(static_cast<double>(stats.held_continued_total - continued_seen_));
    continued_seen_ = stats.held_continued_total;
  }
  if (stats.evicted_blocks_total > evicted_seen_) {
    evicted_->Increment(static_cast<double>(stats.evicted_blocks_total - evicted_seen_));
    evicted_seen_ = stats.evicted_blocks_total;
  }
}

}  // namespace ced::services
