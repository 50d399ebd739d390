// Entry point of the UCX transport for the factory; free of UCX headers.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "services/kv_transport/transport.h"

namespace ced::kv_transport::ucx {

absl::StatusOr<std::unique_ptr<KvTransport>> CreateUcxTransport(const TransportOptions& options);

}  // namespace ced::kv_transport::ucx
