// Integration: a real Prometheus server scrapes MetricsHttpServer and the values are queryable.
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "services/metrics/http_server.h"
#include "services/metrics/process_metrics.h"
#include "tests/common/missing_tool.h"
#include "tests/metrics/test_util.h"

namespace ced::metrics {
namespace {

using testing::ChildProcess;
using testing::FindInPath;
using testing::HttpGet;
using testing::PickFreePort;
using testing::ReadFileOrEmpty;
using testing::TempDir;
using testing::WriteFile;

constexpr char kJob[] = "ced_metrics_it";

// Percent-encodes a PromQL query for a URL query string.
std::string UrlEncode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '_' || c == '-' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += absl::StrCat("%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

// The value of a single-sample instant query, or nullopt when Prometheus has no answer yet.
std::optional<double> QueryScalar(int port, const std::string& query) {
  absl::StatusOr<testing::HttpResult> response =
      HttpGet(port, "/api/v1/query?query=" + UrlEncode(query));
  if (!response.ok() || response->status != 200) return std::nullopt;
  nlohmann::json json = nlohmann::json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || json.value("status", "") != "success") return std::nullopt;
  const nlohmann::json& result = json["data"]["result"];
  if (!result.is_array() || result.size() != 1) return std::nullopt;
  const nlohmann::json& value = result[0]["value"];
  if (!value.is_array() || value.size() != 2 || !value[1].is_string()) return std::nullopt;
  return std::stod(value[1].get<std::string>());
}

TEST(MetricsPrometheusScrapeTest, PrometheusScrapesAndQueriesOurMetrics) {
  const std::string prometheus = FindInPath("prometheus");
  if (prometheus.empty()) CED_SKIP_OR_FAIL_WHEN_MISSING("prometheus (on PATH)");

  Registry registry;
  Family<Counter>* requests =
      *registry.AddCounter("ced_it_requests_total", "Requests served.", {"outcome"});
  requests->WithLabels({{"outcome", "ok"}}).Increment(42);
  Family<Histogram>* latency =
      *registry.AddHistogram("ced_it_latency_seconds", "Latency.", LatencySecondsBuckets());
  latency->WithLabelValues({}).Observe(0.2);
  latency->WithLabelValues({}).Observe(3);
  ASSERT_TRUE(RegisterProcessMetrics(&registry).ok());

  MetricsHttpServer::Options options;
  options.listen_address = "127.0.0.1:0";
  options.registry = &registry;
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server = MetricsHttpServer::Create(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int target_port = (*server)->port();

  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string config_path = dir.path() + "/prometheus.yml";
  ASSERT_TRUE(WriteFile(config_path, absl::StrCat("global:\n"
                                                  "  scrape_interval: 1s\n"
                                                  "  scrape_timeout: 1s\n"
                                                  "scrape_configs:\n"
                                                  "  - job_name: ",
                                                  kJob,
                                                  "\n"
                                                  "    static_configs:\n"
                                                  "      - targets: ['127.0.0.1:",
                                                  target_port, "']\n")));
  const int prometheus_port = PickFreePort();
  ASSERT_GT(prometheus_port, 0);
  const std::string log_path = dir.path() + "/prometheus.log";
  ChildProcess child;  // Killed and reaped by its destructor on every exit path.
  ASSERT_TRUE(child
                  .Start({prometheus, "--config.file=" + config_path,
                          "--storage.tsdb.path=" + dir.path() + "/data",
                          absl::StrCat("--web.listen-address=127.0.0.1:", prometheus_port),
                          "--log.level=warn"},
                         "", log_path)
                  .ok());

  const std::string up_query = absl::StrCat("up{job=\"", kJob, "\"}");
  const std::string counter_query =
      absl::StrCat("ced_it_requests_total{job=\"", kJob, "\",outcome=\"ok\"}");
  const std::string count_query = absl::StrCat("ced_it_latency_seconds_count{job=\"", kJob, "\"}");
  std::optional<double> up, counter, count;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline && child.Running()) {
    up = QueryScalar(prometheus_port, up_query);
    counter = QueryScalar(prometheus_port, counter_query);
    count = QueryScalar(prometheus_port, count_query);
    if (up == 1.0 && counter == 42.0 && count == 2.0) break;
    absl::SleepFor(absl::Milliseconds(250));
  }
  child.Stop();
  const std::string log = ReadFileOrEmpty(log_path);
  ASSERT_TRUE(up.has_value()) << "Prometheus never answered for " << up_query << "; log:\n" << log;
  EXPECT_EQ(*up, 1.0) << log;
  ASSERT_TRUE(counter.has_value()) << "no sample for " << counter_query << "; log:\n" << log;
  EXPECT_EQ(*counter, 42.0);
  ASSERT_TRUE(count.has_value()) << "no sample for " << count_query << "; log:\n" << log;
  EXPECT_EQ(*count, 2.0);
}

}  // namespace
}  // namespace ced::metrics
