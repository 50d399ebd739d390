#include "services/router/router_command.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "engine/model/config.h"
#include "services/cli/flags.h"
#include "services/router/router_server.h"

namespace ced::router {
namespace {

constexpr char kWords[] = "router";

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

int RunRouterCommand(const std::vector<std::string>& args) {
  using cli::FlagSpec;
  const std::vector<FlagSpec> specs = {
      {"listen", "127.0.0.1:50051", "gRPC address (host:port; port 0 picks one)"},
      {"metrics-listen", "127.0.0.1:9101", "Prometheus /metrics address (empty: none)"},
      {"heartbeat-timeout-ms", "3000", "a worker silent this long gets no new work"},
      {"replay-on", "auto", "default replay placement: prefill, decode or auto (by load)"},
      {"replay-mode", "bounded", "default replay length: bounded (R from config) or exact"},
      {"model", "", "model directory: config.json tells whether the model is decoder-only"},
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
  auto flags = cli::Flags::Parse(specs, args);
  if (!flags.ok()) return Fail(std::string(flags.status().message()), 2);
  if (flags->help()) {
    std::printf("%s", cli::FormatHelp("ced router [flags]",
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
  options.listen_address = flags->Get("listen");
  options.metrics_address = flags->Get("metrics-listen");
  auto timeout = flags->GetInt("heartbeat-timeout-ms");
  auto max_prompt = flags->GetInt("local-prefill-max-prompt");
  auto threshold = flags->GetInt("local-prefill-threshold-tokens");
  auto max_uncached = flags->GetInt("local-prefill-max-uncached-tokens");
  auto max_blocks = flags->GetInt("max-blocks-per-worker");
  auto max_sessions = flags->GetInt("max-sessions");
  for (const absl::Status& s :
       {timeout.status(), max_prompt.status(), threshold.status(), max_uncached.status(),
        max_blocks.status(), max_sessions.status()}) {
    if (!s.ok()) return Fail(std::string(s.message()), 2);
  }
  const std::string routing = flags->Get("routing");
  if (routing == "cache_aware") {
    options.policy.routing = Routing::kCacheAware;
  } else if (routing == "load") {
    options.policy.routing = Routing::kLoad;
  } else {
    return Fail("--routing must be cache_aware or load", 2);
  }
  if (*max_uncached < 0) return Fail("--local-prefill-max-uncached-tokens must be >= 0", 2);
  if (*max_blocks < 2 || *max_blocks > (int64_t{1} << 30)) {
    return Fail("--max-blocks-per-worker must be in [2, 2^30]", 2);
  }
  if (*max_sessions < 1 || *max_sessions > (int64_t{1} << 30)) {
    return Fail("--max-sessions must be in [1, 2^30]", 2);
  }
  auto cache_weight = flags->GetDouble("decode-cache-weight");
  if (!cache_weight.ok() || !(*cache_weight >= 0 && *cache_weight <= 1e6)) {
    return Fail("--decode-cache-weight must be a number in [0, 1e6]", 2);
  }
  options.policy.local_prefill_max_uncached_tokens = *max_uncached;
  options.policy.decode_cache_weight = *cache_weight;
  options.policy.sessions.max_sessions = *max_sessions;
  options.block_index.max_blocks_per_worker = *max_blocks;
  if (*timeout <= 0) return Fail("--heartbeat-timeout-ms must be > 0", 2);
  if (*max_prompt < 0) return Fail("--local-prefill-max-prompt must be >= 0", 2);
  if (*threshold < 0) return Fail("--local-prefill-threshold-tokens must be >= 0", 2);
  options.heartbeat_timeout = absl::Milliseconds(*timeout);
  if (!ParseReplayOn(flags->Get("replay-on"), &options.policy.replay_on)) {
    return Fail("--replay-on must be prefill, decode or auto", 2);
  }
  const std::string mode = flags->Get("replay-mode");
  if (mode == "bounded") {
    options.default_replay_mode = ced::internal::REPLAY_MODE_BOUNDED;
  } else if (mode == "exact") {
    options.default_replay_mode = ced::internal::REPLAY_MODE_EXACT;
  } else {
    return Fail("--replay-mode must be bounded or exact", 2);
  }
  options.policy.decoder_only = flags->GetBool("decoder-only");
  if (!flags->Get("model").empty()) {
    auto config = LoadConfigFile(flags->Get("model") + "/config.json");
    if (!config.ok()) return Fail(std::string(config.status().message()), 1);
    options.policy.decoder_only = options.policy.decoder_only || config->IsDecoderOnly();
  }
  options.policy.local_prefill_max_prompt_tokens = *max_prompt;
  options.policy.local_prefill_threshold_tokens = *threshold;
  options.policy.local_prefill_fallback = flags->GetBool("local-prefill-fallback");

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
