#include "engine/backend/cuda/device_arena.h"

#include <cuda_runtime.h>

namespace ced::cuda_backend {
namespace {

size_t RoundUp(size_t bytes) {
  const size_t quantum = bytes <= (size_t{1} << 20) ? 256 : (size_t{1} << 16);
  return (bytes == 0 ? 1 : (bytes + quantum - 1) / quantum) * quantum;
}

}  // namespace

BlockCache::~BlockCache() {
  cudaStreamSynchronize(stream_);
  for (auto& [size, ptr] : cached_) cudaFree(ptr);
  for (auto& [ptr, size] : live_) cudaFree(ptr);
}

void* BlockCache::Alloc(size_t bytes) {
  const size_t size = RoundUp(bytes);
  void* ptr = nullptr;
  auto it = cached_.find(size);
  if (it != cached_.end()) {
    ptr = it->second;
    cached_.erase(it);
    cached_bytes_ -= size;
  } else if (cudaMalloc(&ptr, size) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error, retry after a flush
    ReleaseCached();
    if (cudaMalloc(&ptr, size) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
  }
  if (cudaMemsetAsync(ptr, 0, size, stream_) != cudaSuccess) {
    cudaFree(ptr);
    return nullptr;
  }
  live_[ptr] = size;
  return ptr;
}

void BlockCache::Free(void* ptr) {
  if (ptr == nullptr) return;
  auto it = live_.find(ptr);
  if (it == live_.end()) return;
  const size_t size = it->second;
  live_.erase(it);
  cached_.emplace(size, ptr);
  cached_bytes_ += size;
  if (cached_bytes_ > kMaxCachedBytes) ReleaseCached();
}

void BlockCache::ReleaseCached() {
  cudaStreamSynchronize(stream_);
  for (auto& [size, ptr] : cached_) cudaFree(ptr);
  cached_.clear();
  cached_bytes_ = 0;
}

Staging::~Staging() {
  if (buffer_ != nullptr) {
    cudaStreamSynchronize(stream_);
    cudaFree(buffer_);
  }
}

cudaError_t Staging::Begin(size_t bytes) {
  used_ = 0;
  if (bytes <= capacity_) return cudaSuccess;
  size_t want = capacity_ == 0 ? (size_t{1} << 16) : capacity_;
  while (want < bytes) want *= 2;
  if (buffer_ != nullptr) {
    cudaStreamSynchronize(stream_);
    cudaFree(buffer_);
    buffer_ = nullptr;
    capacity_ = 0;
  }
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, want);
  if (err != cudaSuccess) return err;
  buffer_ = static_cast<char*>(p);
  capacity_ = want;
  return cudaSuccess;
}

void* Staging::Put(const void* host, size_t bytes, cudaError_t* err) {
  const size_t at = (used_ + 15) / 16 * 16;
  if (buffer_ == nullptr || at + bytes > capacity_) {
    *err = cudaErrorInvalidValue;
    return nullptr;
  }
  used_ = at + bytes;
  *err = cudaMemcpyAsync(buffer_ + at, host, bytes, cudaMemcpyHostToDevice, stream_);
  return buffer_ + at;
}

}  // namespace ced::cuda_backend
