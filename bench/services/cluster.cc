#include "bench/services/cluster.h"

#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/common/stats.h"
#include "engine/common/status.h"
#include "services/common/http_get.h"

namespace ced::bench {

absl::StatusOr<std::unique_ptr<BenchCluster>> BenchCluster::Start(const ClusterOptions& o) {
  std::unique_ptr<BenchCluster> cluster(new BenchCluster);
  const std::string ready = o.log_path + ".ready";
  std::remove(ready.c_str());
  services::SubprocessOptions co = services::BackgroundJob(
      {o.ced_binary, "cluster", "--model", o.model_dir, "--base-port", "0", "--metrics-base-port",
       "0", "--ready-file", ready},
      o.log_path);
  co.argv.insert(co.argv.end(), o.flags.begin(), o.flags.end());
  co.env = o.env;
  const double t0 = NowSeconds();
  ASSIGN_OR_RETURN(cluster->child_, services::Subprocess::Spawn(co));
  while (NowSeconds() - t0 < o.ready_timeout_s) {
    const std::string text = services::ReadFileOrEmpty(ready);
    if (!text.empty()) {
      std::istringstream in(text);
      std::string line;
      while (std::getline(in, line)) {
        std::istringstream ls(line);
        std::string name, kv;
        ls >> name;
        while (ls >> kv) {
          const auto eq = kv.find('=');
          if (eq != std::string::npos) {
            cluster->addresses_[name][kv.substr(0, eq)] = kv.substr(eq + 1);
          }
        }
      }
      cluster->startup_s_ = NowSeconds() - t0;
      std::remove(ready.c_str());
      return cluster;
    }
    if (!cluster->child_->Running()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::UnavailableError(
      absl::StrCat("ced cluster did not become ready; log tail:\n", services::TailOfFile(o.log_path, 1500)));
}

BenchCluster::~BenchCluster() { Stop(); }

void BenchCluster::Stop() {
  if (child_) child_->Terminate(60);
  child_.reset();
}

absl::StatusOr<std::string> BenchCluster::Address(const std::string& service,
                                                  const std::string& key) const {
  auto it = addresses_.find(service);
  if (it == addresses_.end() || it->second.count(key) == 0) {
    return absl::NotFoundError(absl::StrCat("cluster has no ", key, " address for ", service));
  }
  return it->second.at(key);
}

absl::StatusOr<std::string> ScrapeMetrics(const std::string& address) {
  ASSIGN_OR_RETURN(const services::HttpResponse r, services::HttpGet(address, "/metrics"));
  if (r.status != 200) {
    return absl::UnavailableError(absl::StrCat("GET ", address, "/metrics: status ", r.status));
  }
  return r.body;
}

double MetricValue(const std::string& exposition, const std::string& name,
                   const std::map<std::string, std::string>& labels) {
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    if (line.substr(0, name.size()) != name) continue;
    const absl::string_view rest = line.substr(name.size());
    if (rest.empty() || (rest[0] != '{' && rest[0] != ' ')) continue;  // a longer name
    absl::string_view label_text, value_text = rest;
    if (rest[0] == '{') {
      const auto close = rest.find('}');
      if (close == absl::string_view::npos) continue;
      label_text = rest.substr(0, close + 1);
      value_text = rest.substr(close + 1);
    }
    bool match = true;
    for (const auto& [k, v] : labels) {
      if (label_text.find(absl::StrCat(k, "=\"", v, "\"")) == absl::string_view::npos) {
        match = false;
      }
    }
    if (!match) continue;
    std::vector<absl::string_view> words = absl::StrSplit(value_text, ' ', absl::SkipEmpty());
    double v = 0;
    if (!words.empty() && absl::SimpleAtod(words[0], &v)) sum += v;
  }
  return sum;
}

absl::StatusOr<double> ScrapeMetric(const BenchCluster& cluster, const std::string& service,
                                    const std::string& name,
                                    const std::map<std::string, std::string>& labels) {
  ASSIGN_OR_RETURN(const std::string address, cluster.Address(service, "metrics"));
  ASSIGN_OR_RETURN(const std::string text, ScrapeMetrics(address));
  return MetricValue(text, name, labels);
}

}  // namespace ced::bench
