// A real Prometheus server scrapes the four services of a cluster (one job
// each); `promtool check metrics` accepts every /metrics; after N requests the
// counters queried from Prometheus's HTTP API equal what was sent. Skipped
// without the prometheus / promtool binaries (a failure under CI=true).
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/common/missing_tool.h"
#include "tests/e2e/cluster_fixture.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/http_get.h"
#include "tests/metrics/test_util.h"

namespace ced::testing {
namespace {

using metrics::testing::ChildProcess;
using metrics::testing::FindInPath;
using metrics::testing::PickFreePort;
using metrics::testing::ReadFileOrEmpty;
using metrics::testing::RunCommand;
using metrics::testing::TempDir;
using metrics::testing::WriteFile;

// Job name -> the cluster service it scrapes.
const std::vector<std::pair<std::string, std::string>> kJobs = {
    {"gateway", "gateway"}, {"router", "router"}, {"prefill", "prefill-0"}, {"decode", "decode-0"}};

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

// The value of a single-sample instant query; nullopt until Prometheus has one.
std::optional<double> Query(int port, const std::string& query) {
  const std::string body =
      HttpGet(absl::StrCat("127.0.0.1:", port), "/api/v1/query?query=" + UrlEncode(query));
  nlohmann::json json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || json.value("status", "") != "success") return std::nullopt;
  const nlohmann::json& result = json["data"]["result"];
  if (!result.is_array() || result.size() != 1) return std::nullopt;
  const nlohmann::json& value = result[0]["value"];
  if (!value.is_array() || value.size() != 2 || !value[1].is_string()) return std::nullopt;
  return std::stod(value[1].get<std::string>());
}

class E2ePrometheusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    prometheus_ = FindInPath("prometheus");
    promtool_ = FindInPath("promtool");
    if (prometheus_.empty() || promtool_.empty()) {
      CED_SKIP_OR_FAIL_WHEN_MISSING("prometheus or promtool (on PATH)");
    }
    model_ = MakeModelDir("tiny");
    cluster_ = std::make_unique<LocalCluster>(
        model_, std::vector<std::string>{"--prefill", "1", "--decode", "1"});
  }
  void TearDown() override { cluster_.reset(); }
  std::string prometheus_, promtool_, model_;
  std::unique_ptr<LocalCluster> cluster_;
};

TEST_F(E2ePrometheusTest, ScrapedCountersMatchWhatWasSent) {
  ASSERT_TRUE(cluster_->ready()) << cluster_->Log();
  TempDir dir;
  std::string config = "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n";
  for (const auto& [job, service] : kJobs) {
    absl::StrAppend(&config, "  - job_name: ", job, "\n    static_configs:\n      - targets: ['",
                    cluster_->addresses().at(service).at("metrics"), "']\n");
  }
  ASSERT_TRUE(WriteFile(dir.path() + "/prometheus.yml", config));
  const int port = PickFreePort();
  ASSERT_GT(port, 0);
  const std::string log_path = dir.path() + "/prometheus.log";
  ChildProcess prometheus;  // killed and reaped by its destructor on every path
  ASSERT_TRUE(
      prometheus
          .Start({prometheus_, "--config.file=" + dir.path() + "/prometheus.yml",
                  "--storage.tsdb.path=" + dir.path() + "/data",
                  absl::StrCat("--web.listen-address=127.0.0.1:", port), "--log.level=warn"},
                 "", log_path)
          .ok());
  // Every target up before any request.
  const bool up = WaitUntil(
      [&] {
        for (const auto& [job, service] : kJobs) {
          if (Query(port, absl::StrCat("up{job=\"", job, "\"}")) != 1.0) return false;
        }
        return true;
      },
      std::chrono::seconds(60), std::chrono::milliseconds(250));
  ASSERT_TRUE(up) << "targets not up; Prometheus log:\n" << ReadFileOrEmpty(log_path);

  constexpr int kRequests = 5, kMaxTokens = 7;
  int prompt_tokens = 0;
  for (int i = 0; i < kRequests; ++i) {
    const int n = 20 + 37 * i;
    prompt_tokens += n;
    const GenResult r =
        Generate(cluster_->gateway(), Request(Prompt(n, i), kMaxTokens, ced::v1::REPLAY_ON_DECODE));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    ASSERT_FALSE(r.last.placement().local_prefill());
  }
  const std::vector<std::pair<std::string, double>> expected = {
      {"ced_gateway_requests_total{job=\"gateway\",api=\"grpc\",outcome=\"length\"}", kRequests},
      {"sum(ced_gateway_requests_total{job=\"gateway\"})", kRequests},
      {"ced_gateway_prompt_tokens_total{job=\"gateway\",api=\"grpc\"}", prompt_tokens},
      {"ced_gateway_generated_tokens_total{job=\"gateway\",api=\"grpc\"}", kRequests * kMaxTokens},
      {"ced_gateway_ttft_seconds_count{job=\"gateway\",api=\"grpc\"}", kRequests},
      {"ced_gateway_e2e_latency_seconds_count{job=\"gateway\",api=\"grpc\"}", kRequests},
      {"ced_router_decisions_total{job=\"router\",replay_on=\"decode\",local_prefill=\"false\"}",
       kRequests},
      {"sum(ced_router_decisions_total{job=\"router\"})", kRequests},
      {"ced_prompt_tokens_total{job=\"prefill\"}", prompt_tokens},
      {"ced_requests_total{job=\"prefill\",outcome=\"ok\"}", kRequests},
      {"ced_generated_tokens_total{job=\"decode\"}", kRequests * kMaxTokens},
      {"ced_requests_total{job=\"decode\",outcome=\"ok\"}", kRequests},
      {"ced_replays_total{job=\"decode\",placement=\"decode\"}", kRequests},
      {"ced_kv_blocks_used{job=\"decode\"}", 0},
  };
  std::vector<std::optional<double>> got(expected.size());
  WaitUntil(
      [&] {
        bool all = true;
        for (size_t i = 0; i < expected.size(); ++i) {
          got[i] = Query(port, expected[i].first);
          all = all && got[i] == expected[i].second;
        }
        return all;
      },
      std::chrono::seconds(30), std::chrono::milliseconds(250));
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_TRUE(got[i].has_value()) << "no sample for " << expected[i].first;
    EXPECT_EQ(*got[i], expected[i].second) << expected[i].first;
  }

  // promtool accepts every service's exposition.
  for (const auto& [job, service] : kJobs) {
    int status = 0;
    const std::string text =
        HttpGet(cluster_->addresses().at(service).at("metrics"), "/metrics", &status);
    ASSERT_EQ(status, 200) << service;
    const std::string path = dir.path() + "/" + job + ".prom";
    ASSERT_TRUE(WriteFile(path, text));
    std::string output;
    auto rc = RunCommand({promtool_, "check", "metrics"}, path, &output, absl::Seconds(60));
    ASSERT_TRUE(rc.ok()) << rc.status();
    EXPECT_EQ(*rc, 0) << service << ": promtool says:\n" << output << "\n---\n" << text;
  }
}

}  // namespace
}  // namespace ced::testing
