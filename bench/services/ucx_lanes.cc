#include "bench/services/ucx_lanes.h"

#include <ucp/api/ucp.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/common/stats.h"
#include "services/kv_transport/ucx/ucx_util.h"

namespace ced::bench {
namespace {

void ErrorCb(void*, ucp_ep_h, ucs_status_t) {}

// Progresses both workers until `request` (from either) completes or `seconds` pass.
bool Wait(void* request, ucp_worker_h a, ucp_worker_h b, double seconds) {
  if (!UCS_PTR_IS_PTR(request)) return UCS_PTR_STATUS(request) == UCS_OK;
  const double deadline = NowSeconds() + seconds;
  while (ucp_request_check_status(request) == UCS_INPROGRESS && NowSeconds() < deadline) {
    ucp_worker_progress(a);
    ucp_worker_progress(b);
  }
  const bool ok = ucp_request_check_status(request) == UCS_OK;
  ucp_request_free(request);
  return ok;
}

std::string WorkerAddress(ucp_worker_h worker) {
  ucp_address_t* address = nullptr;
  size_t length = 0;
  if (ucp_worker_get_address(worker, &address, &length) != UCS_OK) return "";
  std::string out(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(worker, address);
  return out;
}

}  // namespace

absl::StatusOr<UcxLanes> ProbeUcxLanes(const std::string& tls, bool peer_error_handling) {
  ucp_config_t* config = nullptr;
  if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) {
    return absl::InternalError("ucp_config_read failed");
  }
  ucp_config_modify(config, "TLS", tls.c_str());
  if (peer_error_handling && kv_transport::ucx::MayUseSharedMemory(tls) &&
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
  ucp_worker_params_t wp{};
  ucp_worker_h server = nullptr, client = nullptr;
  ucp_ep_h server_ep = nullptr, client_ep = nullptr;
  absl::StatusOr<UcxLanes> result = absl::UnavailableError("ucx lane probe: no connection");
  if (ucp_worker_create(server_ctx, &wp, &server) == UCS_OK &&
      ucp_worker_create(client_ctx, &wp, &client) == UCS_OK) {
    // Both sides create an endpoint from the other's worker address, as the
    // KV transport (after its address exchange) and ucx_perftest do.
    const std::string server_address = WorkerAddress(server);
    const std::string client_address = WorkerAddress(client);
    auto create = [&](ucp_worker_h worker, const std::string& remote, ucp_ep_h* ep) {
      ucp_ep_params_t p{};
      p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                     UCP_EP_PARAM_FIELD_ERR_HANDLER;
      p.address = reinterpret_cast<const ucp_address_t*>(remote.data());
      p.err_mode = peer_error_handling ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
      p.err_handler.cb = &ErrorCb;
      return !remote.empty() && ucp_ep_create(worker, &p, ep) == UCS_OK;
    };
    if (create(server, client_address, &server_ep) && create(client, server_address, &client_ep)) {
      ucp_request_param_t rp{};
      const bool connected = Wait(ucp_ep_flush_nbx(client_ep, &rp), client, server, 10) &&
                             Wait(ucp_ep_flush_nbx(server_ep, &rp), client, server, 10);
      if (connected) {
        const kv_transport::ucx::EpLanes lanes = kv_transport::ucx::DescribeLanes(client_ep);
        result = UcxLanes{lanes.am, lanes.rndv + (lanes.rndv_rma ? " (RMA)" : " (AM)"),
                          lanes.am_protocols};
      }
    }
  }
  // Force-close both endpoints while progressing both workers (a graceful close
  // would wait for the peer, whose worker nobody else progresses).
  for (ucp_ep_h e : {client_ep, server_ep}) {
    if (e == nullptr) continue;
    ucp_request_param_t cp{};
    cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* request = ucp_ep_close_nbx(e, &cp);
    if (UCS_PTR_IS_PTR(request)) {
      const double deadline = NowSeconds() + 5;
      while (ucp_request_check_status(request) == UCS_INPROGRESS && NowSeconds() < deadline) {
        ucp_worker_progress(client);
        ucp_worker_progress(server);
      }
      ucp_request_free(request);
    }
  }
  if (client != nullptr) ucp_worker_destroy(client);
  if (server != nullptr) ucp_worker_destroy(server);
  ucp_cleanup(client_ctx);
  ucp_cleanup(server_ctx);
  return result;
}

}  // namespace ced::bench
