// ced_services_bench: the system's headline figures in one run (see
// bench/README.md, "Services"): KV transfer throughput against ucx_perftest,
// the share of TTFT spent on non-overlapped K/V transfer, the gateway's
// overhead and streaming throughput, and K/V bytes per prompt token on the
// wire for every cache format.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/common/flags.h"
#include "bench/common/run_info.h"
#include "bench/common/stats.h"
#include "bench/services/report.h"
#include "engine/common/status.h"

namespace ced::bench {
namespace {

struct Flags {
  bool quick = false;
  std::string sections = "transport,ttft,gateway,kvbytes";
  std::string ced;  // default: `ced` next to this binary
  std::string scratch_dir;
  std::string cluster_ucx_tls;
  // transport
  std::string ucx_tls_list = "tcp;shm,tcp";
  std::string sizes = "256K,1M,4M,16M";
  int threads = 4;
  int mib_per_sample = 256;
  int transport_reps = 9;
  std::string perftest = "ucx_perftest";
  std::string perftest_test = "ucp_am_bw";
  bool perftest_peer = true;
  // ttft
  std::string ttft_preset = "small";
  int ttft_prompt_tokens = 2048;
  int ttft_max_tokens = 4;
  int ttft_reps = 5;
  // gateway
  std::string gateway_preset = "tiny";
  int gateway_prompt_tokens = 128;
  int gateway_max_tokens = 32;
  int gateway_reps = 30;
  std::string concurrency = "1,16,48";
  int stream_tokens = 128;
  int throughput_reps = 5;
  std::string gateway_cluster_flags;
  bool gateway_embedded_router = true;
  // kv bytes
  std::string kv_presets = "tiny,tiny-dec";
  std::string kv_formats = "f32,bf16,fp8_e4m3,fp4_e2m1";
  int kv_short_prompt = 128;
  int kv_long_prompt = 512;
  // output
  std::string markdown = "bench/results/services.md";
  std::string json = "bench/results/services.json";
  // The receiver process of the transport section (internal).
  std::string role;
  std::string sink_tls;
  int sink_slot_bytes = 0;
  int sink_slots = 1;
  int verifier_threads = -1;
  int fused_receive = -1;
};

// "64K", "1M", "4096" -> bytes.
absl::StatusOr<std::vector<uint64_t>> ParseSizes(const std::string& text) {
  std::vector<uint64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    uint64_t scale = 1;
    absl::string_view digits = part;
    if (!part.empty() && (part.back() == 'K' || part.back() == 'M')) {
      scale = part.back() == 'K' ? 1024 : 1024 * 1024;
      digits.remove_suffix(1);
    }
    uint64_t v = 0;
    if (!absl::SimpleAtoi(digits, &v) || v == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--sizes: '", part, "' is not a size"));
    }
    out.push_back(v * scale);
  }
  if (out.empty()) return absl::InvalidArgumentError("--sizes is empty");
  return out;
}

std::vector<std::string> SplitList(const std::string& text, char sep) {
  return absl::StrSplit(text, sep, absl::SkipEmpty());
}

std::string SelfExe() {
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/self/exe", ec).string();
}

void Log(const std::string& line) {
  std::fprintf(stderr, "[%s] %s\n",
               absl::FormatTime("%H:%M:%S", absl::Now(), absl::LocalTimeZone()).c_str(),
               line.c_str());
}

absl::Status Run(Flags f, const std::string& command) {
  const double t_start = NowSeconds();
  const std::pair<const char*, int> counts[] = {{"threads", f.threads},
                                                {"mib_per_sample", f.mib_per_sample},
                                                {"transport_reps", f.transport_reps},
                                                {"ttft_prompt_tokens", f.ttft_prompt_tokens},
                                                {"ttft_max_tokens", f.ttft_max_tokens},
                                                {"ttft_reps", f.ttft_reps},
                                                {"gateway_prompt_tokens", f.gateway_prompt_tokens},
                                                {"gateway_max_tokens", f.gateway_max_tokens},
                                                {"gateway_reps", f.gateway_reps},
                                                {"stream_tokens", f.stream_tokens},
                                                {"throughput_reps", f.throughput_reps},
                                                {"kv_short_prompt", f.kv_short_prompt},
                                                {"kv_long_prompt", f.kv_long_prompt}};
  for (const auto& [name, value] : counts) {
    if (value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, "=", value, ": must be at least 1"));
    }
  }
  const std::vector<std::string> list = SplitList(f.sections, ',');
  const std::set<std::string> sections(list.begin(), list.end());
  for (const std::string& s : sections) {
    if (s != "transport" && s != "ttft" && s != "gateway" && s != "kvbytes") {
      return absl::InvalidArgumentError(absl::StrCat("--sections: unknown section '", s,
                                                     "' (transport, ttft, gateway, kvbytes)"));
    }
  }
  // A run of some sections does not overwrite the whole report: by default
  // it writes services_<sections>.md / .json beside it.
  if (sections.size() < 4) {
    const std::string suffix = absl::StrJoin(sections, "_");
    if (f.markdown == Flags().markdown) {
      f.markdown = absl::StrCat("bench/results/services_", suffix, ".md");
    }
    if (f.json == Flags().json) f.json = absl::StrCat("bench/results/services_", suffix, ".json");
  }
  RETURN_IF_ERROR(CheckWritable("markdown", f.markdown));
  RETURN_IF_ERROR(CheckWritable("json", f.json));
  ASSIGN_OR_RETURN(const std::vector<uint64_t> sizes, ParseSizes(f.sizes));
  ASSIGN_OR_RETURN(const std::vector<int> concurrency,
                   ParsePositiveInts("concurrency", f.concurrency));
  const std::string self = SelfExe();
  const std::string ced =
      f.ced.empty() ? (std::filesystem::path(self).parent_path() / "ced").string() : f.ced;
  if (sections.size() > (sections.count("transport") ? 1u : 0u) && !std::filesystem::exists(ced)) {
    return absl::NotFoundError(absl::StrCat("--ced: no ced binary at ", ced));
  }
  std::string scratch = f.scratch_dir;
  const bool own_scratch = scratch.empty();
  if (own_scratch) {
    scratch =
        (std::filesystem::temp_directory_path() / absl::StrCat("ced_services_bench_", getpid()))
            .string();
  }
  std::error_code scratch_error;
  std::filesystem::create_directories(scratch, scratch_error);
  if (scratch_error) {
    return absl::InvalidArgumentError(
        absl::StrCat(own_scratch ? "scratch folder " : "--scratch_dir: ", scratch,
                     " cannot be made a folder: ", scratch_error.message()));
  }
  Log(absl::StrCat("scratch ", scratch, "; ced ", ced));

  ServicesReport report;
  report.command = command;
  report.date_utc = absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
  report.quick = f.quick;
  report.machine = CollectMachineFacts();
  Log(absl::StrCat(report.machine.cpu_model, ", ", report.machine.logical_cores, " cores, load ",
                   report.machine.load_start));
  const Progress progress = [](const std::string& line) { Log(line); };
  absl::Status status;
  if (sections.count("transport")) {
    TransportBenchOptions o;
    o.tls = SplitList(f.ucx_tls_list, ';');
    o.sizes = sizes;
    o.threads = f.threads;
    o.bytes_per_sample = static_cast<uint64_t>(f.mib_per_sample) << 20;
    o.repetitions = f.transport_reps;
    o.self_exe = self;
    o.perftest = f.perftest;
    o.perftest_test = f.perftest_test;
    o.perftest_peer = f.perftest_peer;
    o.verifier_threads = f.verifier_threads;
    o.fused_receive = f.fused_receive;
    o.scratch_dir = scratch;
    ASSIGN_OR_RETURN(report.transport, RunTransportBench(o, progress));
  }
  if (sections.count("ttft")) {
    TtftBenchOptions o;
    o.ced_binary = ced;
    o.scratch_dir = scratch;
    o.preset = f.ttft_preset;
    o.prompt_tokens = f.ttft_prompt_tokens;
    o.max_tokens = f.ttft_max_tokens;
    o.repetitions = f.ttft_reps;
    o.ucx_tls = f.cluster_ucx_tls;
    ASSIGN_OR_RETURN(report.ttft, RunTtftBench(o, progress));
  }
  if (sections.count("gateway")) {
    GatewayBenchOptions o;
    o.ced_binary = ced;
    o.scratch_dir = scratch;
    o.preset = f.gateway_preset;
    o.prompt_tokens = f.gateway_prompt_tokens;
    o.max_tokens = f.gateway_max_tokens;
    o.repetitions = f.gateway_reps;
    o.concurrency = concurrency;
    o.stream_tokens = f.stream_tokens;
    o.throughput_repetitions = f.throughput_reps;
    o.ucx_tls = f.cluster_ucx_tls;
    o.cluster_flags = f.gateway_cluster_flags;
    o.embedded_router = f.gateway_embedded_router;
    ASSIGN_OR_RETURN(report.gateway, RunGatewayBench(o, progress));
  }
  if (sections.count("kvbytes")) {
    KvBytesBenchOptions o;
    o.ced_binary = ced;
    o.scratch_dir = scratch;
    o.presets = SplitList(f.kv_presets, ',');
    o.formats = SplitList(f.kv_formats, ',');
    o.short_prompt = f.kv_short_prompt;
    o.long_prompt = f.kv_long_prompt;
    o.ucx_tls = f.cluster_ucx_tls;
    ASSIGN_OR_RETURN(report.kv_bytes, RunKvBytesBench(o, progress));
  }
  report.machine.load_end = LoadAverage();
  report.wall_s = NowSeconds() - t_start;
  if (own_scratch) {
    std::error_code ec;
    std::filesystem::remove_all(scratch, ec);
  }
  RETURN_IF_ERROR(WriteTextFile(f.markdown, FormatMarkdown(report)));
  RETURN_IF_ERROR(WriteTextFile(f.json, FormatJson(report)));
  Log(absl::StrCat("done in ", static_cast<int>(report.wall_s), " s; wrote ", f.markdown, " and ",
                   f.json));
  return status;
}

}  // namespace
}  // namespace ced::bench

int main(int argc, char** argv) {
  using ced::bench::Flags;
  // As the ced binary does (services/cli/main.cc): no lock-order graph on
  // every absl::Mutex lock of a measuring process.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick" || a == "--quick=true") {
      f.quick = true;  // smaller defaults; explicit flags still win
      f.mib_per_sample = 64;
      f.transport_reps = 2;
      f.ttft_reps = 1;
      f.gateway_reps = 6;
      f.concurrency = "1,16";
      f.stream_tokens = 64;
      f.throughput_reps = 1;
    }
  }
  ced::bench::FlagSet flags;
  flags.Bool("quick", &f.quick, "fewer repetitions, smaller volumes (about 1.5 minutes)");
  flags.String("sections", &f.sections, "comma list of: transport, ttft, gateway, kvbytes");
  flags.String("ced", &f.ced, "the ced CLI (default: next to this binary)");
  flags.String("scratch_dir", &f.scratch_dir, "models and logs (default: a temporary dir)");
  flags.String("cluster_ucx_tls", &f.cluster_ucx_tls,
               "UCX_TLS for the ced clusters (default: inherited)");
  flags.String("ucx_tls_list", &f.ucx_tls_list, "transport: ';'-separated UCX_TLS values");
  flags.String("sizes", &f.sizes, "transport: message sizes (K and M suffixes)");
  flags.Int("threads", &f.threads, "transport: our Sends in flight (= perftest -O)");
  flags.Int("mib_per_sample", &f.mib_per_sample, "transport: MiB moved per measurement");
  flags.Int("transport_reps", &f.transport_reps, "transport: repetitions per cell");
  flags.String("perftest", &f.perftest, "transport: the ucx_perftest binary");
  flags.String("perftest_test", &f.perftest_test, "transport: perftest test name");
  flags.Bool("perftest_peer", &f.perftest_peer,
             "transport: also run ucx_perftest -e (peer error handling, like ours)");
  flags.Int(
      "verifier_threads", &f.verifier_threads,
      "transport: the receiver's verifier threads (-1: the transport's default, by CPU count)");
  flags.Int("fused_receive", &f.fused_receive,
            "transport: the receiver copies and checksums each fragment in one pass (1), UCX "
            "lands the payload and the receiver reads it again (0); -1: by the lanes");
  flags.String("ttft_preset", &f.ttft_preset, "ttft: model preset");
  flags.Int("ttft_prompt_tokens", &f.ttft_prompt_tokens, "ttft: prompt length");
  flags.Int("ttft_max_tokens", &f.ttft_max_tokens, "ttft: tokens generated");
  flags.Int("ttft_reps", &f.ttft_reps, "ttft: requests per replay placement");
  flags.String("gateway_preset", &f.gateway_preset, "gateway: model preset");
  flags.Int("gateway_prompt_tokens", &f.gateway_prompt_tokens, "gateway: latency prompt length");
  flags.Int("gateway_max_tokens", &f.gateway_max_tokens, "gateway: latency tokens generated");
  flags.Int("gateway_reps", &f.gateway_reps, "gateway: latency requests per path");
  flags.String("concurrency", &f.concurrency, "gateway: concurrent streams, comma list");
  flags.Int("stream_tokens", &f.stream_tokens, "gateway: tokens per throughput stream");
  flags.Int("throughput_reps", &f.throughput_reps, "gateway: repetitions per concurrency");
  flags.Bool("gateway_embedded_router", &f.gateway_embedded_router,
             "gateway: also a cluster whose gateway embeds the router (paths *-embedded)");
  flags.String("gateway_cluster_flags", &f.gateway_cluster_flags,
               "gateway: more `ced cluster` flags, space-separated (e.g. "
               "'--http-direct-stream=false')");
  flags.String("kv_presets", &f.kv_presets, "kvbytes: presets, comma list");
  flags.String("kv_formats", &f.kv_formats, "kvbytes: cache formats, comma list");
  flags.Int("kv_short_prompt", &f.kv_short_prompt, "kvbytes: shorter prompt length");
  flags.Int("kv_long_prompt", &f.kv_long_prompt, "kvbytes: longer prompt length");
  flags.String("markdown", &f.markdown, "markdown report path");
  flags.String("json", &f.json, "JSON report path");
  flags.String("role", &f.role, "internal: 'kv_sink' runs the transport section's receiver");
  flags.String("sink_tls", &f.sink_tls, "internal: kv_sink UCX_TLS");
  flags.Int("sink_slot_bytes", &f.sink_slot_bytes, "internal: kv_sink bytes per slot");
  flags.Int("sink_slots", &f.sink_slots, "internal: kv_sink slots");
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    std::fprintf(stderr, "ced_services_bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::printf("%s", flags
                          .Help("ced_services_bench [--quick] [--sections=...] [flags]",
                                "Serving-system benchmarks in one run: KV transfer vs "
                                "ucx_perftest, TTFT share of K/V transfer, gateway overhead "
                                "and throughput, K/V bytes per prompt token. Writes a markdown "
                                "and a JSON report; progress goes to stderr.")
                          .c_str());
    return 0;
  }
  if (f.role == "kv_sink") {
    return ced::bench::RunKvSinkRole(f.sink_tls, static_cast<uint64_t>(f.sink_slot_bytes),
                                     f.sink_slots, f.verifier_threads, f.fused_receive);
  }
  if (!f.role.empty()) {
    std::fprintf(stderr, "ced_services_bench: --role: unknown role '%s'\n", f.role.c_str());
    return 2;
  }
  const absl::Status s = ced::bench::Run(
      f, ced::bench::CommandLine(argc, argv, {"OMP_WAIT_POLICY", "OMP_NUM_THREADS", "UCX_TLS"}));
  if (!s.ok()) {
    std::fprintf(stderr, "ced_services_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
