#include "tests/gateway/gateway_test_util.h"

#include <grpcpp/generic/generic_stub.h>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "engine/model/presets.h"
#include "services/common/grpc_util.h"

namespace ced::gateway {

GenerateResult CollectGenerate(ced::v1::Gateway::Stub* stub,
                               const ced::v1::GenerateRequest& request,
                               grpc::ClientContext* context) {
  GenerateResult result;
  auto reader = stub->Generate(context, request);
  ced::v1::GenerateResponse response;
  while (reader->Read(&response)) {
    result.token_ids.insert(result.token_ids.end(), response.token_ids().begin(),
                            response.token_ids().end());
    result.text += response.text();
    result.messages.push_back(response);
  }
  result.status = reader->Finish();
  return result;
}

ced::internal::WorkerInfo PrefillInfo(const std::string& address) {
  ced::internal::WorkerInfo w;
  w.set_worker_id("p0");
  w.set_role(ced::internal::ROLE_PREFILL);
  w.set_grpc_address(address);
  w.set_weights(ced::internal::WEIGHTS_HELD_ENCODER_REPLAY);
  w.set_model_fingerprint("fp-test");
  w.set_kv_format("bf16");
  w.set_kv_transport("inproc");
  return w;
}

ced::internal::WorkerInfo DecodeInfo(const std::string& address) {
  ced::internal::WorkerInfo w;
  w.set_worker_id("d0");
  w.set_role(ced::internal::ROLE_DECODE);
  w.set_grpc_address(address);
  w.set_kv_address("inproc://d0");
  w.set_weights(ced::internal::WEIGHTS_HELD_FULL);
  w.set_total_kv_blocks(1000);
  w.set_block_size(16);
  w.set_model_fingerprint("fp-test");
  w.set_kv_format("bf16");
  w.set_kv_transport("inproc");
  return w;
}

grpc::Status RegisterWorker(ced::internal::Router::Stub* router,
                            const ced::internal::WorkerInfo& worker) {
  grpc::ClientContext ctx;
  ced::internal::RegisterRequest request;
  *request.mutable_worker() = worker;
  ced::internal::RegisterResponse response;
  return router->Register(&ctx, request, &response);
}

GatewayServerOptions TestGatewayOptions(const std::string& router_address) {
  GatewayServerOptions options;
  options.router_address = router_address;
  ModelConfig config = *PresetConfig("tiny");
  config.max_position = 128;
  options.model = config;
  options.model_name = "test-model";
  options.health_poll_interval = absl::Milliseconds(100);
  return options;
}

absl::StatusOr<bool> CheckHealth(const std::string& address) {
  grpc::GenericStub stub(services::MakeChannel(address));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1);  // HealthCheckRequest{service: ""}
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (!status.ok()) return services::FromGrpc(status);
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (response.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices)
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  // HealthCheckResponse{status: SERVING (1)} is the two bytes 08 01.
  return bytes == std::string("\x08\x01", 2);
}

bool WaitForHealth(const std::string& address, bool serving, absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (absl::Now() < give_up) {
    absl::StatusOr<bool> health = CheckHealth(address);
    if (health.ok() && *health == serving) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

}  // namespace ced::gateway
