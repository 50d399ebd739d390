// Helpers for CUDA tests: device detection (at test time, never at static
// initialization) and a small RAII device array.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ced::testing {

inline bool HasCudaDevice() {
  int count = 0;
  const bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();
  return ok;
}

#define CED_SKIP_WITHOUT_CUDA() \
  if (!::ced::testing::HasCudaDevice()) GTEST_SKIP() << "no CUDA device"

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count) : count_(count) {
    EXPECT_EQ(cudaMalloc(&ptr_, count * sizeof(T) + 1), cudaSuccess);
    EXPECT_EQ(cudaMemset(ptr_, 0, count * sizeof(T) + 1), cudaSuccess);
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    EXPECT_EQ(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return static_cast<T*>(ptr_); }
  std::vector<T> ToHost() const {
    std::vector<T> out(count_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(out.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  }

 private:
  void* ptr_ = nullptr;
  size_t count_;
};

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace ced::testing
