// KV transport over NCCL point-to-point (plugin-internal; the public entry is
// cuda_transport.h, kind "nccl").
//
// One TCP control connection and one two-rank NCCL communicator per
// (sender, peer) pair: the sender connects, sends a hello with a fresh
// ncclUniqueId, and both sides join the communicator (sender rank 0, receiver
// rank 1; non-blocking init, aborted on timeout). A message then goes:
//
//   sender                                  receiver
//   64-byte header (wire.h) ------------->  DecodeHeader, KvSink::Accept
//                           <-------------  verdict: rejected (status) or
//                                           accepted + the sizes of its spans
//   ncclSend per segment    ============>   ncclRecv per segment (segments: the
//                                           merge of both span layouts)
//                                           CRC32C over the landed bytes,
//                                           KvSink::Complete
//                           <-------------  verdict (status)
//
// Nothing is sent before the receiver accepted; a rejected message costs one
// round trip. Sends to one peer are serialized on its connection. NCCL needs
// the two ranks on different GPUs (it refuses two ranks on one device).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "services/kv_transport/transport.h"

namespace ced::kv_transport::cuda {

absl::StatusOr<std::unique_ptr<KvTransport>> CreateNcclTransport(const TransportOptions& options);

}  // namespace ced::kv_transport::cuda
