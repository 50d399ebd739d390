#include "bench/services/gateway_bench.h"

#include <sys/resource.h>

#include <atomic>
#include <memory>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/services/clients.h"
#include "bench/services/cluster.h"
#include "bench/services/ttft_bench.h"
#include "engine/common/status.h"
#include "nlohmann/json.hpp"
#include "services/common/grpc_util.h"
#include "services/common/http_get.h"

namespace ced::bench {
namespace {

struct Targets {
  std::unique_ptr<ced::v1::Gateway::Stub> gateway;
  std::unique_ptr<ced::internal::DecodeWorker::Stub> decode;
  std::unique_ptr<ced::internal::PrefillWorker::Stub> prefill;
  DirectTarget direct;
  std::string http;   // the gateway's OpenAI-compatible API
  std::string model;  // its model name there
};

absl::StatusOr<Targets> Connect(const BenchCluster& cluster) {
  Targets t;
  ASSIGN_OR_RETURN(const std::string decode, cluster.Address("decode-0", "grpc"));
  ASSIGN_OR_RETURN(const std::string prefill, cluster.Address("prefill-0", "grpc"));
  ASSIGN_OR_RETURN(t.direct.decode_kv_address, cluster.Address("decode-0", "kv"));
  t.gateway = ced::v1::Gateway::NewStub(services::MakeChannel(cluster.gateway()));
  t.decode = ced::internal::DecodeWorker::NewStub(services::MakeChannel(decode));
  t.prefill = ced::internal::PrefillWorker::NewStub(services::MakeChannel(prefill));
  t.direct.decode = t.decode.get();
  t.direct.prefill = t.prefill.get();
  t.direct.decode_worker_id = "decode-0";
  t.direct.prefill_worker_id = "prefill-0";
  ASSIGN_OR_RETURN(t.http, cluster.Address("gateway", "http"));
  ASSIGN_OR_RETURN(const services::HttpResponse models, services::HttpGet(t.http, "/v1/models"));
  const nlohmann::json j = nlohmann::json::parse(models.body, nullptr, false);
  if (models.status != 200 || j.is_discarded() || !j.contains("data") || j["data"].empty()) {
    return absl::UnavailableError(
        absl::StrCat("GET ", t.http, "/v1/models: status ", models.status, ": ", models.body));
  }
  t.model = j["data"][0].value("id", "");
  return t;
}

// Paths ending in kEmbedded run on the second cluster, whose gateway embeds
// the router (`ced cluster --embed-router`).
constexpr char kEmbedded[] = "-embedded";

bool IsEmbedded(const std::string& path) { return absl::EndsWith(path, kEmbedded); }

StreamResult RunPath(Targets& t, const std::string& path, const GenerateArgs& args) {
  if (path == "gateway") return GatewayGenerate(t.gateway.get(), args);
  if (path == "openai") return OpenAiGenerate(t.http, t.model, args);
  return DirectGenerate(t.direct, args, /*local_prefill=*/path == "local");
}

StreamResult RunPath(Targets& t, Targets* embedded, const std::string& path,
                     const GenerateArgs& args) {
  if (!IsEmbedded(path)) return RunPath(t, path, args);
  return RunPath(*embedded, path.substr(0, path.size() - std::string(kEmbedded).size()), args);
}

struct Load {
  double tokens_per_s = 0;
  double ttft_ms = 0, tpot_ms = 0;  // medians over the streams
  size_t tokens = 0;
  size_t messages = 0;
};

double ClientCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// CPU seconds so far of every CpuProcesses() entry. `embedded_router`: the
// router runs in the gateway process (counted there; its own /metrics
// endpoint reports the same process, so it reads 0 here).
absl::StatusOr<std::vector<double>> CpuSeconds(const BenchCluster& cluster,
                                               bool embedded_router = false) {
  std::vector<double> out;
  for (const std::string& name : CpuProcesses()) {
    if (name == "client") {
      out.push_back(ClientCpuSeconds());
      continue;
    }
    if (name == "router" && embedded_router) {
      out.push_back(0);
      continue;
    }
    ASSIGN_OR_RETURN(const double v, ScrapeMetric(cluster, name, "ced_process_cpu_seconds_total"));
    out.push_back(v);
  }
  return out;
}

// `c` concurrent streams on `path`.
absl::StatusOr<Load> Throughput(Targets& t, Targets* embedded, const std::string& path, int c,
                                int prompt_tokens, int tokens, uint64_t* salt) {
  std::vector<StreamResult> results(c);
  std::vector<std::thread> threads;
  std::vector<GenerateArgs> args(c);
  for (int i = 0; i < c; ++i) {
    args[i].request_id = absl::StrCat("tput-", path, "-", *salt);
    args[i].prompt = MakePrompt(prompt_tokens, (*salt)++);
    args[i].max_tokens = tokens;
  }
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  for (int i = 0; i < c; ++i) {
    threads.emplace_back([&, i] {
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      results[i] = RunPath(t, embedded, path, args[i]);
    });
  }
  while (ready.load() < c) std::this_thread::yield();
  const double t0 = NowSeconds();
  go.store(true);
  for (auto& th : threads) th.join();
  const double elapsed = NowSeconds() - t0;
  size_t total = 0, messages = 0;
  std::vector<double> ttft, tpot;
  for (const StreamResult& r : results) {
    RETURN_IF_ERROR(r.status);
    total += r.token_ms.size();
    messages += static_cast<size_t>(r.messages);
    ttft.push_back(r.ttft_ms());
    tpot.push_back(r.tpot_ms());
  }
  return Load{static_cast<double>(total) / elapsed, Summarize(ttft).median, Summarize(tpot).median,
              total, messages};
}

}  // namespace

absl::StatusOr<GatewayReport> RunGatewayBench(const GatewayBenchOptions& o,
                                              const Progress& progress) {
  GatewayReport report;
  report.options = o;
  const std::string model = o.scratch_dir + "/model-" + o.preset;
  RETURN_IF_ERROR(EnsureModel(o.ced_binary, o.preset, model));
  ClusterOptions co;
  co.ced_binary = o.ced_binary;
  co.model_dir = model;
  co.log_path = o.scratch_dir + "/cluster-gateway.log";
  co.flags = {"--prefill", "1", "--decode", "1"};
  for (absl::string_view flag : absl::StrSplit(o.cluster_flags, ' ', absl::SkipEmpty())) {
    co.flags.emplace_back(flag);
  }
  if (!o.ucx_tls.empty()) co.env["UCX_TLS"] = o.ucx_tls;
  progress(absl::StrCat("gateway: starting ced cluster on ", o.preset,
                        o.cluster_flags.empty() ? "" : " with " + o.cluster_flags));
  ASSIGN_OR_RETURN(auto cluster, BenchCluster::Start(co));
  ASSIGN_OR_RETURN(Targets t, Connect(*cluster));
  // The same cluster with the router inside the gateway, up at the same time:
  // its paths take turns with the others.
  std::unique_ptr<BenchCluster> cluster2;
  std::unique_ptr<Targets> t2;
  std::vector<std::string> names = {"gateway", "openai", "direct", "local"};
  std::vector<std::string> sides = {"gateway", "openai", "direct"};
  if (o.embedded_router) {
    ClusterOptions co2 = co;
    co2.log_path = o.scratch_dir + "/cluster-gateway-embedded.log";
    co2.flags.push_back("--embed-router");
    progress("gateway: starting a second ced cluster with --embed-router");
    ASSIGN_OR_RETURN(cluster2, BenchCluster::Start(co2));
    ASSIGN_OR_RETURN(Targets connected, Connect(*cluster2));
    t2 = std::make_unique<Targets>(std::move(connected));
    for (const char* path : {"gateway", "openai"}) {
      names.push_back(absl::StrCat(path, kEmbedded));
      sides.push_back(absl::StrCat(path, kEmbedded));
    }
  }

  for (const std::string& n : names) report.paths.push_back(LatencyPath{n, {}, {}, {}, {}});
  uint64_t salt = 50000;
  for (int rep = -1; rep < o.repetitions; ++rep) {  // rep -1 warms every path up
    for (size_t k = 0; k < names.size(); ++k) {
      const size_t i = (k + static_cast<size_t>(rep + 1)) % names.size();  // rotate the order
      GenerateArgs args;
      args.request_id = absl::StrCat("lat-", names[i], "-", salt);
      args.prompt = MakePrompt(o.prompt_tokens, salt++);
      args.max_tokens = o.max_tokens;
      const StreamResult r = RunPath(t, t2.get(), names[i], args);
      RETURN_IF_ERROR(r.status);
      if (rep < 0) continue;
      report.paths[i].ttft_ms.push_back(r.ttft_ms());
      report.paths[i].tpot_ms.push_back(r.tpot_ms());
    }
    if (rep >= 0 && (rep + 1) % std::max(1, o.repetitions / 4) == 0) {
      std::string line;
      for (const LatencyPath& p : report.paths) {
        absl::StrAppend(
            &line, line.empty() ? "" : ", ",
            absl::StrFormat("%s %.2f / %.3f", p.name, p.ttft_ms.back(), p.tpot_ms.back()));
      }
      progress(absl::StrFormat("gateway latency %d/%d, TTFT / TPOT ms (last): %s", rep + 1,
                               o.repetitions, line));
    }
  }
  for (LatencyPath& p : report.paths) {
    p.ttft = Summarize(p.ttft_ms);
    p.tpot = Summarize(p.tpot_ms);
  }
  for (int c : o.concurrency) {
    ThroughputPoint point;
    point.concurrency = c;
    for (const std::string& path : sides) point.sides.emplace_back().path = path;
    for (int rep = 0; rep < o.throughput_repetitions; ++rep) {
      std::string line;
      for (size_t k = 0; k < sides.size(); ++k) {
        ThroughputSide& side = point.sides[(k + static_cast<size_t>(rep)) % sides.size()];
        const bool embedded = IsEmbedded(side.path);
        const BenchCluster& on = embedded ? *cluster2 : *cluster;
        ASSIGN_OR_RETURN(const std::vector<double> cpu0, CpuSeconds(on, embedded));
        ASSIGN_OR_RETURN(
            const Load load,
            Throughput(t, t2.get(), side.path, c, o.stream_prompt_tokens, o.stream_tokens, &salt));
        ASSIGN_OR_RETURN(const std::vector<double> cpu1, CpuSeconds(on, embedded));
        std::vector<double> per_ktok;
        for (size_t i = 0; i < cpu0.size(); ++i) {
          per_ktok.push_back(load.tokens > 0 ? (cpu1[i] - cpu0[i]) * 1e6 / load.tokens : 0);
        }
        side.tps.push_back(load.tokens_per_s);
        side.ttft_ms.push_back(load.ttft_ms);
        side.tpot_ms.push_back(load.tpot_ms);
        side.cpu_ms_per_ktok.push_back(per_ktok);
        side.tokens_per_message.push_back(
            load.messages > 0 ? static_cast<double>(load.tokens) / load.messages : 0);
        absl::StrAppend(&line, line.empty() ? "" : ", ",
                        absl::StrFormat("%s %.0f tok/s (TTFT %.0f, TPOT %.2f ms; gateway CPU "
                                        "%.0f ms/1k tok; %.2f tok/msg)",
                                        side.path, load.tokens_per_s, load.ttft_ms, load.tpot_ms,
                                        per_ktok[0], side.tokens_per_message.back()));
      }
      progress(absl::StrFormat("gateway throughput c=%d rep %d/%d: %s", c, rep + 1,
                               o.throughput_repetitions, line));
    }
    for (ThroughputSide& side : point.sides) side.tokens_per_s = Summarize(side.tps);
    report.throughput.push_back(point);
  }
  cluster->Stop();
  if (cluster2 != nullptr) cluster2->Stop();
  return report;
}

}  // namespace ced::bench
