#include "services/kv_transport/cuda/device_payload.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/crc32c.h"
#include "services/kv_transport/checksum.h"

namespace ced::kv_transport::cuda {
namespace {

constexpr uint64_t kCrcChunk = 64 << 10;

}  // namespace

absl::Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

bool IsDeviceMemory(const void* ptr) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

PayloadChecksummer::~PayloadChecksummer() {
  if (dev_crcs_ != nullptr) cudaFree(dev_crcs_);
}

absl::StatusOr<uint32_t> PayloadChecksummer::DeviceCrc(const uint8_t* data, uint64_t size) {
  const size_t n = static_cast<size_t>((size + kCrcChunk - 1) / kCrcChunk);
  if (n > dev_capacity_) {
    if (dev_crcs_ != nullptr) cudaFree(dev_crcs_);
    dev_crcs_ = nullptr;
    dev_capacity_ = 0;
    if (auto s = CudaStatus(cudaMalloc(&dev_crcs_, n * sizeof(uint32_t)), "checksum buffer");
        !s.ok()) {
      return s;
    }
    dev_capacity_ = n;
  }
  if (auto s = CudaStatus(kernels::Crc32cChunksCuda(data, size, kCrcChunk, dev_crcs_, stream_),
                          "checksum kernel");
      !s.ok()) {
    return s;
  }
  host_crcs_.resize(n);
  if (auto s = CudaStatus(cudaMemcpyAsync(host_crcs_.data(), dev_crcs_, n * sizeof(uint32_t),
                                          cudaMemcpyDeviceToHost, stream_),
                          "checksum copy");
      !s.ok()) {
    return s;
  }
  if (auto s = CudaStatus(cudaStreamSynchronize(stream_), "checksum"); !s.ok()) return s;
  static const Crc32cFolder kFull(kCrcChunk);
  uint32_t crc = host_crcs_[0];
  for (size_t i = 1; i < n; ++i) {
    const uint64_t len = i + 1 < n ? kCrcChunk : size - i * kCrcChunk;
    crc =
        len == kCrcChunk ? kFull.Fold(crc, host_crcs_[i]) : Crc32cCombine(crc, host_crcs_[i], len);
  }
  return crc;
}

absl::StatusOr<uint32_t> PayloadChecksummer::Checksum(const std::vector<ConstSpan>& spans) {
  uint32_t crc = 0;
  bool first = true;
  for (const ConstSpan& s : spans) {
    if (s.size == 0) continue;
    uint32_t piece;
    if (IsDeviceMemory(s.data)) {
      auto c = DeviceCrc(s.data, s.size);
      if (!c.ok()) return c.status();
      piece = *c;
    } else {
      piece = Crc32c(0, s.data, s.size);
    }
    crc = first ? piece : Crc32cCombine(crc, piece, s.size);
    first = false;
  }
  return crc;
}

DeviceScratch::~DeviceScratch() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

absl::StatusOr<uint8_t*> DeviceScratch::Get(uint64_t bytes) {
  if (bytes <= size_) return ptr_;
  if (ptr_ != nullptr) cudaFree(ptr_);
  ptr_ = nullptr;
  size_ = 0;
  if (auto s = CudaStatus(cudaMalloc(&ptr_, bytes), "device staging buffer"); !s.ok()) return s;
  size_ = bytes;
  return ptr_;
}

}  // namespace ced::kv_transport::cuda
