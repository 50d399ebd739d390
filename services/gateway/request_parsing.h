// Raw (ByteBuffer) request parsing for the public API. The gateway takes its
// requests as bytes so that a malformed request, in particular invalid UTF-8
// in a string field, is answered with INVALID_ARGUMENT naming the field
// instead of the generic failure of gRPC's own deserialization.
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include "absl/status/status.h"
#include "google/protobuf/message.h"

namespace ced::gateway {

// Parses `buffer` into `message`. INVALID_ARGUMENT "prompt: invalid UTF-8" /
// "stop[2]: invalid UTF-8" for a string field that is not UTF-8, and
// "request: malformed <type>" for anything else that does not parse.
absl::Status ParseRequest(const grpc::ByteBuffer& buffer, google::protobuf::Message* message);

// Serializes `message` into `buffer` (replacing its contents).
absl::Status SerializeMessage(const google::protobuf::Message& message, grpc::ByteBuffer* buffer);

}  // namespace ced::gateway
