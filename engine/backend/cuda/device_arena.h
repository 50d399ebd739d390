// Device memory helpers of the CUDA backend: a caching allocator (the engine
// allocates and frees its activation buffers every layer) and a staging area
// for the small host tables the Backend interface passes (row and block
// pointer tables, token ids, positions).
//
// Not thread-safe: owned by one CudaBackend, used from its owner's thread.
// Every buffer is used in order on one stream, so a freed block may be handed
// out again at once: work queued later on the stream runs after earlier work.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <unordered_map>

namespace ced::cuda_backend {

class BlockCache {
 public:
  explicit BlockCache(cudaStream_t stream) : stream_(stream) {}
  ~BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // Zeroed (on the stream) device memory, or nullptr when out of memory.
  void* Alloc(size_t bytes);
  void Free(void* ptr);

 private:
  void ReleaseCached();
  static constexpr size_t kMaxCachedBytes = size_t{2} << 30;
  cudaStream_t stream_;
  std::unordered_map<void*, size_t> live_;  // pointer -> rounded size
  std::multimap<size_t, void*> cached_;
  size_t cached_bytes_ = 0;
};

// Bump allocator over one device buffer, reset per backend op. Copies from
// pageable host memory are staged by the driver before cudaMemcpyAsync
// returns, so the host tables may die as soon as the op returns.
class Staging {
 public:
  explicit Staging(cudaStream_t stream) : stream_(stream) {}
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  // Starts an op that will stage at most `bytes` (with 16-byte alignment
  // padding per Put). Grows the buffer (after draining the stream) if needed.
  cudaError_t Begin(size_t bytes);
  // Copies `bytes` of host memory to the staging area; returns the device
  // address (nullptr after a failed Begin).
  void* Put(const void* host, size_t bytes, cudaError_t* err);

 private:
  cudaStream_t stream_;
  char* buffer_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
};

}  // namespace ced::cuda_backend
