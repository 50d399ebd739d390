// MetricsHttpServer: a small civetweb HTTP server exposing a Registry at GET /metrics, a
// health probe at GET /healthz, and optional extra GET handlers.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "services/metrics/registry.h"

struct mg_context;
struct mg_connection;

namespace ced::metrics {

struct HttpRequest {
  std::string method;  // "GET" or "HEAD" (other methods get 405 before any handler runs).
  std::string path;    // e.g. "/metrics"
  std::string query;   // Text after '?', undecoded; empty when absent.
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

// Thread-safety: handlers (and Registry::Serialize) run on civetweb worker threads, possibly
// concurrently. The destructor stops the server and waits for in-flight requests.
class MetricsHttpServer final {
 public:
  struct Options {
    // "host:port", ":port" (all interfaces) or "[v6addr]:port"; "localhost" means 127.0.0.1.
    // Port 0 picks a free port; see port().
    std::string listen_address = "127.0.0.1:0";
    // Served at GET /metrics with Content-Type kTextContentType. Not owned; required; must
    // outlive the server.
    Registry* registry = nullptr;
    // GET /healthz: 200 "ok" when it returns true (or is unset), 503 "unhealthy" otherwise.
    std::function<bool()> health_check;
    // Exact path -> handler for more GET endpoints ("/metrics" and "/healthz" are reserved).
    std::map<std::string, HttpHandler> extra_handlers;
    int num_threads = 2;
  };

  // Binds and starts serving. InvalidArgument for a bad address, missing registry or reserved
  // handler path; Unavailable when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Create(const Options& options);

  // Stops accepting, waits for in-flight requests (prompt for IPv4 listeners; up to ~2 s,
  // civetweb's poll quantum, for IPv6).
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // The port actually bound (the chosen one when the options asked for 0).
  int port() const { return port_; }

 private:
  explicit MetricsHttpServer(Options options) : options_(std::move(options)) {}
  static int HandleRequest(mg_connection* conn, void* self);
  HttpResponse Dispatch(const HttpRequest& request) const;

  const Options options_;
  mg_context* context_ = nullptr;
  int port_ = 0;
  std::string wake_ipv4_;  // Where the destructor pokes the listener; "" for IPv6.
};

}  // namespace ced::metrics
