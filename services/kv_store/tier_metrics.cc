#include "services/kv_store/tier_metrics.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "engine/common/status.h"

namespace ced::services {
namespace {

struct State {
  std::function<std::vector<KvTierStats>()> stats;
  metrics::Family<metrics::Counter> *hit = nullptr, *miss = nullptr, *read = nullptr,
                                    *written = nullptr, *rejected = nullptr, *errors = nullptr,
                                    *dropped = nullptr;
  metrics::Family<metrics::Gauge> *resident_bytes = nullptr, *resident_blocks = nullptr;
  std::mutex mu;
  std::map<std::string, int64_t> seen;  // series -> the total last exported

  void Add(metrics::Counter& c, const std::string& series, int64_t total) {
    int64_t& last = seen[series];
    if (total > last) c.Increment(static_cast<double>(total - last));
    last = std::max(last, total);
  }

  void Collect() {
    const std::vector<KvTierStats> all = stats();
    std::lock_guard<std::mutex> lock(mu);
    for (const KvTierStats& s : all) {
      const std::string& t = s.tier;
      Add(hit->WithLabelValues({t}), "hit/" + t, s.hit_blocks);
      Add(miss->WithLabelValues({t}), "miss/" + t, s.miss_blocks);
      Add(read->WithLabelValues({t}), "read/" + t, s.read_bytes);
      Add(written->WithLabelValues({t}), "written/" + t, s.written_bytes);
      Add(errors->WithLabelValues({t}), "errors/" + t, s.errors);
      Add(dropped->WithLabelValues({t}), "dropped/" + t, s.dropped_writes);
      for (const auto& [reason, n] : s.rejected) {
        Add(rejected->WithLabelValues({t, reason}), "rejected/" + t + "/" + reason, n);
      }
      if (s.resident_bytes >= 0) {
        resident_bytes->WithLabelValues({t}).Set(static_cast<double>(s.resident_bytes));
        resident_blocks->WithLabelValues({t}).Set(static_cast<double>(s.resident_blocks));
      }
    }
  }
};

}  // namespace

absl::Status RegisterKvTierMetrics(metrics::Registry* registry,
                                   std::function<std::vector<KvTierStats>()> stats) {
  auto s = std::make_shared<State>();
  s->stats = std::move(stats);
  auto counter = [&](const char* name, const char* help, std::vector<std::string> labels) {
    return registry->AddCounter(name, help, std::move(labels));
  };
  ASSIGN_OR_RETURN(s->hit, counter("ced_kv_tier_hit_blocks_total",
                                   "KV blocks served from a tier below the prefix cache.", {"tier"}));
  ASSIGN_OR_RETURN(s->miss, counter("ced_kv_tier_miss_blocks_total",
                                    "KV blocks asked of a tier and not served by it.", {"tier"}));
  ASSIGN_OR_RETURN(s->read, counter("ced_kv_tier_read_bytes_total",
                                    "Stored KV block bytes read from a tier.", {"tier"}));
  ASSIGN_OR_RETURN(s->written, counter("ced_kv_tier_written_bytes_total",
                                       "Stored KV block bytes written to a tier.", {"tier"}));
  ASSIGN_OR_RETURN(s->rejected,
                   counter("ced_kv_tier_rejected_blocks_total",
                           "KV blocks read from a tier that failed a check (checksum, model, "
                           "format, length, key) and were dropped, never served.",
                           {"tier", "reason"}));
  ASSIGN_OR_RETURN(s->errors, counter("ced_kv_tier_errors_total",
                                      "KV tier operations that failed (store down, slow, full; "
                                      "I/O errors): degraded to recomputation.",
                                      {"tier"}));
  ASSIGN_OR_RETURN(s->dropped, counter("ced_kv_tier_dropped_writes_total",
                                       "KV block writes dropped (write queue full, no room).",
                                       {"tier"}));
  ASSIGN_OR_RETURN(s->resident_bytes,
                   registry->AddGauge("ced_kv_tier_resident_bytes",
                                      "Stored KV block bytes a local tier holds.", {"tier"}));
  ASSIGN_OR_RETURN(s->resident_blocks,
                   registry->AddGauge("ced_kv_tier_resident_blocks",
                                      "KV blocks a local tier holds.", {"tier"}));
  registry->AddCollectHook([s] { s->Collect(); });
  return absl::OkStatus();
}

}  // namespace ced::services
