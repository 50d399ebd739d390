#include "services/common/grpc_util.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <semaphore.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <ctime>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "services/common/host_port.h"

namespace ced::services {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::StatusOr<std::unique_ptr<RunningServer>> RunningServer::Start(
    const ServerOptions& options) {
  std::unique_ptr<RunningServer> rs(new RunningServer());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  const SecurityConfig security =
      options.security != nullptr ? *options.security : ProcessSecurity();
  builder.AddListeningPort(options.grpc_address, MakeServerCredentials(security), &port);
  int health_port = 0;
  if (!security.health_address.empty()) {
    builder.AddListeningPort(security.health_address, MakeHealthOnlyServerCredentials(),
                             &health_port);
  }
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  // Accept the keepalive pings our own clients send (MakeChannel) even
  // between calls, instead of answering GOAWAY "too_many_pings".
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  for (grpc::Service* s : options.services) builder.RegisterService(s);
  rs->server_ = builder.BuildAndStart();
  if (rs->server_ == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for gRPC on ", options.grpc_address,
                     security.health_address.empty()
                         ? ""
                         : absl::StrCat(" and health checks on ", security.health_address)));
  }
  if (!security.health_address.empty() && health_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for gRPC health checks on ", security.health_address));
  }
  absl::StatusOr<HostPort> bound = ParseHostPort(options.grpc_address);
  if (!bound.ok()) return bound.status();  // unreachable: the server bound it
  rs->grpc_address_ = FormatHostPort(bound->host, static_cast<uint16_t>(port));
  rs->health_name_ = options.health_service_name;
  rs->SetServing(true);
  if (!options.metrics_address.empty()) {
    if (options.registry == nullptr) {
      return absl::InvalidArgumentError("metrics endpoint needs a registry");
    }
    metrics::MetricsHttpServer::Options mo;
    mo.listen_address = options.metrics_address;
    mo.registry = options.registry;
    RunningServer* raw = rs.get();
    mo.health_check = [raw] { return raw->serving(); };
    auto m = metrics::MetricsHttpServer::Create(mo);
    if (!m.ok()) return m.status();
    rs->metrics_ = std::move(*m);
    absl::StatusOr<HostPort> mbound = ParseHostPort(options.metrics_address);
    if (!mbound.ok()) return mbound.status();  // unreachable: the server bound it
    rs->metrics_address_ = FormatHostPort(mbound->host.empty() ? "0.0.0.0" : mbound->host,
                                          static_cast<uint16_t>(rs->metrics_->port()));
  }
  return rs;
}

RunningServer::~RunningServer() { Shutdown(0); }

void RunningServer::SetServing(bool serving) {
  serving_ = serving;
  if (server_ == nullptr) return;
  auto* health = server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus(serving);
  if (!health_name_.empty()) health->SetServingStatus(health_name_, serving);
}

bool RunningServer::serving() const { return serving_; }

void RunningServer::Shutdown(int deadline_ms) {
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
    server_->Wait();
    server_.reset();
  }
  metrics_.reset();
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Fail fast when a peer is gone instead of waiting for reconnection.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  const SecurityConfig security = ProcessSecurity();
  if (security.tls_client && !security.server_name.empty()) {
    args.SetSslTargetNameOverride(security.server_name);
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      address, MakeChannelCredentials(security), args, MakeClientInterceptors(security));
}

namespace {
sem_t g_signal_sem;
std::atomic<int> g_signal{0};
void OnSignal(int sig) {
  g_signal = sig;
  sem_post(&g_signal_sem);  // async-signal-safe
}
}  // namespace

void InstallShutdownSignals() {
  sem_init(&g_signal_sem, 0, 0);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  // A peer that closed its end (a client, Redis, another worker) makes a
  // write fail with EPIPE; the default SIGPIPE would end the service.
  std::signal(SIGPIPE, SIG_IGN);
}

int WaitForShutdownSignal() {
  while (sem_wait(&g_signal_sem) != 0) {
  }
  return g_signal.load();
}

int WaitForShutdownSignalFor(double seconds) {
  timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  const int64_t ns = deadline.tv_nsec + static_cast<int64_t>(seconds * 1e9);
  deadline.tv_sec += ns / 1000000000;
  deadline.tv_nsec = ns % 1000000000;
  while (sem_timedwait(&g_signal_sem, &deadline) != 0) {
    if (errno == ETIMEDOUT) return g_signal.load();
  }
  return g_signal.load();
}

bool ShutdownRequested() { return g_signal.load() != 0; }

void RequestShutdown() {
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, SIGTERM)) sem_post(&g_signal_sem);
}

grpc::ServerUnaryReactor* AnswerDrain(grpc::CallbackServerContext* ctx, const char* who,
                                      const std::string& reason) {
  std::fprintf(stderr, "%s: drain requested by %s%s%s\n", who, ctx->peer().c_str(),
               reason.empty() ? "" : ": ", reason.c_str());
  RequestShutdown();
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace ced::services
