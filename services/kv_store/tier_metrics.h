// Metrics of the KV tiers (engine/kv/kv_tiers.h), the same on both worker
// kinds, sampled from the engine at every scrape:
//   ced_kv_tier_hit_blocks_total{tier}        blocks served from the tier
//   ced_kv_tier_miss_blocks_total{tier}       blocks asked of it and not served
//   ced_kv_tier_read_bytes_total{tier}        stored bytes read
//   ced_kv_tier_written_bytes_total{tier}     stored bytes written
//   ced_kv_tier_rejected_blocks_total{tier,reason}  failed checks: dropped, never served
//   ced_kv_tier_errors_total{tier}            store/I-O failures (degraded to recompute)
//   ced_kv_tier_dropped_writes_total{tier}    writes dropped (queue full, too big)
//   ced_kv_tier_resident_bytes{tier}, ced_kv_tier_resident_blocks{tier}  (host, disk)
//   ced_kv_tier_read_seconds{tier}            histogram: one per read call (kv_tiers.h)
//   ced_kv_tier_write_seconds{tier}           histogram: one per write call
// tier = host | disk | redis. The histograms' buckets are kKvTierLatencyBounds
// (10 us .. 10 s); failed calls are observed too.
#pragma once

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "engine/kv/block_store.h"
#include "services/metrics/registry.h"

namespace ced::services {

// Registers the families and a collect hook that reads `stats` (called from
// scraping threads; it must be thread-safe, as Engine::kv_tier_stats is).
absl::Status RegisterKvTierMetrics(metrics::Registry* registry,
                                   std::function<std::vector<KvTierStats>()> stats);

}  // namespace ced::services
