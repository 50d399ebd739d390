// A `ced cluster` (router, gateway, prefill and decode pools as real
// processes on loopback) started for the bench on free ports, plus the
// Prometheus scraping the bench reads counters with. Not thread-safe.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/common/subprocess.h"

namespace ced::bench {

struct ClusterOptions {
  std::string ced_binary;  // the `ced` CLI
  std::string model_dir;
  std::vector<std::string> flags;                         // extra `ced cluster` flags
  std::map<std::string, std::optional<std::string>> env;  // e.g. UCX_TLS
  std::string log_path;
  double ready_timeout_s = 180;
};

class BenchCluster {
 public:
  static absl::StatusOr<std::unique_ptr<BenchCluster>> Start(const ClusterOptions& options);
  ~BenchCluster();
  // Stops every service (SIGTERM to `ced cluster`, which stops its children).
  void Stop();

  // Service name ("gateway", "router", "prefill-0", "decode-0") -> key
  // ("grpc", "metrics", "kv") -> address. NOT_FOUND when missing.
  absl::StatusOr<std::string> Address(const std::string& service, const std::string& key) const;
  std::string gateway() const { return Address("gateway", "grpc").value_or(""); }
  double startup_s() const { return startup_s_; }

 private:
  BenchCluster() = default;
  std::unique_ptr<services::Subprocess> child_;
  std::map<std::string, std::map<std::string, std::string>> addresses_;
  double startup_s_ = 0;
};

// The body of GET http://`address`/metrics; UNAVAILABLE unless it answers 200.
absl::StatusOr<std::string> ScrapeMetrics(const std::string& address);

// Sum of the samples of `name` whose label set contains every `label="value"`
// pair in `labels` (an exact sample name: pass "x_sum", "x_count" for
// histograms). 0 when none matches.
double MetricValue(const std::string& exposition, const std::string& name,
                   const std::map<std::string, std::string>& labels = {});

// Scrapes `service`'s /metrics and returns MetricValue of it.
absl::StatusOr<double> ScrapeMetric(const BenchCluster& cluster, const std::string& service,
                                    const std::string& name,
                                    const std::map<std::string, std::string>& labels = {});

}  // namespace ced::bench
