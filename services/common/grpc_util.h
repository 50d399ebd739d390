// gRPC plumbing shared by every ced service: status conversion and a server
// with health checking, reflection and a Prometheus /metrics endpoint.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "services/metrics/http_server.h"
#include "services/metrics/registry.h"
#include "services/common/security.h"

namespace ced::services {

// absl -> grpc keeps the code and the message. Never branch on the message.
grpc::Status ToGrpc(const absl::Status& status);
absl::Status FromGrpc(const grpc::Status& status);

struct ServerOptions {
  std::string grpc_address = "127.0.0.1:0";     // "host:port"; port 0 picks one
  std::string metrics_address = "127.0.0.1:0";  // empty: no metrics endpoint
  std::vector<grpc::Service*> services;          // not owned; must outlive the server
  std::string health_service_name;               // also reported under ""
  metrics::Registry* registry = nullptr;         // required when metrics_address is set
  int max_message_bytes = 64 << 20;
  // TLS / client certificates / bearer tokens of the gRPC listener; null:
  // the process's (SetProcessSecurity, plaintext by default).
  const SecurityConfig* security = nullptr;
};

// A running gRPC server (+ metrics HTTP endpoint). Thread-safe accessors.
class RunningServer {
 public:
  static absl::StatusOr<std::unique_ptr<RunningServer>> Start(const ServerOptions& options);
  ~RunningServer();
  // "host:port" actually bound.
  const std::string& grpc_address() const { return grpc_address_; }
  const std::string& metrics_address() const { return metrics_address_; }
  // NOT_SERVING makes health checks (and the metrics /healthz) fail.
  void SetServing(bool serving);
  bool serving() const;
  // Stops accepting calls; waits at most `deadline_ms` for in-flight calls.
  void Shutdown(int deadline_ms);
  grpc::Server* server() { return server_.get(); }

 private:
  RunningServer() = default;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<metrics::MetricsHttpServer> metrics_;
  std::string grpc_address_, metrics_address_, health_name_;
  std::atomic<bool> serving_{true};
};

// A channel with sane defaults for internal calls (keepalive, big messages),
// secured as the process's SecurityConfig says (TLS + client certificate).
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

// Installs SIGINT/SIGTERM handlers and ignores SIGPIPE (a write to a closed
// socket fails with EPIPE instead of ending the process; children started by
// Subprocess get the default back); WaitForShutdownSignal() blocks until one
// arrives and returns the signal number.
void InstallShutdownSignals();
int WaitForShutdownSignal();
// The same for at most `seconds`: 0 when none arrived by then.
int WaitForShutdownSignalFor(double seconds);
bool ShutdownRequested();
// Wakes WaitForShutdownSignal as SIGTERM would (the admin Drain RPC).
void RequestShutdown();
// The workers' admin Drain RPC: logs who asked (`who` drains, for `reason`),
// requests the shutdown and answers OK at once; the drain follows.
grpc::ServerUnaryReactor* AnswerDrain(grpc::CallbackServerContext* ctx, const char* who,
                                      const std::string& reason);

}  // namespace ced::services
