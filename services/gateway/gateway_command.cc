#include "services/gateway/gateway_command.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "services/cli/flags.h"
#include "services/common/host_port.h"
#include "services/gateway/gateway_server.h"
#include "services/router/router_command.h"

namespace ced::gateway {
namespace {

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "ced serve --role=gateway: %s\n", message.c_str());
  return code;
}

}  // namespace

int RunGatewayCommand(const std::vector<std::string>& args) {
  using cli::FlagSpec;
  std::vector<FlagSpec> specs = {
      {"listen", "127.0.0.1:50050", "public gRPC address (host:port; port 0 picks one)"},
      {"metrics-listen", "127.0.0.1:9100", "Prometheus /metrics address (empty: none)"},
      {"router", "127.0.0.1:50051", "router address"},
      {"model", "", "model directory (only config.json is read)"},
      {"model-name", "", "name reported by ModelInfo (default: the directory name)"},
      {"max-inflight", "256", "requests served at once; more get RESOURCE_EXHAUSTED"},
      {"max-inflight-tokens", "1048576",
       "prompt + max_tokens summed over requests in flight; more get RESOURCE_EXHAUSTED"},
      {"max-request-bytes", "4194304", "largest request message; larger: RESOURCE_EXHAUSTED"},
      {"route-timeout-ms", "2000", "router silent this long: UNAVAILABLE"},
      {"drain-timeout-ms", "30000", "SIGTERM: finish in-flight requests for at most this long"},
      {"replay-on", "", "default replay placement: prefill, decode, auto (empty: the router's)"},
      {"replay-mode", "", "default replay length: bounded, exact (empty: the router's)"},
      {"migration-limit", "3",
       "times a request may move to another decode worker when its own dies mid-stream "
       "(0: off, the client gets UNAVAILABLE)"},
      {"access-log", "",
       "log every Generate request as it ends, one JSON object per line (time, api, client, "
       "request_id, "
       "outcome, status, error, tokens, cached tokens, TTFT, total ms, workers, migrations): "
       "'-' for stderr, else a file appended to (empty: off)"},
      {"migration-wait-ms", "15000",
       "a migrating request that finds no decode worker to move to (the only one is restarting, "
       "or the router is) tries again every 250 ms for this long, its stream held open, before "
       "the client gets UNAVAILABLE (0: at once; bounded by the request's deadline)"},
      {"reserve-retries", "2",
       "times a request is placed on another decode worker when one refuses its reservation "
       "with RESOURCE_EXHAUSTED (K/V cache full); then the client gets RESOURCE_EXHAUSTED "
       "naming the workers tried (0: off, the first refusal ends it)"},
      {"kv-wait-ms", "30000",
       "a request refused for K/V room before its first token (no decode worker has room now) "
       "waits this long for room, first come first served (placed again when a request ends), "
       "holding its --max-inflight slot, then fails with RESOURCE_EXHAUSTED (0: fail at once; "
       "bounded by the request's deadline; never for a request larger than every decode "
       "worker's cache)"},
      {"decode-mux", "true",
       "receive tokens on one multiplexed stream per decode worker (false: one stream per "
       "request, as with workers older than the multiplexed stream)",
       true},
      {"http-listen", "",
       "OpenAI-compatible HTTP API address (host:port; port 0 picks one; empty: off)"},
      {"chat-template", "",
       "Jinja chat template file for /v1/chat/completions "
       "(default: the model's tokenizer_config.json, else a built-in one)"},
      {"tool-call-parser", "auto",
       "how a chat model's tool calls become the response's tool_calls when a request offers "
       "tools: hermes (Qwen, <tool_call> JSON), deepseek_v3, none, or auto (the format the chat "
       "template writes tool calls in)"},
      {"http-direct-stream", "true",
       "on plain TCP, write streamed tokens to the client's socket from the thread that "
       "receives them (false: the connection's own thread writes every event)",
       true},
      {"http-include-usage", "false",
       "HTTP API: end every stream with a usage chunk, as if stream_options.include_usage", true},
      {"http-request-timeout-ms", "600000", "HTTP API: deadline of each request"},
      {"embed-router", "false",
       "run the router in this process (workers register at --router-listen; placement is a "
       "function call instead of a Route RPC on every request); the --router-* flags are "
       "`ced serve --role=router`'s flags, --router is then unused",
       true},
  };
  for (FlagSpec spec : router::RouterFlagSpecs("router-")) {
    if (spec.name == "router-listen") spec.default_value = "127.0.0.1:50051";
    spec.help = "--embed-router: " + spec.help;
    specs.push_back(spec);
  }
  auto flags = cli::Flags::Parse(specs, args);
  if (!flags.ok()) return Fail(std::string(flags.status().message()), 2);
  if (flags->help()) {
    std::printf("%s", cli::FormatHelp("ced serve --role=gateway --model DIR [flags]",
                                      "Runs the public gateway: validates and tokenizes "
                                      "requests, places them through the router, and streams "
                                      "tokens from the workers.",
                                      specs)
                          .c_str());
    return 0;
  }
  if (!flags->positional().empty()) {
    return Fail(absl::StrCat("unexpected argument '", flags->positional()[0], "'"), 2);
  }
  GatewayServerOptions options;
  options.listen_address = flags->Get("listen");
  options.metrics_address = flags->Get("metrics-listen");
  options.router_address = flags->Get("router");
  if (flags->GetBool("embed-router")) {
    if (flags->Has("router")) {
      return Fail(
          "--router names a router elsewhere; with --embed-router the gateway runs its "
          "own (--router-listen)",
          2);
    }
    router::RouterServerOptions router;
    if (absl::Status s = router::ApplyRouterFlags(*flags, "router-", flags->Get("model"), &router);
        !s.ok()) {
      return Fail(std::string(s.message()), 2);
    }
    options.embedded_router = router;
  } else if (absl::Status s = services::CheckPeerAddress("router", options.router_address);
             !s.ok()) {
    return Fail(std::string(s.message()), 2);
  }
  options.model_dir = flags->Get("model");
  options.model_name = flags->Get("model-name");
  if (options.model_dir.empty()) return Fail("--model is required", 2);
  auto inflight = flags->GetInt("max-inflight");
  auto inflight_tokens = flags->GetInt("max-inflight-tokens");
  auto request_bytes = flags->GetInt("max-request-bytes");
  auto route_timeout = flags->GetInt("route-timeout-ms");
  for (const absl::Status& s : {inflight.status(), inflight_tokens.status(), request_bytes.status(),
                                route_timeout.status()}) {
    if (!s.ok()) return Fail(std::string(s.message()), 2);
  }
  if (*inflight < 1 || *inflight > (1 << 20)) return Fail("--max-inflight must be in [1, 2^20]", 2);
  if (*inflight_tokens < 1 || *inflight_tokens > (int64_t{1} << 40)) {
    return Fail("--max-inflight-tokens must be in [1, 2^40]", 2);
  }
  if (*request_bytes < 1024 || *request_bytes > (1 << 30)) {
    return Fail("--max-request-bytes must be in [1024, 2^30]", 2);
  }
  if (*route_timeout < 1) return Fail("--route-timeout-ms must be >= 1", 2);
  options.max_inflight = static_cast<int>(*inflight);
  options.max_inflight_tokens = *inflight_tokens;
  options.max_request_bytes = static_cast<int>(*request_bytes);
  options.route_timeout = absl::Milliseconds(*route_timeout);
  auto drain_timeout = flags->GetInt("drain-timeout-ms");
  if (!drain_timeout.ok() || *drain_timeout < 0 || *drain_timeout > 3600000) {
    return Fail("--drain-timeout-ms must be in [0, 3600000]", 2);
  }
  options.drain_timeout = absl::Milliseconds(*drain_timeout);
  auto migration_limit = flags->GetInt("migration-limit");
  if (!migration_limit.ok() || *migration_limit < 0 || *migration_limit > 16) {
    return Fail("--migration-limit must be in [0, 16]", 2);
  }
  options.migration_limit = static_cast<int>(*migration_limit);
  auto reserve_retries = flags->GetInt("reserve-retries");
  if (!reserve_retries.ok() || *reserve_retries < 0 || *reserve_retries > 16) {
    return Fail("--reserve-retries must be in [0, 16]", 2);
  }
  options.reserve_retries = static_cast<int>(*reserve_retries);
  auto kv_wait = flags->GetIntIn("kv-wait-ms", 0, 3600000);
  if (!kv_wait.ok()) return Fail(std::string(kv_wait.status().message()), 2);
  options.kv_wait = absl::Milliseconds(*kv_wait);
  auto migration_wait = flags->GetIntIn("migration-wait-ms", 0, 3600000);
  if (!migration_wait.ok()) return Fail(std::string(migration_wait.status().message()), 2);
  options.migration_wait = absl::Milliseconds(*migration_wait);
  options.decode_mux = flags->GetBool("decode-mux");
  options.http_address = flags->Get("http-listen");
  options.chat_template_file = flags->Get("chat-template");
  options.tool_call_parser = flags->Get("tool-call-parser");
  options.access_log = flags->Get("access-log");
  options.http_force_usage = flags->GetBool("http-include-usage");
  options.http_direct_stream = flags->GetBool("http-direct-stream");
  auto http_timeout = flags->GetInt("http-request-timeout-ms");
  if (!http_timeout.ok() || *http_timeout < 1 || *http_timeout > 86400000) {
    return Fail("--http-request-timeout-ms must be in [1, 86400000]", 2);
  }
  options.http_request_timeout = absl::Milliseconds(*http_timeout);
  const std::string replay_on = flags->Get("replay-on");
  if (replay_on == "prefill")
    options.default_replay_on = ced::internal::REPLAY_ON_PREFILL;
  else if (replay_on == "decode")
    options.default_replay_on = ced::internal::REPLAY_ON_DECODE;
  else if (replay_on == "auto")
    options.default_replay_on = ced::internal::REPLAY_ON_AUTO;
  else if (!replay_on.empty())
    return Fail("--replay-on must be prefill, decode or auto", 2);
  const std::string mode = flags->Get("replay-mode");
  if (mode == "bounded")
    options.default_replay_mode = ced::internal::REPLAY_MODE_BOUNDED;
  else if (mode == "exact")
    options.default_replay_mode = ced::internal::REPLAY_MODE_EXACT;
  else if (!mode.empty())
    return Fail("--replay-mode must be bounded or exact", 2);

  services::InstallShutdownSignals();
  auto server = GatewayServer::Start(options);
  if (!server.ok()) return Fail(std::string(server.status().message()), 1);
  const std::string metrics =
      (*server)->metrics_address().empty() ? "none" : (*server)->metrics_address();
  const std::string http =
      (*server)->http_address().empty() ? "" : ", http " + (*server)->http_address();
  std::printf("gateway listening on %s (metrics %s%s)\n", (*server)->grpc_address().c_str(),
              metrics.c_str(), http.c_str());
  if (!(*server)->embedded_router_address().empty()) {
    const std::string router_metrics = (*server)->embedded_router_metrics_address();
    std::printf("embedded router on %s (metrics %s)\n",
                (*server)->embedded_router_address().c_str(),
                router_metrics.empty() ? "none" : router_metrics.c_str());
  }
  std::fflush(stdout);
  const int sig = services::WaitForShutdownSignal();
  std::fprintf(stderr, "gateway: signal %d, shutting down\n", sig);
  (*server)->Shutdown();
  return 0;
}

}  // namespace ced::gateway
