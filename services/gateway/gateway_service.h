// The ced.v1.Gateway service (gRPC callback API). Generate and Tokenize take
// their requests as raw bytes (see request_parsing.h) so that every bad
// request, invalid UTF-8 included, gets INVALID_ARGUMENT naming the field.
#pragma once

#include <grpcpp/grpcpp.h>

#include "ced/v1/gateway.grpc.pb.h"
#include "services/gateway/gateway_core.h"

namespace ced::gateway {

using GatewayServiceBase = ced::v1::Gateway::WithRawCallbackMethod_Generate<
    ced::v1::Gateway::WithRawCallbackMethod_Tokenize<
        ced::v1::Gateway::WithCallbackMethod_ModelInfo<ced::v1::Gateway::Service>>>;

// Thread-safe. Handlers never block: Generate runs on a thread per request
// (GenerateCall), ModelInfo asks the router asynchronously.
class GatewayService final : public GatewayServiceBase {
 public:
  // `core` is not owned and must outlive the service and every call.
  explicit GatewayService(GatewayCore* core) : core_(core) {}

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ModelInfo(grpc::CallbackServerContext* context,
                                      const ced::v1::ModelInfoRequest* request,
                                      ced::v1::ModelInfoResponse* response) override;

 private:
  GatewayCore* const core_;
};

// The static part of ModelInfo (config.json and accounting).
void FillModelInfo(const GatewaySettings& settings, const Tokenizer& tokenizer,
                   ced::v1::ModelInfoResponse* response);

}  // namespace ced::gateway
