// ced-sim: cluster simulator and pool-split planner (DESIGN.md §3.2).
//   ced-sim [flags]          one simulation at --rate, a markdown summary
//   ced-sim --plan [flags]   every prefill:decode split's capacity
//   ced-sim --info [flags]   instance memory and one-prefill-step tables
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "bench/common/flags.h"
#include "bench/sim/agent_sim_cli.h"
#include "bench/sim/planner.h"
#include "bench/sim/report.h"
#include "engine/common/status.h"
#include "engine/model/presets.h"

namespace ced::sim {
namespace {

struct Args {
  std::string preset = "llama3-70b-ced";
  int encoder_layers = -1, replay = -1;
  std::string replay_on = "prefill";
  int instances = 6, prefill_instances = 3, total_gpus = 0;
  int prefill_gpus = 4, decode_gpus = 4;
  std::string gpu = "h100", device_profile, requests_out;
  double bytes_per_param = 0;  // 0: the device's (bf16 on the GPU kinds)
  bool colocated = false;
  double link_gbps = 50, heartbeat_ms = 50;
  int block_size = 16, max_batch = 256, max_step_tokens = 2048, reserve_retries = 2;
  bool refuse_when_full = false;
  double input_mean = 1024, input_cv = 0.5, output_mean = 1024, output_cv = 0.5;
  double rate = 1;
  int requests = 500, seed = 1, max_requests = 20000;
  double duration = 0;
  double tpot_ms = 25, ttft_factor = 5, ttft_ms = 0, target = 0.9;
  bool plan = false, info = false, naive_router = false, summary_line = false;
  int bisection_steps = 7;
  std::string workload = "poisson";
  AgentSimArgs agent;
};

absl::StatusOr<SimOptions> BuildOptions(const Args& a) {
  SimOptions o;
  ASSIGN_OR_RETURN(o.model, PresetConfig(a.preset));
  if (a.encoder_layers >= 0) o.model.num_encoder_layers = a.encoder_layers;
  if (a.replay >= 0) o.model.replay_window = a.replay;
  if (absl::Status s = ValidateConfig(o.model); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ced-encoder-layers / --ced-replay: ", s.message()));
  }
  if (a.device_profile.empty()) {
    ASSIGN_OR_RETURN(o.gpu, GpuByName(a.gpu));
  } else {
    ASSIGN_OR_RETURN(o.gpu, LoadDeviceProfile(a.device_profile));
  }
  if (a.bytes_per_param < 0) {
    return absl::InvalidArgumentError("--bytes-per-param must be positive (0 = the device's)");
  }
  if (a.bytes_per_param > 0) o.gpu.bytes_per_param = a.bytes_per_param;
  if (a.replay_on == "prefill") {
    o.replay_on = router::ReplayOnChoice::kPrefill;
  } else if (a.replay_on == "decode") {
    o.replay_on = router::ReplayOnChoice::kDecode;
  } else if (a.replay_on == "auto") {
    o.replay_on = router::ReplayOnChoice::kAuto;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--ced-replay-on: expected prefill, decode or auto, got '", a.replay_on, "'"));
  }
  o.prefill_instances = a.prefill_instances;
  o.decode_instances = a.instances - a.prefill_instances;
  o.prefill_gpus = a.prefill_gpus;
  o.decode_gpus = a.decode_gpus;
  o.link_bytes_per_s = a.link_gbps * 1e9;
  o.heartbeat_s = a.heartbeat_ms / 1e3;
  o.block_size = a.block_size;
  o.max_batch = a.max_batch;
  o.count_inflight = !a.naive_router;
  o.max_step_tokens = a.max_step_tokens;
  o.refuse_when_full = a.refuse_when_full;
  o.reserve_retries = a.reserve_retries;
  o.colocated = a.colocated;
  o.workload.input_mean = a.input_mean;
  o.workload.input_cv = a.input_cv;
  o.workload.output_mean = a.output_mean;
  o.workload.output_cv = a.output_cv;
  o.workload.rate = a.rate;
  o.workload.num_requests = a.requests;
  o.workload.duration_s = a.duration;
  o.workload.max_requests = a.max_requests;
  o.workload.seed = static_cast<uint64_t>(a.seed);
  if (!std::isfinite(a.tpot_ms) || a.tpot_ms <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("--tpot-slo-ms must be > 0, got ", a.tpot_ms));
  }
  if (!std::isfinite(a.ttft_ms) || a.ttft_ms < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ttft-slo-ms must be >= 0 (0: from --ttft-slo-factor), got ", a.ttft_ms));
  }
  if (a.ttft_ms == 0 && (!std::isfinite(a.ttft_factor) || a.ttft_factor <= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ttft-slo-factor must be > 0, got ", a.ttft_factor));
  }
  o.tpot_slo_s = a.tpot_ms / 1e3;
  if (a.ttft_ms > 0) {
    o.ttft_slo_s = a.ttft_ms / 1e3;
  } else {
    ASSIGN_OR_RETURN(o.ttft_slo_s,
                     ReferenceTtftSeconds(o.model, o.gpu, a.prefill_gpus,
                                          static_cast<int64_t>(a.input_mean), a.ttft_factor));
  }
  return o;
}

absl::Status Main(int argc, char** argv) {
  Args a;
  bench::FlagSet f;
  f.String("preset", &a.preset, "model shape (engine presets, e.g. llama3-70b-ced)");
  f.Int("ced-encoder-layers", &a.encoder_layers, "E; L = decoder-only baseline; -1 = preset's");
  f.Int("ced-replay", &a.replay, "replay window R in tokens; -1 = preset's");
  f.String("ced-replay-on", &a.replay_on, "where the replay runs: prefill | decode | auto");
  f.Int("instances", &a.instances, "instances in the fleet (prefill + decode)");
  f.Int("prefill-instances", &a.prefill_instances, "prefill instances (simulation mode)");
  f.Int("total-gpus", &a.total_gpus, "--plan: split a GPU budget instead of --instances");
  f.Int("prefill-gpus", &a.prefill_gpus, "tensor-parallel GPUs per prefill instance");
  f.Int("decode-gpus", &a.decode_gpus, "tensor-parallel GPUs per decode instance");
  f.String("gpu", &a.gpu, "GPU kind: h100 | h200");
  f.Double("bytes-per-param", &a.bytes_per_param,
           "weight bytes per parameter (1 = fp8 weights); 0 = the device's (2 on the GPUs)");
  f.String("device-profile", &a.device_profile,
           "measured device profile file (ced-sim-calibrate) instead of --gpu");
  f.Double("link-gbps", &a.link_gbps, "K/V link per prefill instance, GB/s");
  f.Double("heartbeat-ms", &a.heartbeat_ms, "load-report period to the router (simulated ms)");
  f.Int("block-size", &a.block_size, "KV block size in tokens");
  f.Int("max-batch", &a.max_batch, "running sequences per decode instance");
  f.Int("max-step-tokens", &a.max_step_tokens,
        "decode instance's token budget per step (ced serve --role=decode --max-step-tokens)");
  f.Bool("refuse-when-full", &a.refuse_when_full,
         "refuse a request no decode instance has K/V room for (RESOURCE_EXHAUSTED), as the "
         "gateway does with --kv-wait-ms 0 (agent: the turn's session ends, as in "
         "ced-loadgen); default: it waits for room, as the gateway does for up to its "
         "--kv-wait-ms (capacity searches)");
  f.Int("reserve-retries", &a.reserve_retries,
        "with --refuse-when-full, as the gateway's --reserve-retries: decode instances tried "
        "after one refuses the reservation");
  f.Double("input-mean", &a.input_mean, "mean prompt tokens (lognormal)");
  f.Double("input-cv", &a.input_cv, "prompt length coefficient of variation");
  f.Double("output-mean", &a.output_mean, "mean output tokens (lognormal)");
  f.Double("output-cv", &a.output_cv, "output length coefficient of variation");
  f.Double("rate", &a.rate, "Poisson arrival rate, requests/s (simulation mode)");
  f.Int("requests", &a.requests, "requests per simulation run");
  f.Double("duration", &a.duration,
           "seconds of arrivals: runs get max(--requests, rate x duration) requests");
  f.Int("max-requests", &a.max_requests, "cap on requests per run when --duration is set");
  f.Int("seed", &a.seed, "workload seed");
  f.Double("tpot-slo-ms", &a.tpot_ms, "TPOT SLO, ms");
  f.Double("ttft-slo-factor", &a.ttft_factor,
           "TTFT SLO = factor x decoder-only unloaded prefill of the mean prompt");
  f.Double("ttft-slo-ms", &a.ttft_ms, "absolute TTFT SLO in ms (overrides the factor when > 0)");
  f.Double("slo-target", &a.target, "--plan: fraction of requests that must meet both SLOs");
  f.Int("bisection-steps", &a.bisection_steps, "--plan: bisection steps per split");
  f.Bool("plan", &a.plan, "find every split's capacity and the best split");
  f.Bool("info", &a.info, "print instance memory and one-prefill-step tables");
  f.Bool("naive-router", &a.naive_router, "route prefill by reported queued tokens only");
  f.Bool("colocated", &a.colocated,
         "prefill instance i and decode instance i share one machine: each runs slower while "
         "the other computes, by the device profile's measured colocated slowdowns");
  f.String("requests-out", &a.requests_out,
           "simulation mode: write every request (CSV: index, arrival_s, prompt_tokens, "
           "output_tokens, ttft_s, tpot_s, prefill_s, completed, refused) here");
  f.Bool("summary-line", &a.summary_line,
         "simulation mode: also print the summary as one line of full-precision figures");
  f.String("workload", &a.workload,
           "simulation mode: poisson (independent requests at --rate) or agent (sessions of "
           "turns, each resending the conversation, with prefix caches: the agent flags)");
  AddAgentSimFlags(&f, &a.agent);
  RETURN_IF_ERROR(f.Parse(argc, argv));
  if (f.help_requested()) {
    std::printf("%s", f.Help("ced-sim [--plan | --info] [flags]",
                             "Discrete-event simulator of a disaggregated CED fleet, with the "
                             "router's own policy,\nand a planner of the prefill:decode split.")
                          .c_str());
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(SimOptions o, BuildOptions(a));
  std::printf(
      "model %s (L %d, E %d, R %d), %s, replay on %s, router %s, TTFT SLO %.1f ms, "
      "TPOT SLO %.1f ms\n\n",
      a.preset.c_str(), o.model.num_layers, o.model.num_encoder_layers, o.model.replay_window,
      o.gpu.name.c_str(), a.replay_on.c_str(), a.naive_router ? "naive" : "in-flight",
      1e3 * o.ttft_slo_s, 1e3 * o.tpot_slo_s);
  if (a.info) {
    std::printf(
        "%s\n%s", InstanceMemoryTable(o.model, o.gpu, a.prefill_gpus, a.decode_gpus).c_str(),
        PrefillStepTable(o.model, o.gpu, a.prefill_gpus, {1024, 4096, 8192, 16384, 32768, 131072})
            .c_str());
    return absl::OkStatus();
  }
  if (a.plan) {
    PlanOptions p;
    p.base = o;
    p.instances = a.instances;
    p.total_gpus = a.total_gpus;
    p.target = a.target;
    p.bisection_steps = a.bisection_steps;
    ASSIGN_OR_RETURN(PlanResult plan, Plan(p));
    std::printf("%s", PlanTable(plan).c_str());
    return absl::OkStatus();
  }
  if (o.decode_instances < 1) {
    return absl::InvalidArgumentError("--prefill-instances must be below --instances");
  }
  if (a.workload == "agent") return RunAgentSim(a.agent, o, a.seed);
  if (a.workload != "poisson") {
    return absl::InvalidArgumentError(
        absl::StrCat("--workload: expected poisson or agent, got '", a.workload, "'"));
  }
  ASSIGN_OR_RETURN(SimSummary s, RunSimulation(o));
  std::printf("%s", SummaryTable(s).c_str());
  if (a.summary_line) std::printf("summary %s\n", s.ToString().c_str());
  if (!a.requests_out.empty()) {
    std::ofstream out(a.requests_out);
    out << "index,arrival_s,prompt_tokens,output_tokens,ttft_s,tpot_s,prefill_s,completed,"
           "refused\n";
    for (size_t i = 0; i < s.results.size(); ++i) {
      const RequestResult& r = s.results[i];
      out << absl::StrFormat("%d,%.9f,%d,%d,%.9f,%.9f,%.9f,%d,%d\n", i, r.arrival_s,
                             r.prompt_tokens, r.output_tokens, r.completed ? r.ttft_s() : -1,
                             r.completed ? r.tpot_s() : -1, r.prefill_s, r.completed ? 1 : 0,
                             r.refused ? 1 : 0);
    }
    out.close();
    if (!out)
      return absl::InternalError(
          absl::StrCat("--requests-out: cannot write '", a.requests_out, "'"));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ced::sim

int main(int argc, char** argv) {
  // The router's policy library locks its worker table on every load report
  // and decision; one thread here, so absl's debug-build deadlock graph is
  // pure overhead.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const absl::Status s = ced::sim::Main(argc, argv);
  if (!s.ok()) {
    std::fprintf(stderr, "ced-sim: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  return 0;
}
