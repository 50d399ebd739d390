#include "bench/services/ucx_lanes.h"

#include <arpa/inet.h>
#include <ucp/api/ucp.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/engine/stats.h"

namespace ced::bench {
namespace {

struct Server {
  ucp_worker_h worker = nullptr;
  ucp_ep_h ep = nullptr;
  ucp_err_handling_mode_t mode = UCP_ERR_HANDLING_MODE_NONE;
};

void OnConnRequest(ucp_conn_request_h request, void* arg) {
  auto* s = static_cast<Server*>(arg);
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  p.conn_request = request;
  p.err_mode = s->mode;
  if (ucp_ep_create(s->worker, &p, &s->ep) != UCS_OK) s->ep = nullptr;
}

void ErrorCb(void*, ucp_ep_h, ucs_status_t) {}

bool MayUseSharedMemory(const std::string& tls) {
  for (absl::string_view t : absl::StrSplit(tls, ',')) {
    t = absl::StripPrefix(t, "^");
    if (t == "all" || t == "sm" || t == "shm" || t == "mm" || t == "posix" || t == "sysv") {
      return true;
    }
  }
  return false;
}

// "#   lane[1]:  2:sysv/memory.0 md[1]  -> md[1]/sysv/sysdev[255] am am_bw#0 keepalive"
void ParseLane(absl::string_view line, std::set<std::string>* am, std::set<std::string>* rndv) {
  std::vector<absl::string_view> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
  std::string transport;
  for (absl::string_view w : words) {
    const auto colon = w.find(':');
    if (colon != absl::string_view::npos && w.find('/') != absl::string_view::npos &&
        transport.empty() && !absl::StartsWith(w, "lane")) {
      transport = std::string(absl::StripSuffix(w.substr(colon + 1), ".0"));
    }
  }
  if (transport.empty()) return;
  for (absl::string_view w : words) {
    if (w == "am") am->insert(transport);
    if (absl::StartsWith(w, "rma_bw")) rndv->insert(transport);
  }
}

}  // namespace

absl::StatusOr<UcxLanes> ProbeUcxLanes(const std::string& tls, bool peer_error_handling) {
  ucp_config_t* config = nullptr;
  if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) {
    return absl::InternalError("ucp_config_read failed");
  }
  ucp_config_modify(config, "TLS", tls.c_str());
  if (peer_error_handling && MayUseSharedMemory(tls) &&
      std::getenv("UCX_MM_ERROR_HANDLING") == nullptr &&
      std::getenv("UCX_POSIX_ERROR_HANDLING") == nullptr &&
      std::getenv("UCX_SYSV_ERROR_HANDLING") == nullptr) {
    ucp_config_modify(config, "MM_ERROR_HANDLING", "y");  // as the KV transport does
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM;
  ucp_context_h server_ctx = nullptr, client_ctx = nullptr;
  const bool inited = ucp_init(&params, config, &server_ctx) == UCS_OK &&
                      ucp_init(&params, config, &client_ctx) == UCS_OK;
  ucp_config_release(config);
  if (!inited) return absl::UnavailableError(absl::StrCat("ucp_init with UCX_TLS=", tls));
  const ucp_err_handling_mode_t mode =
      peer_error_handling ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  Server server;
  server.mode = mode;
  ucp_worker_params_t wp{};
  ucp_worker_h client = nullptr;
  ucp_listener_h listener = nullptr;
  ucp_ep_h ep = nullptr;
  absl::StatusOr<UcxLanes> result = absl::UnavailableError("ucx lane probe: no connection");
  if (ucp_worker_create(server_ctx, &wp, &server.worker) == UCS_OK &&
      ucp_worker_create(client_ctx, &wp, &client) == UCS_OK) {
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    ucp_listener_params_t lp{};
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = reinterpret_cast<sockaddr*>(&sa);
    lp.sockaddr.addrlen = sizeof sa;
    lp.conn_handler.cb = &OnConnRequest;
    lp.conn_handler.arg = &server;
    ucp_listener_attr_t la{};
    la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    if (ucp_listener_create(server.worker, &lp, &listener) == UCS_OK &&
        ucp_listener_query(listener, &la) == UCS_OK) {
      ucp_ep_params_t ep_params{};
      ep_params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                             UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep_params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
      ep_params.sockaddr.addr = reinterpret_cast<sockaddr*>(&la.sockaddr);
      ep_params.sockaddr.addrlen = sizeof(sockaddr_in);
      ep_params.err_mode = mode;
      ep_params.err_handler.cb = &ErrorCb;
      if (ucp_ep_create(client, &ep_params, &ep) == UCS_OK) {
        ucp_request_param_t rp{};
        void* request = ucp_ep_flush_nbx(ep, &rp);
        const double deadline = NowSeconds() + 10;
        while (UCS_PTR_IS_PTR(request) && ucp_request_check_status(request) == UCS_INPROGRESS &&
               NowSeconds() < deadline) {
          ucp_worker_progress(client);
          ucp_worker_progress(server.worker);
        }
        const bool connected = !UCS_PTR_IS_PTR(request)
                                   ? UCS_PTR_STATUS(request) == UCS_OK
                                   : ucp_request_check_status(request) == UCS_OK;
        if (UCS_PTR_IS_PTR(request)) ucp_request_free(request);
        if (connected) {
          char* text = nullptr;
          size_t size = 0;
          FILE* stream = open_memstream(&text, &size);
          ucp_ep_print_info(ep, stream);
          std::fclose(stream);
          std::set<std::string> am, rndv;
          UcxLanes lanes;
          for (absl::string_view line : absl::StrSplit(absl::string_view(text, size), '\n')) {
            if (line.find("lane[") != absl::string_view::npos) ParseLane(line, &am, &rndv);
            const auto pos = line.find("am_send:");
            if (pos != absl::string_view::npos) {
              lanes.am_protocols = std::string(absl::StripAsciiWhitespace(line.substr(pos + 8)));
            }
          }
          std::free(text);
          lanes.am = absl::StrJoin(am, " + ");
          lanes.rndv = absl::StrJoin(rndv, " + ");
          result = lanes;
        }
      }
    }
  }
  // Force-close both endpoints while progressing both workers (a graceful close
  // would wait for the peer, whose worker nobody else progresses).
  std::vector<void*> closing;
  for (ucp_ep_h e : {ep, server.ep}) {
    if (e == nullptr) continue;
    ucp_request_param_t cp{};
    cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* request = ucp_ep_close_nbx(e, &cp);
    if (UCS_PTR_IS_PTR(request)) closing.push_back(request);
  }
  const double close_deadline = NowSeconds() + 5;
  for (void* request : closing) {
    while (ucp_request_check_status(request) == UCS_INPROGRESS && NowSeconds() < close_deadline) {
      if (client != nullptr) ucp_worker_progress(client);
      if (server.worker != nullptr) ucp_worker_progress(server.worker);
    }
    ucp_request_free(request);
  }
  if (listener != nullptr) ucp_listener_destroy(listener);
  if (client != nullptr) ucp_worker_destroy(client);
  if (server.worker != nullptr) ucp_worker_destroy(server.worker);
  ucp_cleanup(client_ctx);
  ucp_cleanup(server_ctx);
  return result;
}

}  // namespace ced::bench
