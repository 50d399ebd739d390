// ced-loadgen: load generator for a running ced-serve gateway (DESIGN.md
// §3.2). Poisson or closed-loop load with lognormal prompt and output
// lengths; per run throughput, TTFT / TPOT / E2E percentiles, SLO attainment,
// goodput and errors by status, as a markdown table and JSON.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bench/common/flags.h"
#include "bench/common/run_info.h"
#include "bench/loadgen/agent_cli.h"
#include "bench/loadgen/flags.h"
#include "bench/loadgen/progress.h"
#include "bench/loadgen/report.h"
#include "bench/loadgen/runner.h"
#include "engine/common/status.h"

namespace ced::loadgen {
namespace {

std::atomic<bool> g_interrupt{false};

void OnSignal(int) { g_interrupt.store(true); }

struct Args {
  std::string target = "127.0.0.1:50050";
  std::string rate = "1", concurrency;
  double duration_s = 30;
  int64_t num_requests = 0;
  double input_mean = 128, input_cv = 0.5, output_mean = 64, output_cv = 0.5;
  int64_t seed = 1;
  std::string prompt_file;
  double slo_ttft_ms = 0, slo_tpot_ms = 0;
  double timeout_s = 60, temperature = 0;
  std::string replay_on;
  std::string api = "grpc";
  std::string json_out, md_out;
  bool json_requests = false;
  std::string workload = "poisson";
  AgentArgs agent;
};

absl::StatusOr<ced::v1::ReplayOn> ParseReplayOn(const std::string& s) {
  if (s.empty()) return ced::v1::REPLAY_ON_UNSPECIFIED;
  if (s == "prefill") return ced::v1::REPLAY_ON_PREFILL;
  if (s == "decode") return ced::v1::REPLAY_ON_DECODE;
  if (s == "auto") return ced::v1::REPLAY_ON_AUTO;
  return absl::InvalidArgumentError(
      absl::StrCat("--replay-on: expected prefill, decode or auto, got '", s, "'"));
}

// One run of `workload` against `target` at one load.
absl::StatusOr<RunSummary> RunOne(const Target& target, const ced::v1::ModelInfoResponse& info,
                                  RunOptions run, const WorkloadOptions& wopts, const Slo& slo) {
  ASSIGN_OR_RETURN(Workload workload, Workload::Create(wopts));
  run.target = target.address;
  run.model = info.model_name();
  ASSIGN_OR_RETURN(std::unique_ptr<LoadRunner> runner, LoadRunner::Create(run, &workload));
  RunSummary s;
  s.label = target.label;
  s.target = target.address;
  s.model_name = info.model_name();
  s.num_layers = info.num_layers();
  s.num_encoder_layers = info.num_encoder_layers();
  s.decoder_only = info.decoder_only();
  s.rate = run.concurrency > 0 ? 0 : wopts.rate;
  s.concurrency = run.concurrency;
  const std::string label = run.concurrency > 0
                                ? absl::StrCat(target.label, " c=", run.concurrency, "  ")
                                : absl::StrCat(target.label, " ", wopts.rate, "/s  ");
  RunResult result;
  {
    ProgressPrinter progress([&] { return runner->Snapshot(); },
                             ProgressBounds{run.duration_s, run.max_requests}, stderr, label);
    ASSIGN_OR_RETURN(result, runner->Run());
  }
  s.report = ComputeReport(result.records, slo, result.duration_s);
  s.records = std::move(result.records);
  return s;
}

// Requests whose prompt + max_tokens exceed a target model's context fail
// with INVALID_ARGUMENT; say so before the run, from the first planned
// requests (token-id prompts only: a text prompt's token count is the
// server's to tell).
void WarnAboveTheContext(const WorkloadOptions& w, int64_t num_requests,
                         const std::vector<Target>& targets,
                         const std::vector<ced::v1::ModelInfoResponse>& infos) {
  if (!w.prompts.empty()) return;
  const int64_t n = num_requests > 0 ? std::min<int64_t>(num_requests, 1000) : 1000;
  for (size_t t = 0; t < targets.size(); ++t) {
    const int64_t context = infos[t].max_position();
    if (context <= 0) continue;
    const int64_t over = CountAboveContext(w, n, context);
    if (over == 0) continue;
    std::fprintf(stderr,
                 "loadgen: warning: %lld of the first %lld requests have prompt + max_tokens "
                 "above the context of %s's model (%lld positions): they will fail with "
                 "INVALID_ARGUMENT (lower --input-mean / --output-mean)\n",
                 static_cast<long long>(over), static_cast<long long>(n), targets[t].label.c_str(),
                 static_cast<long long>(context));
  }
}

absl::Status MainAgent(const Args& a) {
  AgentCommon c;
  c.target = a.target;
  c.seed = a.seed;
  c.timeout_s = a.timeout_s;
  c.temperature = a.temperature;
  ASSIGN_OR_RETURN(c.replay_on, ParseReplayOn(a.replay_on));
  c.api = a.api;
  c.json_out = a.json_out;
  c.md_out = a.md_out;
  c.json_requests = a.json_requests;
  c.interrupt = &g_interrupt;
  return RunAgentWorkload(a.agent, c);
}

// The flags both workloads share, checked before any connection (reaching
// the gateway may wait up to its timeout); the results go to files only at
// the end, so a path that cannot be written is refused now.
absl::Status CheckCommonFlags(const Args& a) {
  RETURN_IF_ERROR(bench::CheckWritable("md-out", a.md_out));
  RETURN_IF_ERROR(bench::CheckWritable("json-out", a.json_out));
  if (!std::isfinite(a.timeout_s) || a.timeout_s <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("--timeout-s must be > 0, got ", a.timeout_s));
  }
  if (!std::isfinite(a.temperature) || a.temperature < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--temperature must be >= 0, got ", a.temperature));
  }
  const std::pair<const char*, double> non_negative[] = {{"duration-s", a.duration_s},
                                                         {"num-requests", a.num_requests},
                                                         {"slo-ttft-ms", a.slo_ttft_ms},
                                                         {"slo-tpot-ms", a.slo_tpot_ms}};
  for (const auto& [name, value] : non_negative) {
    if (!std::isfinite(value) || value < 0) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " must be >= 0, got ", value));
    }
  }
  return absl::OkStatus();
}

absl::Status Main(const Args& a) {
  RETURN_IF_ERROR(CheckCommonFlags(a));
  if (a.workload == "agent") return MainAgent(a);
  if (a.workload != "poisson") {
    return absl::InvalidArgumentError(
        absl::StrCat("--workload: expected poisson or agent, got '", a.workload, "'"));
  }
  ASSIGN_OR_RETURN(std::vector<Target> targets, ParseTargets(a.target));
  ASSIGN_OR_RETURN(std::vector<double> rates, bench::ParseDoubleList("rate", a.rate));
  std::vector<double> concurrencies;
  if (!a.concurrency.empty()) {
    ASSIGN_OR_RETURN(concurrencies, bench::ParseDoubleList("concurrency", a.concurrency));
  }
  for (double r : rates) {
    if (!(r > 0)) return absl::InvalidArgumentError("--rate: every rate must be > 0");
  }
  for (double c : concurrencies) {
    if (c < 1 || c != static_cast<int>(c)) {
      return absl::InvalidArgumentError("--concurrency: every value must be an integer >= 1");
    }
  }
  WorkloadOptions w;
  w.input_mean = a.input_mean;
  w.input_cv = a.input_cv;
  w.output_mean = a.output_mean;
  w.output_cv = a.output_cv;
  w.seed = static_cast<uint64_t>(a.seed);
  if (!a.prompt_file.empty()) {
    ASSIGN_OR_RETURN(w.prompts, ReadPromptFile(a.prompt_file));
  }
  RETURN_IF_ERROR(Workload::Create(w).status());  // validates the lengths

  RunOptions run;
  run.duration_s = a.duration_s;
  run.max_requests = a.num_requests;
  run.request_timeout_s = a.timeout_s;
  run.temperature = static_cast<float>(a.temperature);
  ASSIGN_OR_RETURN(run.replay_on, ParseReplayOn(a.replay_on));
  if (a.api == "openai") {
    run.api = Api::kOpenAi;
  } else if (a.api != "grpc") {
    return absl::InvalidArgumentError(
        absl::StrCat("--api: expected grpc or openai, got '", a.api, "'"));
  }
  run.interrupt = &g_interrupt;
  const Slo slo{a.slo_ttft_ms, a.slo_tpot_ms};

  std::vector<ced::v1::ModelInfoResponse> infos;
  for (const Target& t : targets) {
    ASSIGN_OR_RETURN(ced::v1::ModelInfoResponse info, run.api == Api::kOpenAi
                                                          ? FetchOpenAiModel(t.address)
                                                          : FetchModelInfo(t.address));
    infos.push_back(std::move(info));
  }
  WarnAboveTheContext(w, a.num_requests, targets, infos);
  // Loads outermost: the targets' runs at one load follow each other in time.
  std::vector<std::pair<double, int>> loads;  // (rate, concurrency)
  if (concurrencies.empty()) {
    for (double r : rates) loads.push_back({r, 0});
  } else {
    for (double c : concurrencies) loads.push_back({1, static_cast<int>(c)});
  }
  std::vector<RunSummary> runs;
  for (const auto& [rate, conc] : loads) {
    for (size_t t = 0; t < targets.size() && !g_interrupt.load(); ++t) {
      WorkloadOptions wl = w;
      wl.rate = rate;
      RunOptions rl = run;
      rl.concurrency = conc;
      ASSIGN_OR_RETURN(RunSummary s, RunOne(targets[t], infos[t], rl, wl, slo));
      runs.push_back(std::move(s));
    }
  }
  ReportContext ctx;
  ctx.workload = w;
  ctx.run = run;
  ctx.prompt_file = a.prompt_file;
  ctx.include_records = a.json_requests;
  const std::string md = ReportMarkdown(runs);
  if (a.md_out.empty()) {
    std::printf("%s", md.c_str());
  } else {
    RETURN_IF_ERROR(bench::WriteTextFile(a.md_out, md));
  }
  if (!a.json_out.empty()) {
    RETURN_IF_ERROR(bench::WriteTextFile(a.json_out, ReportJson(ctx, runs)));
  }
  if (g_interrupt.load()) return absl::CancelledError("interrupted; partial results written");
  return absl::OkStatus();
}

}  // namespace
}  // namespace ced::loadgen

int main(int argc, char** argv) {
  using namespace ced::loadgen;
  // As the ced binary does (services/cli/main.cc): no lock-order graph on
  // every absl::Mutex lock of a measuring process.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  Args a;
  ced::bench::FlagSet f;
  f.String("target", &a.target,
           "gateway(s): [label=]host:port, comma-separated; runs go one "
           "target after the other at each load, on the same trace");
  f.String("rate", &a.rate, "Poisson arrival rate(s), requests/s, comma-separated");
  f.String("concurrency", &a.concurrency,
           "closed loop instead: requests in flight, comma-separated");
  f.Double("duration-s", &a.duration_s, "stop issuing after this many seconds (0 = no time bound)");
  f.Int("num-requests", &a.num_requests,
        "stop after issuing this many requests (0 = no count bound)");
  f.Double("input-mean", &a.input_mean, "mean prompt length, tokens (lognormal)");
  f.Double("input-cv", &a.input_cv, "prompt length coefficient of variation (0 = fixed)");
  f.Double("output-mean", &a.output_mean, "mean output length, tokens (lognormal; = max_tokens)");
  f.Double("output-cv", &a.output_cv, "output length coefficient of variation (0 = fixed)");
  f.Int("seed", &a.seed, "workload seed: the same seed sends the same requests at the same times");
  f.String("prompt-file", &a.prompt_file,
           "text prompts, one per line, picked at random by the "
           "seed (default: random token ids in [0, 256) of the sampled length)");
  f.Double("slo-ttft-ms", &a.slo_ttft_ms, "TTFT SLO, ms (0 = none)");
  f.Double("slo-tpot-ms", &a.slo_tpot_ms, "TPOT SLO, ms (0 = none)");
  f.Double("timeout-s", &a.timeout_s, "deadline of each request, from its start");
  f.Double("temperature", &a.temperature, "sampling temperature (0 = greedy)");
  f.String("replay-on", &a.replay_on,
           "per-request replay placement: prefill, decode or auto "
           "(default: the router's)");
  f.String("api", &a.api,
           "grpc (ced.v1.Gateway) or openai (streamed POST /v1/completions; --target is "
           "then the gateway's --http-listen address)");
  f.String("json-out", &a.json_out, "write the JSON report here");
  f.String("md-out", &a.md_out, "write the markdown table here instead of stdout");
  f.Bool("json-requests", &a.json_requests, "include every request's record in the JSON");
  f.String("workload", &a.workload,
           "poisson (independent requests, --rate / --concurrency) or agent (sessions of turns, "
           "each resending the conversation: the agent flags below; --rate, --concurrency, "
           "--duration-s, --num-requests and the length flags are then unused)");
  AddAgentFlags(&f, &a.agent);
  if (absl::Status s = f.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "ced-loadgen: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (f.help_requested()) {
    std::printf("%s", f.Help("ced-loadgen --target [label=]host:port[,...] [flags]",
                             "Sends generated load to ced-serve gateways and reports throughput, "
                             "TTFT / TPOT / end-to-end percentiles, SLO attainment, goodput and "
                             "errors by status. A run stops after --duration-s or "
                             "--num-requests; in-flight requests then finish or hit "
                             "--timeout-s. Progress goes to stderr.")
                          .c_str());
    return 0;
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  if (absl::Status s = Main(a); !s.ok()) {
    std::fprintf(stderr, "ced-loadgen: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
