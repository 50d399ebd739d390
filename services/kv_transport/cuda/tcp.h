// Small blocking TCP helpers for the control connections of the CUDA
// transports (plugin-internal).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ced::kv_transport::cuda {

// Binds and listens; returns the fd and the bound "host:port".
absl::StatusOr<int> TcpListen(const std::string& address, std::string* bound);
// Connects within `timeout`; UNAVAILABLE when the peer is unreachable.
absl::StatusOr<int> TcpConnect(const std::string& address, absl::Duration timeout);
// Reads / writes exactly `size` bytes before `deadline` (absl::InfiniteFuture
// for none). UNAVAILABLE on EOF or error, DEADLINE_EXCEEDED on timeout.
absl::Status ReadFull(int fd, void* data, size_t size, absl::Time deadline);
absl::Status WriteFull(int fd, const void* data, size_t size, absl::Time deadline);

}  // namespace ced::kv_transport::cuda
