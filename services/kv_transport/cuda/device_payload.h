// Payload helpers for spans that may be device or host memory
// (plugin-internal).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "services/kv_transport/transport.h"

namespace ced::kv_transport::cuda {

// Whether `ptr` is memory the GPU can address directly (device or managed).
bool IsDeviceMemory(const void* ptr);

// CRC32C of the concatenated spans (each device or host memory), the value
// checksum.h's Crc32c computes over the same bytes. Device spans are checked on
// the GPU (kernels/cuda/crc32c.h) on `stream`; `scratch` is reused.
class PayloadChecksummer {
 public:
  explicit PayloadChecksummer(cudaStream_t stream) : stream_(stream) {}
  ~PayloadChecksummer();
  absl::StatusOr<uint32_t> Checksum(const std::vector<ConstSpan>& spans);

 private:
  absl::StatusOr<uint32_t> DeviceCrc(const uint8_t* data, uint64_t size);

  cudaStream_t stream_;
  uint32_t* dev_crcs_ = nullptr;
  size_t dev_capacity_ = 0;
  std::vector<uint32_t> host_crcs_;
};

// A device buffer that only grows.
class DeviceScratch {
 public:
  ~DeviceScratch();
  absl::StatusOr<uint8_t*> Get(uint64_t bytes);

 private:
  uint8_t* ptr_ = nullptr;
  uint64_t size_ = 0;
};

absl::Status CudaStatus(cudaError_t err, const char* what);

}  // namespace ced::kv_transport::cuda
