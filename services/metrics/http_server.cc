#include "services/metrics/http_server.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "services/common/host_port.h"
#include "services/metrics/text_format.h"

namespace ced::metrics {
namespace {

// Translates "host:port" into civetweb's listening_ports syntax.
absl::StatusOr<std::string> ToCivetwebPorts(const std::string& address) {
  absl::StatusOr<services::HostPort> hp = services::ParseHostPort(address);
  if (!hp.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("listen_address: ", hp.status().message()));
  }
  std::string host = hp->host;
  if (host.empty() || host == "*") return absl::StrCat(hp->port);
  if (absl::AsciiStrToLower(host) == "localhost") host = "127.0.0.1";
  if (host.find(':') != std::string::npos && address.front() != '[') {
    return absl::InvalidArgumentError(absl::StrCat(
        "listen_address '", address, "': IPv6 hosts must be bracketed, e.g. [::1]:9090"));
  }
  return services::FormatHostPort(host, hp->port);
}

// The IPv4 address a local client can reach a listener on, or "" (IPv6).
std::string WakeAddress(const std::string& civetweb_ports) {
  const size_t colon = civetweb_ports.rfind(':');
  if (colon == std::string::npos) return "127.0.0.1";  // Port only: all interfaces.
  const std::string host = civetweb_ports.substr(0, colon);
  if (host.front() == '[') return "";
  return host == "0.0.0.0" ? "127.0.0.1" : host;
}

// One short connection to the listener, so civetweb's accept loop sees its stop flag now
// instead of at the end of its 2 s poll. Best effort.
void PokeListener(const std::string& ipv4, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, ipv4.c_str(), &addr.sin_addr) != 1) return;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return;
  connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  close(fd);
}

const char* ReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

void SendResponse(mg_connection* conn, const HttpResponse& response, bool head_only) {
  std::string header = absl::StrCat(
      "HTTP/1.1 ", response.status, " ", ReasonPhrase(response.status),
      "\r\nContent-Type: ", response.content_type, "\r\nContent-Length: ", response.body.size(),
      "\r\nCache-Control: no-store\r\nConnection: close\r\n");
  if (response.status == 405) header += "Allow: GET, HEAD\r\n";
  header += "\r\n";
  mg_write(conn, header.data(), header.size());
  if (!head_only && !response.body.empty()) {
    mg_write(conn, response.body.data(), response.body.size());
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Create(
    const Options& options) {
  if (options.registry == nullptr) {
    return absl::InvalidArgumentError("MetricsHttpServer: options.registry is null");
  }
  if (options.num_threads < 1) {
    return absl::InvalidArgumentError("MetricsHttpServer: options.num_threads must be >= 1");
  }
  for (const auto& [path, handler] : options.extra_handlers) {
    if (path.empty() || path.front() != '/' || path == "/metrics" || path == "/healthz" ||
        !handler) {
      return absl::InvalidArgumentError(
          absl::StrCat("MetricsHttpServer: extra handler path '", path,
                       "' must start with '/', not be /metrics or /healthz, and have a handler"));
    }
  }
  ASSIGN_OR_RETURN(std::string ports, ToCivetwebPorts(options.listen_address));

  static std::once_flag init_once;
  std::call_once(init_once, [] { mg_init_library(0); });

  auto server = std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer(options));
  const std::string threads = absl::StrCat(options.num_threads);
  const char* config[] = {"listening_ports",
                          ports.c_str(),
                          "num_threads",
                          threads.c_str(),
                          "enable_keep_alive",
                          "no",
                          "request_timeout_ms",
                          "10000",
                          nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  // Returning 1 keeps civetweb from printing its own log lines; failures reach the caller
  // through mg_error_data.
  callbacks.log_message = [](const mg_connection*, const char*) { return 1; };
  mg_init_data init;
  std::memset(&init, 0, sizeof(init));
  init.callbacks = &callbacks;
  init.user_data = server.get();
  init.configuration_options = config;
  char error_text[256] = {0};
  unsigned error_code = 0;
  mg_error_data error;
  error.code = &error_code;
  error.text = error_text;
  error.text_buffer_size = sizeof(error_text);

  server->context_ = mg_start2(&init, &error);
  if (server->context_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("MetricsHttpServer: cannot listen on '",
                                               options.listen_address, "': ", error_text));
  }
  mg_server_port bound[4];
  std::memset(bound, 0, sizeof(bound));
  const int num_ports = mg_get_server_ports(server->context_, 4, bound);
  if (num_ports < 1 || bound[0].port <= 0) {
    return absl::InternalError(
        absl::StrCat("MetricsHttpServer: no bound port for '", options.listen_address, "'"));
  }
  server->port_ = bound[0].port;
  server->wake_ipv4_ = WakeAddress(ports);
  mg_set_request_handler(server->context_, "/", &MetricsHttpServer::HandleRequest, server.get());
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (context_ == nullptr) return;
  std::thread waker;
  if (!wake_ipv4_.empty()) {
    waker = std::thread([this] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // Let mg_stop set its flag.
      PokeListener(wake_ipv4_, port_);
    });
  }
  mg_stop(context_);
  if (waker.joinable()) waker.join();
}

int MetricsHttpServer::HandleRequest(mg_connection* conn, void* self) {
  const mg_request_info* info = mg_get_request_info(conn);
  HttpRequest request;
  request.method = info->request_method != nullptr ? info->request_method : "";
  request.path = info->local_uri != nullptr ? info->local_uri : "";
  request.query = info->query_string != nullptr ? info->query_string : "";
  const bool head_only = request.method == "HEAD";
  HttpResponse response;
  if (request.method != "GET" && !head_only) {
    response.status = 405;
    response.body = "method not allowed\n";
  } else {
    response = static_cast<const MetricsHttpServer*>(self)->Dispatch(request);
  }
  SendResponse(conn, response, head_only);
  return response.status;
}

HttpResponse MetricsHttpServer::Dispatch(const HttpRequest& request) const {
  HttpResponse response;
  if (request.path == "/metrics") {
    response.content_type = kTextContentType;
    response.body = options_.registry->Serialize();
  } else if (request.path == "/healthz") {
    const bool healthy = !options_.health_check || options_.health_check();
    response.status = healthy ? 200 : 503;
    response.body = healthy ? "ok" : "unhealthy";
  } else if (auto it = options_.extra_handlers.find(request.path);
             it != options_.extra_handlers.end()) {
    response = it->second(request);
  } else {
    response.status = 404;
    response.body = "not found\n";
  }
  return response;
}

}  // namespace ced::metrics
