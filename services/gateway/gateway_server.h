// The gateway process: the public ced.v1.Gateway service (plus health and
// reflection) and a Prometheus /metrics endpoint. Health is SERVING only
// while the router answers and lists at least one live prefill and one live
// decode worker.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ced/internal/common.pb.h"
#include "engine/model/config.h"
#include "services/common/grpc_util.h"
#include "services/gateway/gateway_core.h"
#include "services/gateway/gateway_service.h"
#include "services/gateway/openai/openai_server.h"
#include "services/metrics/registry.h"
#include "services/router/router_server.h"

namespace ced::gateway {

struct GatewayServerOptions {
  std::string listen_address = "127.0.0.1:0";   // port 0 picks one
  std::string metrics_address = "127.0.0.1:0";  // empty: no /metrics endpoint
  std::string router_address = "127.0.0.1:50051";
  // Set: the gateway runs the router itself (its own internal gRPC listener
  // and /metrics endpoint, where the workers register) and places requests
  // with a function call instead of a Route RPC; router_address is unused.
  // Its listener takes the process's certificate with the internal CA
  // required of peers (services::InternalServerSecurity), never tokens.
  std::optional<router::RouterServerOptions> embedded_router;
  // The model: config.json in model_dir (weights are not needed), or `model`
  // when set (tests). model_name defaults to model_dir's last component.
  std::string model_dir;
  std::optional<ModelConfig> model;
  std::string model_name;
  int max_inflight = 256;  // RESOURCE_EXHAUSTED beyond
  // Prompt + max_tokens summed over admitted requests; RESOURCE_EXHAUSTED beyond.
  int64_t max_inflight_tokens = int64_t{1} << 20;
  int max_request_bytes = 4 << 20;                  // larger messages: RESOURCE_EXHAUSTED
  absl::Duration route_timeout = absl::Seconds(2);  // router silent longer: UNAVAILABLE
  absl::Duration health_poll_interval = absl::Seconds(1);
  // Shutdown (SIGTERM): new calls are refused at once, in-flight ones get
  // this long to finish before they are cancelled.
  absl::Duration drain_timeout = absl::Seconds(1);
  // Used for requests that leave them unspecified; UNSPECIFIED = the router's.
  ced::internal::ReplayOn default_replay_on = ced::internal::REPLAY_ON_UNSPECIFIED;
  ced::internal::ReplayMode default_replay_mode = ced::internal::REPLAY_MODE_UNSPECIFIED;
  // Request migration (GatewaySettings::migration_limit); 0 = off.
  int migration_limit = 3;
  // Re-placements after a Reserve refused for room (GatewaySettings::reserve_retries); 0 = off.
  int reserve_retries = 2;
  // Waiting for K/V room (GatewaySettings::kv_wait); zero = off.
  absl::Duration kv_wait = absl::ZeroDuration();
  // Waiting for a worker to migrate to (GatewaySettings::migration_wait); zero = off.
  absl::Duration migration_wait = absl::ZeroDuration();
  // Tokens on one multiplexed stream per decode worker (GatewaySettings::decode_mux).
  bool decode_mux = true;
  // OpenAiServerOptions::direct_stream.
  bool http_direct_stream = true;
  // The OpenAI-compatible HTTP API (openai/openai_server.h): host:port, empty
  // for none. TLS and bearer tokens as the process's SecurityConfig says.
  std::string http_address;
  std::string chat_template_file;  // overrides the model's chat template
  std::string tool_call_parser = "auto";  // OpenAiServerOptions::tool_call_parser
  // Access log (AccessLog::Open: "-" is stderr, else a file appended to); empty: none.
  std::string access_log;
  bool http_force_usage = false;   // usage chunk on every stream
  absl::Duration http_request_timeout = absl::Minutes(10);
  // The HTTP API's TLS and tokens when set (tests); else the process's.
  std::optional<services::SecurityConfig> http_security;
};

// Start() binds and serves; Shutdown() (or the destructor) cancels what is in
// flight and waits for it. Accessors are thread-safe.
class GatewayServer {
 public:
  // INVALID_ARGUMENT / NOT_FOUND for a bad model or options, UNAVAILABLE when
  // an address cannot be bound.
  static absl::StatusOr<std::unique_ptr<GatewayServer>> Start(const GatewayServerOptions& options);
  ~GatewayServer();
  GatewayServer(const GatewayServer&) = delete;
  GatewayServer& operator=(const GatewayServer&) = delete;

  const std::string& grpc_address() const { return grpc_address_; }
  const std::string& metrics_address() const { return metrics_address_; }
  // The OpenAI HTTP API's "host:port"; empty when it is off.
  const std::string& http_address() const { return http_address_; }
  // The embedded router's gRPC and /metrics addresses; empty without one.
  std::string embedded_router_address() const;
  std::string embedded_router_metrics_address() const;
  // What grpc.health.v1 reports (as of the last poll of the router).
  bool serving() const;
  std::string MetricsText() const { return registry_.Serialize(); }
  // Idempotent. In-flight calls get drain_timeout to finish, then are cancelled.
  void Shutdown();

 private:
  GatewayServer() = default;
  void HealthLoop(absl::Duration interval);
  bool PollRouter();

  metrics::Registry registry_;  // outlives everything below
  services::SecurityConfig router_security_;
  std::unique_ptr<router::RouterServer> router_;  // embedded; outlives the core
  std::unique_ptr<GatewayCore> core_;
  std::unique_ptr<GatewayService> service_;
  std::unique_ptr<services::RunningServer> server_;
  std::unique_ptr<openai::OpenAiServer> http_;
  std::string grpc_address_, metrics_address_, http_address_;
  absl::Duration drain_timeout_ = absl::Seconds(1);

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread health_thread_;
};

}  // namespace ced::gateway
