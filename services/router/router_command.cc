#include "services/router/router_command.h"

#include <cstdio>
#include <map>

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "engine/model/config.h"
#include "services/cli/flags.h"
#include "services/router/router_server.h"

namespace ced::router {
namespace {

constexpr char kWords[] = "serve --role=router";

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "ced %s: %s\n", kWords, message.c_str());
  return code;
}

bool ParseReplayOn(const std::string& value, ReplayOnChoice* out) {
  if (value == "prefill")
    *out = ReplayOnChoice::kPrefill;
  else if (value == "decode")
    *out = ReplayOnChoice::kDecode;
  else if (value == "auto")
    *out = ReplayOnChoice::kAuto;
  else
    return false;
  return true;
}

}  // namespace

std::vector<cli::FlagSpec> RouterFlagSpecs(const std::string& prefix) {
  std::vector<cli::FlagSpec> specs = {
      {"listen", "127.0.0.1:50051", "gRPC address (host:port; port 0 picks one)"},
      {"metrics-listen", "127.0.0.1:9101", "Prometheus /metrics address (empty: none)"},
      {"heartbeat-timeout-ms", "3000", "a worker silent this long gets no new work"},
      {"replay-on", "auto", "default replay placement: prefill, decode or auto (by load)"},
      {"replay-mode", "bounded", "default replay length: bounded (R from config) or exact"},
      {"decoder-only", "", "the model is decoder-only (E == L): there is no replay", true},
      {"local-prefill-max-prompt", "0",
       "prompts up to this many tokens may prefill on the decode worker (0 = never)"},
      {"local-prefill-threshold-tokens", "4096",
       "... when the least-loaded prefill worker has more outstanding tokens than this"},
      {"local-prefill-fallback", "", "prefill on the decode worker when no prefill worker is live",
       true},
      {"routing", "cache_aware",
       "placement: cache_aware (tokens left to compute given the workers' prefix caches, plus "
       "load; session_id sticks) or load (load alone, for comparison)"},
      {"local-prefill-max-uncached-tokens", "256",
       "cache_aware: the decode worker holding a prompt's prefix prefills the rest itself when "
       "at most this many tokens are not cached there (0 = never)"},
      {"decode-cache-weight", "1.0",
       "cache_aware: decode score bonus for a fully cached prompt (KV headroom and batch load "
       "are the other terms)"},
      {"max-blocks-per-worker", "262144",
       "prefix-cache block hashes the router keeps per worker (16 bytes each; bounds memory)"},
      {"max-sessions", "65536", "session ids whose last placement the router remembers"},
  };
  for (cli::FlagSpec& spec : specs) spec.name = prefix + spec.name;
  return specs;
}

absl::Status ApplyRouterFlags(const cli::Flags& flags, const std::string& prefix,
                              const std::string& model_dir, RouterServerOptions* options) {
  auto get = [&](const std::string& name) { return flags.Get(prefix + name); };
  auto bad = [&](const std::string& name, const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("--", prefix, name, " ", what));
  };
  options->listen_address = get("listen");
  options->metrics_address = get("metrics-listen");
  std::map<std::string, int64_t> ints;
  for (const char* name :
       {"heartbeat-timeout-ms", "local-prefill-max-prompt", "local-prefill-threshold-tokens",
        "local-prefill-max-uncached-tokens", "max-blocks-per-worker", "max-sessions"}) {
    auto v = flags.GetInt(prefix + name);
    if (!v.ok()) return v.status();
    ints[name] = *v;
  }
  const std::string routing = get("routing");
  if (routing == "cache_aware") {
    options->policy.routing = Routing::kCacheAware;
  } else if (routing == "load") {
    options->policy.routing = Routing::kLoad;
  } else {
    return bad("routing", "must be cache_aware or load");
  }
  if (ints["local-prefill-max-uncached-tokens"] < 0) {
    return bad("local-prefill-max-uncached-tokens", "must be >= 0");
  }
  if (ints["max-blocks-per-worker"] < 2 || ints["max-blocks-per-worker"] > (int64_t{1} << 30)) {
    return bad("max-blocks-per-worker", "must be in [2, 2^30]");
  }
  if (ints["max-sessions"] < 1 || ints["max-sessions"] > (int64_t{1} << 30)) {
    return bad("max-sessions", "must be in [1, 2^30]");
  }
  auto cache_weight = flags.GetDouble(prefix + "decode-cache-weight");
  if (!cache_weight.ok() || !(*cache_weight >= 0 && *cache_weight <= 1e6)) {
    return bad("decode-cache-weight", "must be a number in [0, 1e6]");
  }
  if (ints["heartbeat-timeout-ms"] <= 0) return bad("heartbeat-timeout-ms", "must be > 0");
  if (ints["local-prefill-max-prompt"] < 0) return bad("local-prefill-max-prompt", "must be >= 0");
  if (ints["local-prefill-threshold-tokens"] < 0) {
    return bad("local-prefill-threshold-tokens", "must be >= 0");
  }
  options->policy.local_prefill_max_uncached_tokens = ints["local-prefill-max-uncached-tokens"];
  options->policy.decode_cache_weight = *cache_weight;
  options->policy.sessions.max_sessions = ints["max-sessions"];
  options->block_index.max_blocks_per_worker = ints["max-blocks-per-worker"];
  options->heartbeat_timeout = absl::Milliseconds(ints["heartbeat-timeout-ms"]);
  if (!ParseReplayOn(get("replay-on"), &options->policy.replay_on)) {
    return bad("replay-on", "must be prefill, decode or auto");
  }
  const std::string mode = get("replay-mode");
  if (mode == "bounded") {
    options->default_replay_mode = ced::internal::REPLAY_MODE_BOUNDED;
  } else if (mode == "exact") {
    options->default_replay_mode = ced::internal::REPLAY_MODE_EXACT;
  } else {
    return bad("replay-mode", "must be bounded or exact");
  }
  options->policy.decoder_only = flags.GetBool(prefix + "decoder-only");
  if (!model_dir.empty()) {
    ASSIGN_OR_RETURN(ModelConfig config, LoadConfigFile(model_dir + "/config.json"));
    options->policy.decoder_only = options->policy.decoder_only || config.IsDecoderOnly();
  }
  options->policy.local_prefill_max_prompt_tokens = ints["local-prefill-max-prompt"];
  options->policy.local_prefill_threshold_tokens = ints["local-prefill-threshold-tokens"];
  options->policy.local_prefill_fallback = flags.GetBool(prefix + "local-prefill-fallback");
  return absl::OkStatus();
}

int RunRouterCommand(const std::vector<std::string>& args) {
  std::vector<cli::FlagSpec> specs = RouterFlagSpecs("");
  specs.insert(
      specs.begin() + 5,
      {"model", "", "model directory: config.json tells whether the model is decoder-only"});
  auto flags = cli::Flags::Parse(specs, args);
  if (!flags.ok()) return Fail(std::string(flags.status().message()), 2);
  if (flags->help()) {
    std::printf("%s", cli::FormatHelp("ced serve --role=router [flags]",
                                      "Runs the router: worker registry, load reports and "
                                      "per-request placement of prefill, decode and replay.",
                                      specs)
                          .c_str());
    return 0;
  }
  if (!flags->positional().empty()) {
    return Fail(absl::StrCat("unexpected argument '", flags->positional()[0], "'"), 2);
  }
  RouterServerOptions options;
  if (absl::Status s = ApplyRouterFlags(*flags, "", "", &options); !s.ok()) {
    return Fail(std::string(s.message()), 2);
  }
  if (!flags->Get("model").empty()) {
    auto config = LoadConfigFile(flags->Get("model") + "/config.json");
    if (!config.ok()) return Fail(std::string(config.status().message()), 1);
    options.policy.decoder_only = options.policy.decoder_only || config->IsDecoderOnly();
  }

  services::InstallShutdownSignals();
  auto server = RouterServer::Start(options);
  if (!server.ok()) return Fail(std::string(server.status().message()), 1);
  const std::string metrics =
      (*server)->metrics_address().empty() ? "none" : (*server)->metrics_address();
  std::printf("router listening on %s (metrics %s)\n", (*server)->grpc_address().c_str(),
              metrics.c_str());
  std::fflush(stdout);
  const int sig = services::WaitForShutdownSignal();
  std::fprintf(stderr, "router: signal %d, shutting down\n", sig);
  (*server)->Shutdown();
  return 0;
}

}  // namespace ced::router
