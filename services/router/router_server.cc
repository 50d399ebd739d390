#include "services/router/router_server.h"

#include <algorithm>

#include "engine/common/status.h"
#include "services/metrics/process_metrics.h"

namespace ced::router {

absl::StatusOr<std::unique_ptr<RouterServer>> RouterServer::Start(
    const RouterServerOptions& options) {
  std::unique_ptr<RouterServer> server(new RouterServer());
  if (options.process_metrics) {
    RETURN_IF_ERROR(metrics::RegisterProcessMetrics(&server->registry_));
  }
  RouterServiceOptions so;
  so.heartbeat_timeout = options.heartbeat_timeout;
  so.heartbeat_interval = options.heartbeat_interval;
  so.policy = options.policy;
  so.block_index = options.block_index;
  so.default_replay_mode = options.default_replay_mode;
  so.registry = &server->registry_;
  ASSIGN_OR_RETURN(server->service_, RouterServiceImpl::Create(so));

  services::ServerOptions grpc_options;
  grpc_options.grpc_address = options.listen_address;
  grpc_options.metrics_address = options.metrics_address;
  grpc_options.services = {server->service_.get()};
  grpc_options.health_service_name = "ced.internal.Router";
  grpc_options.registry = &server->registry_;
  grpc_options.security = options.security;
  ASSIGN_OR_RETURN(server->server_, services::RunningServer::Start(grpc_options));
  server->grpc_address_ = server->server_->grpc_address();
  server->metrics_address_ = server->server_->metrics_address();

  absl::Duration interval = options.stale_check_interval;
  if (interval <= absl::ZeroDuration()) {
    interval = std::min(options.heartbeat_timeout / 4, absl::Milliseconds(250));
  }
  RouterServer* raw = server.get();
  server->stale_thread_ = std::thread([raw, interval] { raw->StaleLoop(interval); });
  return server;
}

RouterServer::~RouterServer() { Shutdown(); }

const std::string& RouterServer::grpc_address() const { return grpc_address_; }
const std::string& RouterServer::metrics_address() const { return metrics_address_; }

std::shared_ptr<grpc::Channel> RouterServer::InProcessChannel() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  return server_->server()->InProcessChannel(args);
}

void RouterServer::StaleLoop(absl::Duration interval) {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    mu_.AwaitWithTimeout(absl::Condition(&stop_), interval);
    if (stop_) break;
    service_->MarkStale(absl::Now());
  }
}

void RouterServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (stale_thread_.joinable()) stale_thread_.join();
  if (server_ != nullptr) {
    server_->SetServing(false);
    server_->Shutdown(/*deadline_ms=*/1000);
    server_.reset();
  }
}

}  // namespace ced::router
