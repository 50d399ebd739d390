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
  metrics::Family<metrics::Histogram> *read_seconds = nullptr, *write_seconds = nullptr;
  std::mutex mu;
  std::map<std::string, int64_t> seen;  // series -> the total last exported
  std::map<std::string, KvTierLatencyStats> seen_latency;

  void Add(metrics::Counter& c, const std::string& series, int64_t total) {
    int64_t& last = seen[series];
    if (total > last) c.Increment(static_cast<double>(total - last));
    last = std::max(last, total);
  }

  void Add(metrics::Histogram& h, const std::string& series, const KvTierLatencyStats& now) {
    KvTierLatencyStats& last = seen_latency[series];
    std::vector<uint64_t> more(kKvTierLatencyBuckets, 0);
    bool any = false;
    for (size_t i = 0; i < kKvTierLatencyBuckets; ++i) {
      if (now.count[i] > last.count[i]) {
        more[i] = static_cast<uint64_t>(now.count[i] - last.count[i]);
        last.count[i] = now.count[i];
        any = true;
      }
    }
    const int64_t more_ns = std::max<int64_t>(0, now.sum_ns - last.sum_ns);
    last.sum_ns = std::max(last.sum_ns, now.sum_ns);
    if (any || more_ns > 0) (void)h.AddCounts(more, static_cast<double>(more_ns) * 1e-9);
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
      Add(read_seconds->WithLabelValues({t}), "read_seconds/" + t, s.read_latency);
      Add(write_seconds->WithLabelValues({t}), "write_seconds/" + t, s.write_latency);
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
  const std::vector<double> bounds(kKvTierLatencyBounds.begin(), kKvTierLatencyBounds.end());
  ASSIGN_OR_RETURN(
      s->read_seconds,
      registry->AddHistogram(
          "ced_kv_tier_read_seconds",
          "Seconds per read call to a KV tier: host and disk one block (the run is walked block "
          "by block), redis the rest of the run in MGETs of 4 blocks, one after the other, to "
          "the first missing block. Misses and failed calls (ced_kv_tier_errors_total) count "
          "too; an unreachable Redis answers at once or at its timeout.",
          bounds, {"tier"}));
  ASSIGN_OR_RETURN(
      s->write_seconds,
      registry->AddHistogram(
          "ced_kv_tier_write_seconds",
          "Seconds per write call to a KV tier, on the tier writer thread: host and disk one "
          "block (a host write leaves out the disk writes of what it evicts), redis the blocks "
          "the writer took at once, in pipelined SETs of 4 per round trip. Failed calls count "
          "too.",
          bounds, {"tier"}));
  registry->AddCollectHook([s] { s->Collect(); });
  return absl::OkStatus();
}

}  // namespace ced::services
