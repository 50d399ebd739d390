// The CUDA backend: device memory, cuBLAS GEMMs, kernels/cuda for the rest.
// Built as the plugin libced_cuda.so (see plugin.h for why).
//
// All work runs in order on one stream owned by the backend. The Backend
// interface hands some tables over as host arrays (token ids, positions, row
// and block pointers); each op copies them to a device staging area (one
// small H2D copy per call) before launching. Ops cannot return errors through
// the interface: the first CUDA or cuBLAS error is kept and reported on
// stderr once (the interface has no error channel yet).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/backend/backend.h"
#include "engine/backend/cuda/device_arena.h"
#include "engine/backend/cuda/plugin.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/kv_codec.h"

namespace ced {
namespace {

using cuda_backend::BlockCache;
using cuda_backend::Staging;

struct CudaBackendOptions {
  std::string name = "cuda";
  bool bf16_gemm = false;  // weights and activations in bf16, f32 accumulation
};

class CudaBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<Backend>> Create(const CudaBackendOptions& options);
  ~CudaBackend() override;

  std::string_view name() const override { return options_.name; }

  void* Alloc(size_t bytes) override { return cache_->Alloc(bytes); }
  void Free(void* ptr) override { cache_->Free(ptr); }
  void CopyToDevice(void* dst, const void* src_host, size_t bytes) override {
    Check(cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, stream_), "H2D copy");
    Check(cudaStreamSynchronize(stream_), "H2D copy");
  }
  void CopyToHost(void* dst_host, const void* src, size_t bytes) override {
    Check(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, stream_), "D2H copy");
    Check(cudaStreamSynchronize(stream_), "D2H copy");
  }
  void Copy(void* dst, const void* src, size_t bytes) override {
    Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "D2D copy");
  }
  absl::StatusOr<const float*> UploadWeights(const float* host, size_t count) override;

  void Embed(const int32_t* tokens_host, int n, const float* table, int d, float* out) override;
  void RmsNorm(const float* x, int n, int d, const float* w, float eps, float* out) override {
    Check(kernels::RmsNormCuda(x, n, d, w, eps, out, stream_), "RmsNorm");
  }
  void Gemm(const float* x, int n, int in, const float* w, int out, float* y) override;
  void Add(float* x, const float* y, size_t count) override {
    Check(kernels::AddCuda(x, y, count, stream_), "Add");
  }
  void Rope(float* x, int n, int heads, int head_dim, const int32_t* positions_host,
            double theta) override;
  void SiluMul(float* gate, const float* up, size_t count) override {
    Check(kernels::SiluMulCuda(gate, up, count, stream_), "SiluMul");
  }
  void StoreRows(KvFormat format, const float* src, int n, int row_elems, size_t src_stride,
                 uint8_t* const* dst_rows_host) override;
  void MoeCombine(float* x, int n, int d, int k, const float* y, const int32_t* rows_host,
                  const float* weights_host) override;
  void RoundTrip(KvFormat format, float* x, int n, int row_elems) override {
    Check(kernels::RoundTripCuda(format, x, n, row_elems, stream_), "RoundTrip");
  }
  void Attention(const AttentionParams& params,
                 const std::vector<AttentionSegment>& segments) override;
  void Synchronize() override { Check(cudaStreamSynchronize(stream_), "Synchronize"); }
  absl::Status status() const override { return status_; }

 private:
  explicit CudaBackend(const CudaBackendOptions& options) : options_(options) {}
  void Check(cudaError_t err, const char* what);
  void CheckBlas(cublasStatus_t st, const char* what);
  // Stages `bytes` of host memory for one op; nullptr on error (recorded).
  void* StageOne(const void* host, size_t bytes, const char* what);

  CudaBackendOptions options_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<BlockCache> cache_;
  std::unique_ptr<Staging> staging_;
  std::vector<void*> weights_;
  std::unordered_map<const float*, const uint16_t*> bf16_weights_;  // f32 copy -> bf16 copy
  uint16_t* x_bf16_ = nullptr;  // activations converted for bf16 GEMMs
  size_t x_bf16_count_ = 0;
  std::once_flag reported_;
  absl::Status status_;
};

absl::StatusOr<std::unique_ptr<Backend>> CudaBackend::Create(const CudaBackendOptions& options) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat(
        "no CUDA device (", err != cudaSuccess ? cudaGetErrorString(err) : "0 devices", ")"));
  }
  std::unique_ptr<CudaBackend> b(new CudaBackend(options));
  if (cudaStreamCreateWithFlags(&b->stream_, cudaStreamNonBlocking) != cudaSuccess) {
    return absl::InternalError("cuda: cannot create a stream");
  }
  if (cublasCreate(&b->cublas_) != CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError("cuda: cannot create a cuBLAS handle");
  }
  cublasSetStream(b->cublas_, b->stream_);
  // f32: plain f32 arithmetic (no TF32, whatever the environment says), so
  // results track the CPU backend; bf16: tensor cores with f32 accumulation.
  cublasSetMathMode(b->cublas_, options.bf16_gemm ? CUBLAS_DEFAULT_MATH : CUBLAS_PEDANTIC_MATH);
  b->cache_ = std::make_unique<BlockCache>(b->stream_);
  b->staging_ = std::make_unique<Staging>(b->stream_);
  return std::unique_ptr<Backend>(std::move(b));
}

CudaBackend::~CudaBackend() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  staging_.reset();
  cache_.reset();
  for (void* p : weights_) cudaFree(p);
  if (x_bf16_ != nullptr) cudaFree(x_bf16_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void CudaBackend::Check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  if (status_.ok()) {
    status_ = absl::InternalError(absl::StrCat("cuda ", what, ": ", cudaGetErrorString(err)));
  }
  std::call_once(reported_, [&] { std::fprintf(stderr, "%s\n", status_.ToString().c_str()); });
}

void CudaBackend::CheckBlas(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  if (status_.ok()) {
    status_ = absl::InternalError(absl::StrCat("cublas ", what, ": status ", static_cast<int>(st)));
  }
  std::call_once(reported_, [&] { std::fprintf(stderr, "%s\n", status_.ToString().c_str()); });
}

void* CudaBackend::StageOne(const void* host, size_t bytes, const char* what) {
  cudaError_t err = staging_->Begin(bytes + 16);
  Check(err, what);
  if (err != cudaSuccess) return nullptr;
  void* dev = staging_->Put(host, bytes, &err);
  Check(err, what);
  return err == cudaSuccess ? dev : nullptr;
}

absl::StatusOr<const float*> CudaBackend::UploadWeights(const float* host, size_t count) {
  void* dev = nullptr;
  const size_t bytes = count * sizeof(float);
  if (cudaMalloc(&dev, bytes == 0 ? 4 : bytes) != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("cuda: out of device memory for a weight of ", count, " values"));
  }
  weights_.push_back(dev);
  if (cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
    return absl::InternalError("cuda: weight upload failed");
  }
  auto* f32 = static_cast<const float*>(dev);
  if (options_.bf16_gemm) {
    void* half = nullptr;
    if (cudaMalloc(&half, count * 2 + 2) != cudaSuccess) {
      cudaGetLastError();
      return absl::ResourceExhaustedError("cuda: out of device memory for bf16 weights");
    }
    weights_.push_back(half);
    if (kernels::F32ToBf16Cuda(f32, static_cast<uint16_t*>(half), count, stream_) != cudaSuccess ||
        cudaStreamSynchronize(stream_) != cudaSuccess) {
      return absl::InternalError("cuda: bf16 weight conversion failed");
    }
    bf16_weights_[f32] = static_cast<const uint16_t*>(half);
  }
  return f32;
}

void CudaBackend::Embed(const int32_t* tokens_host, int n, const float* table, int d,
                        float* out) {
  if (n <= 0) return;
  auto* tokens = static_cast<const int32_t*>(StageOne(tokens_host, n * sizeof(int32_t), "Embed"));
  if (tokens != nullptr) Check(kernels::EmbedCuda(tokens, n, table, d, out, stream_), "Embed");
}

void CudaBackend::MoeCombine(float* x, int n, int d, int k, const float* y,
                             const int32_t* rows_host, const float* weights_host) {
  if (n <= 0 || k <= 0) return;
  const size_t count = static_cast<size_t>(n) * k;
  cudaError_t err = staging_->Begin(count * (sizeof(int32_t) + sizeof(float)) + 32);
  Check(err, "MoeCombine");
  if (err != cudaSuccess) return;
  auto* rows = static_cast<const int32_t*>(staging_->Put(rows_host, count * sizeof(int32_t), &err));
  Check(err, "MoeCombine");
  if (err != cudaSuccess) return;
  auto* weights = static_cast<const float*>(staging_->Put(weights_host, count * sizeof(float), &err));
  Check(err, "MoeCombine");
  if (err != cudaSuccess) return;
  Check(kernels::MoeCombineCuda(x, n, d, k, y, rows, weights, stream_), "MoeCombine");
}

void CudaBackend::Rope(float* x, int n, int heads, int head_dim, const int32_t* positions_host,
                       double theta) {
  if (n <= 0) return;
  auto* pos = static_cast<const int32_t*>(StageOne(positions_host, n * sizeof(int32_t), "Rope"));
  if (pos != nullptr) Check(kernels::RopeCuda(x, n, heads, head_dim, pos, theta, stream_), "Rope");
}

void CudaBackend::Gemm(const float* x, int n, int in, const float* w, int out, float* y) {
  if (n <= 0 || out <= 0) return;
  const float one = 1.0f, zero = 0.0f;
  // Row-major y[n,out] = x[n,in] w[out,in]^T is column-major y^T = w^T' x^T.
  auto it = options_.bf16_gemm ? bf16_weights_.find(w) : bf16_weights_.end();
  if (it == bf16_weights_.end()) {
    CheckBlas(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w, in, x, in,
                          &zero, y, out),
              "Sgemm");
    return;
  }
  const size_t count = static_cast<size_t>(n) * in;
  if (count > x_bf16_count_) {
    Check(cudaStreamSynchronize(stream_), "Gemm");
    if (x_bf16_ != nullptr) cudaFree(x_bf16_);
    x_bf16_ = nullptr;
    x_bf16_count_ = 0;
    void* p = nullptr;
    Check(cudaMalloc(&p, count * 2), "Gemm bf16 activations");
    if (p == nullptr) return;
    x_bf16_ = static_cast<uint16_t*>(p);
    x_bf16_count_ = count;
  }
  Check(kernels::F32ToBf16Cuda(x, x_bf16_, count, stream_), "Gemm");
  CheckBlas(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, it->second,
                         CUDA_R_16BF, in, x_bf16_, CUDA_R_16BF, in, &zero, y, CUDA_R_32F, out,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "GemmEx bf16");
}

void CudaBackend::StoreRows(KvFormat format, const float* src, int n, int row_elems,
                            size_t src_stride, uint8_t* const* dst_rows_host) {
  if (n <= 0) return;
  auto* rows = static_cast<uint8_t* const*>(StageOne(dst_rows_host, n * sizeof(uint8_t*), "StoreRows"));
  if (rows == nullptr) return;
  Check(kernels::EncodeRowsCuda(format, src, n, row_elems, src_stride, rows, stream_), "StoreRows");
}

void CudaBackend::Attention(const AttentionParams& params,
                            const std::vector<AttentionSegment>& segments) {
  std::vector<kernels::AttentionSegmentCuda> segs;
  std::vector<size_t> nblocks;
  size_t table_entries = 0;
  int max_rows = 0;
  for (const AttentionSegment& s : segments) {
    if (s.n <= 0) continue;
    // A window-only layer (params.global false) has no block tables.
    const size_t nb =
        params.global
            ? (static_cast<size_t>(s.q_begin) + s.n + params.block_size - 1) / params.block_size
            : 0;
    nblocks.push_back(nb);
    table_entries += 2 * nb;
    max_rows = std::max(max_rows, s.n);
  }
  if (max_rows == 0) return;
  // One host buffer with every block table (K then V per segment).
  std::vector<const uint8_t*> tables;
  tables.reserve(table_entries);
  size_t k = 0;
  for (const AttentionSegment& s : segments) {
    if (s.n <= 0) continue;
    tables.insert(tables.end(), s.global_k_host, s.global_k_host + nblocks[k]);
    tables.insert(tables.end(), s.global_v_host, s.global_v_host + nblocks[k]);
    ++k;
  }
  const size_t table_bytes = tables.size() * sizeof(const uint8_t*);
  const size_t seg_bytes = nblocks.size() * sizeof(kernels::AttentionSegmentCuda);
  cudaError_t err = staging_->Begin(table_bytes + seg_bytes + 32);
  Check(err, "Attention");
  if (err != cudaSuccess) return;
  auto* dev_tables = static_cast<const uint8_t* const*>(staging_->Put(tables.data(), table_bytes, &err));
  Check(err, "Attention");
  if (err != cudaSuccess) return;
  size_t off = 0;
  k = 0;
  for (const AttentionSegment& s : segments) {
    if (s.n <= 0) continue;
    kernels::AttentionSegmentCuda d;
    d.q = s.q;
    d.out = s.out;
    d.n = s.n;
    d.q_begin = s.q_begin;
    d.global_k = dev_tables + off;
    d.global_v = dev_tables + off + nblocks[k];
    d.local_k_ring = s.local_k_ring;
    d.local_v_ring = s.local_v_ring;
    d.chunk_local_k = s.chunk_local_k;
    d.chunk_local_v = s.chunk_local_v;
    d.lo = s.lo;
    segs.push_back(d);
    off += 2 * nblocks[k];
    ++k;
  }
  auto* dev_segs = static_cast<const kernels::AttentionSegmentCuda*>(
      staging_->Put(segs.data(), seg_bytes, &err));
  Check(err, "Attention");
  if (err != cudaSuccess) return;
  Check(kernels::AttentionCuda(params, dev_segs, static_cast<int>(segs.size()), max_rows, stream_),
        "Attention");
}

absl::StatusOr<std::unique_ptr<Backend>> MakeCuda(const char* name, bool bf16) {
  CudaBackendOptions o;
  o.name = name;
  o.bf16_gemm = bf16;
  return CudaBackend::Create(o);
}

}  // namespace
}  // namespace ced

// The plugin's entry points (engine/backend/cuda/plugin.h); everything else in
// libced_cuda.so is hidden. No CUDA call happens before create_backend runs.
extern "C" __attribute__((visibility("default"))) int ced_cuda_plugin_abi_version() {
  return CED_CUDA_PLUGIN_ABI_VERSION;
}

extern "C" __attribute__((visibility("default"))) void ced_cuda_plugin_create_backend(
    const char* name, absl::StatusOr<std::unique_ptr<ced::Backend>>* out) {
  const std::string n = name != nullptr ? name : "";
  if (n == "cuda") {
    *out = ced::MakeCuda("cuda", false);
  } else if (n == "cuda-bf16") {
    *out = ced::MakeCuda("cuda-bf16", true);
  } else {
    *out = absl::InvalidArgumentError(
        absl::StrCat("CUDA plugin: unknown backend '", n, "' (expected cuda or cuda-bf16)"));
  }
}
