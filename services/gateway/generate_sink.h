// Where a GenerateCall's output goes: the front end of the API the request
// came in on (the gRPC reactor, an OpenAI HTTP connection). A call is one
// core with two front ends: both get the same ced.v1.GenerateResponse
// messages (token deltas, then one final message with usage) and one Close.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "ced/v1/gateway.pb.h"
#include "services/common/stream_writer.h"

namespace ced::gateway {

// The public API a request came in on; a label of the gateway's metrics.
enum class Api { kGrpc, kOpenAi };
inline const char* ApiLabel(Api api) { return api == Api::kGrpc ? "grpc" : "openai"; }

// Thread-safe: Push and Close come from the call's thread; a sink must
// accept them after its client went away (and drop them).
class GenerateSink {
 public:
  virtual ~GenerateSink() = default;
  // A message for the client, in order. Deltas carry token_ids and text; the
  // final message finish_reason, usage, timings and placement.
  virtual void Push(ced::v1::GenerateResponse response) = 0;
  // The end of the call (OK after the final message, else the error). Once.
  virtual void Close(const grpc::Status& status) = 0;
  // The request is placed: a decode worker took its Reserve and its worker
  // streams started (again after each migration or retry that places it
  // anew). A front end that answers errors before this point in its own way
  // (an HTTP status) may commit to a stream now: whatever fails later
  // reaches the client inside the stream. From a gRPC thread.
  virtual void Started() {}
};

// The gRPC front end: messages serialized onto a StreamWriter reactor.
class GrpcSink final : public GenerateSink {
 public:
  using Writer = services::StreamWriter<grpc::ByteBuffer>;
  explicit GrpcSink(std::shared_ptr<Writer::Handle> out) : out_(std::move(out)) {}
  // The writer's Merge: two deltas that wait for the client become one (the
  // second may be the final message).
  static bool Merge(grpc::ByteBuffer* waiting, grpc::ByteBuffer* next);
  void Push(ced::v1::GenerateResponse response) override;
  void Close(const grpc::Status& status) override { out_->Close(status); }

 private:
  const std::shared_ptr<Writer::Handle> out_;
};

}  // namespace ced::gateway
