// The router process: the ced.internal.Router service on a gRPC server (with
// health and reflection), a Prometheus /metrics endpoint, and a background
// thread that notices stale workers.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/common/grpc_util.h"
#include "services/metrics/registry.h"
#include "services/router/router_service.h"

namespace ced::router {

struct RouterServerOptions {
  std::string listen_address = "127.0.0.1:0";   // port 0 picks one
  std::string metrics_address = "127.0.0.1:0";  // empty: no /metrics endpoint
  absl::Duration heartbeat_timeout = absl::Milliseconds(3000);
  absl::Duration heartbeat_interval = absl::ZeroDuration();  // 0: heartbeat_timeout / 3
  // How often the stale thread looks; 0: heartbeat_timeout / 4, at most 250 ms.
  absl::Duration stale_check_interval = absl::ZeroDuration();
  CedRoutingPolicy::Options policy;  // replay_on default, decoder_only, local prefill, ...
  BlockIndex::Options block_index;   // memory bound of the prefix-cache block index
  ced::internal::ReplayMode default_replay_mode = ced::internal::REPLAY_MODE_BOUNDED;
  // TLS / client certificates of the gRPC listener; null: the process's.
  // (A gateway that embeds the router passes the internal identity's.)
  const services::SecurityConfig* security = nullptr;
  // Export the process's CPU, memory and start time (ced_process_*) on this
  // router's /metrics. A gateway that embeds the router exports them once,
  // on its own endpoint: the same process on two endpoints would count its
  // CPU twice in any sum over the fleet.
  bool process_metrics = true;
};

// Start() binds and serves; Shutdown() (or the destructor) stops everything.
// Accessors are thread-safe.
class RouterServer {
 public:
  // UNAVAILABLE when an address cannot be bound, INVALID_ARGUMENT for bad options.
  static absl::StatusOr<std::unique_ptr<RouterServer>> Start(const RouterServerOptions& options);
  ~RouterServer();
  RouterServer(const RouterServer&) = delete;
  RouterServer& operator=(const RouterServer&) = delete;

  // "host:port" actually bound; metrics_address() is empty without an endpoint.
  const std::string& grpc_address() const;
  const std::string& metrics_address() const;
  // The service itself: in-process callers (a gateway embedding the router)
  // route through it without a network hop.
  RouterServiceImpl& service() { return *service_; }
  // A channel to this server that stays in the process (no socket, no TLS).
  std::shared_ptr<grpc::Channel> InProcessChannel();
  // Prometheus text of every router metric (what /metrics serves).
  std::string MetricsText() const { return registry_.Serialize(); }
  // Idempotent; waits at most ~1 s for in-flight calls.
  void Shutdown();

 private:
  RouterServer() = default;
  void StaleLoop(absl::Duration interval);

  metrics::Registry registry_;  // outlives the service and the servers below
  std::unique_ptr<RouterServiceImpl> service_;
  std::unique_ptr<services::RunningServer> server_;
  std::string grpc_address_, metrics_address_;

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread stale_thread_;
};

}  // namespace ced::router
