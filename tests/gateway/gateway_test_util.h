// Helpers for the gateway tests: worker registrations, a Generate collector,
// and a raw grpc.health.v1 check (no generated health stubs needed).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ced/internal/router.grpc.pb.h"
#include "ced/v1/gateway.grpc.pb.h"
#include "services/gateway/gateway_server.h"

namespace ced::gateway {

struct GenerateResult {
  std::vector<ced::v1::GenerateResponse> messages;
  std::vector<int32_t> token_ids;  // concatenated
  std::string text;                // concatenated
  grpc::Status status;
};

// Reads a whole Generate stream.
GenerateResult CollectGenerate(ced::v1::Gateway::Stub* stub,
                               const ced::v1::GenerateRequest& request,
                               grpc::ClientContext* context);

// Workers "p0" (ENCODER_REPLAY) and "d0" (FULL, 1000 blocks of 16, bf16)
// serving at `address`, model fingerprint "fp-test".
ced::internal::WorkerInfo PrefillInfo(const std::string& address);
ced::internal::WorkerInfo DecodeInfo(const std::string& address);
grpc::Status RegisterWorker(ced::internal::Router::Stub* router,
                            const ced::internal::WorkerInfo& worker);

// The tiny preset with max_position 128, named "test-model"; fast health polls.
GatewayServerOptions TestGatewayOptions(const std::string& router_address);

// grpc.health.v1.Health/Check for service "" through a generic stub: true
// for SERVING, false for NOT_SERVING, an error when the call fails.
absl::StatusOr<bool> CheckHealth(const std::string& address);
// Polls CheckHealth until it reports `serving` (false after `timeout`).
bool WaitForHealth(const std::string& address, bool serving, absl::Duration timeout);

}  // namespace ced::gateway
