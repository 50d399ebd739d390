#include "services/gateway/gateway_server.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/common/status.h"
#include "services/metrics/process_metrics.h"

namespace ced::gateway {

absl::StatusOr<std::unique_ptr<GatewayServer>> GatewayServer::Start(
    const GatewayServerOptions& options) {
  if (options.max_inflight < 1)
    return absl::InvalidArgumentError("gateway: max_inflight must be >= 1");
  if (options.max_inflight_tokens < 1)
    return absl::InvalidArgumentError("gateway: max_inflight_tokens must be >= 1");
  if (options.router_address.empty() && !options.embedded_router.has_value()) {
    return absl::InvalidArgumentError("gateway: a router address is required");
  }
  GatewaySettings settings;
  if (options.model.has_value()) {
    RETURN_IF_ERROR(ValidateConfig(*options.model));
    settings.model = *options.model;
  } else {
    if (options.model_dir.empty()) {
      return absl::InvalidArgumentError("gateway: a model directory (config.json) is required");
    }
    ASSIGN_OR_RETURN(settings.model, LoadConfigFile(options.model_dir + "/config.json"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                   CreateTokenizer(options.model_dir, settings.model.vocab_size));
  settings.model_name = options.model_name;
  if (settings.model_name.empty()) {
    settings.model_name =
        std::filesystem::path(options.model_dir).lexically_normal().filename().string();
    if (settings.model_name.empty()) {
      settings.model_name = std::filesystem::path(options.model_dir)
                                .lexically_normal()
                                .parent_path()
                                .filename()
                                .string();
    }
    if (settings.model_name.empty()) settings.model_name = "ced";
  }
  if (!options.embedded_router.has_value()) settings.router_address = options.router_address;
  settings.limits.vocab_size = settings.model.vocab_size;
  settings.limits.max_position = settings.model.max_position;
  settings.max_inflight = options.max_inflight;
  settings.max_inflight_tokens = options.max_inflight_tokens;
  settings.route_timeout = options.route_timeout;
  settings.default_replay_on = options.default_replay_on;
  settings.default_replay_mode = options.default_replay_mode;
  settings.migration_limit = options.migration_limit;
  settings.reserve_retries = options.reserve_retries;
  settings.kv_wait = options.kv_wait;
  settings.migration_wait = options.migration_wait;
  settings.decode_mux = options.decode_mux;
  if (!options.access_log.empty()) {
    ASSIGN_OR_RETURN(std::unique_ptr<AccessLog> log, AccessLog::Open(options.access_log));
    settings.access_log = std::move(log);
  }

  std::unique_ptr<GatewayServer> server(new GatewayServer());
  if (options.embedded_router.has_value()) {
    router::RouterServerOptions ro = *options.embedded_router;
    ro.process_metrics = false;  // the gateway's endpoint exports them
    server->router_security_ = services::InternalServerSecurity(services::ProcessSecurity());
    ro.security = &server->router_security_;
    auto router = router::RouterServer::Start(ro);
    if (!router.ok()) {
      return absl::Status(router.status().code(),
                          absl::StrCat("gateway: embedded router: ", router.status().message()));
    }
    server->router_ = *std::move(router);
    router::RouterServer* r = server->router_.get();
    settings.router_address = r->grpc_address();
    settings.router_channel = r->InProcessChannel();
    settings.local_route = [r](const ced::internal::RouteRequest& request,
                               ced::internal::RouteResponse* response) {
      return r->service().RouteCounted(request, response);
    };
  }
  RETURN_IF_ERROR(metrics::RegisterProcessMetrics(&server->registry_));
  ASSIGN_OR_RETURN(GatewayMetrics metrics,
                   GatewayMetrics::Create(&server->registry_, !options.http_address.empty()));
  server->core_ = std::make_unique<GatewayCore>(std::move(settings), std::move(tokenizer), metrics);
  server->service_ = std::make_unique<GatewayService>(server->core_.get());

  services::ServerOptions grpc_options;
  grpc_options.grpc_address = options.listen_address;
  grpc_options.metrics_address = options.metrics_address;
  grpc_options.services = {server->service_.get()};
  grpc_options.health_service_name = "ced.v1.Gateway";
  grpc_options.registry = &server->registry_;
  grpc_options.max_message_bytes = options.max_request_bytes;
  ASSIGN_OR_RETURN(server->server_, services::RunningServer::Start(grpc_options));
  server->grpc_address_ = server->server_->grpc_address();
  server->metrics_address_ = server->server_->metrics_address();
  server->drain_timeout_ = options.drain_timeout;
  server->server_->SetServing(false);
  GatewayServer* raw = server.get();
  if (!options.http_address.empty()) {
    openai::OpenAiServerOptions http;
    http.listen_address = options.http_address;
    http.model_dir = options.model_dir;
    http.chat_template_file = options.chat_template_file;
    http.tool_call_parser = options.tool_call_parser;
    http.force_usage = options.http_force_usage;
    http.direct_stream = options.http_direct_stream;
    http.request_timeout = options.http_request_timeout;
    http.max_request_bytes = options.max_request_bytes;
    http.threads = options.max_inflight + 8;
    http.security = options.http_security.value_or(services::ProcessSecurity());
    ASSIGN_OR_RETURN(server->http_, openai::OpenAiServer::Start(http, server->core_.get(),
                                                                [raw] { return raw->serving(); }));
    server->http_address_ = server->http_->address();
  }
  const absl::Duration interval = options.health_poll_interval;
  server->health_thread_ = std::thread([raw, interval] { raw->HealthLoop(interval); });
  return server;
}

GatewayServer::~GatewayServer() { Shutdown(); }

std::string GatewayServer::embedded_router_address() const {
  return router_ == nullptr ? "" : router_->grpc_address();
}

std::string GatewayServer::embedded_router_metrics_address() const {
  return router_ == nullptr ? "" : router_->metrics_address();
}

bool GatewayServer::serving() const {
  absl::MutexLock lock(&mu_);
  return server_ != nullptr && server_->serving();
}

bool GatewayServer::PollRouter() {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + core_->settings().route_timeout));
  ced::internal::ListWorkersResponse workers;
  if (!core_->router()->ListWorkers(&ctx, {}, &workers).ok()) return false;
  bool prefill = false, decode = false;
  for (const ced::internal::WorkerStatus& w : workers.workers()) {
    if (!w.live()) continue;
    prefill = prefill || w.info().role() == ced::internal::ROLE_PREFILL;
    decode = decode || w.info().role() == ced::internal::ROLE_DECODE;
  }
  return prefill && decode;
}

void GatewayServer::HealthLoop(absl::Duration interval) {
  while (true) {
    const bool healthy = PollRouter();
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    if (healthy != server_->serving()) server_->SetServing(healthy);
    // Not serving yet (workers still registering, as right after `ced
    // cluster` says it is ready): look again soon, not a whole interval later.
    mu_.AwaitWithTimeout(absl::Condition(&stop_),
                         healthy ? interval : std::min(interval, absl::Milliseconds(100)));
    if (stop_) return;
  }
}

void GatewayServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (health_thread_.joinable()) health_thread_.join();
  const absl::Time drain_end = absl::Now() + drain_timeout_;
  if (http_ != nullptr) http_->StopAccepting();
  if (server_ != nullptr) {
    server_->SetServing(false);
    server_->Shutdown(static_cast<int>(absl::ToInt64Milliseconds(drain_timeout_)));
  }
  if (http_ != nullptr) http_->Shutdown(std::max(absl::ZeroDuration(), drain_end - absl::Now()));
  if (core_ != nullptr) core_->WaitForCalls();
  absl::MutexLock lock(&mu_);
  server_.reset();
  if (router_ != nullptr) router_->Shutdown();
}

}  // namespace ced::gateway
