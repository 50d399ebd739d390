// The compute backend seam of the engine (think of a ggml backend vtable).
//
// The engine drives a model only through this interface, so the same prefill,
// replay and decode code runs on every device. All `float*` / `uint8_t*`
// arguments are backend memory (host memory for the CPU backend, device memory
// for CUDA) unless a parameter says `_host`. A backend instance is used by one
// thread at a time (the engine's owner serializes calls); ops may use internal
// worker threads and return when their results are visible to the next op.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/kv_codec.h"
#include "kernels/cpu/math.h"

namespace ced {

using kernels::KvFormat;

using kernels::AttentionParams;
using kernels::AttentionSegment;
using kernels::GemmTarget;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // Memory. Alloc returns zeroed memory or nullptr when out of memory.
  virtual void* Alloc(size_t bytes) = 0;
  // Like Alloc, for scratch the caller writes before reading: the contents
  // are unspecified (the CPU backend skips the zeroing). Freed with Free.
  virtual void* AllocScratch(size_t bytes) { return Alloc(bytes); }
  virtual void Free(void* ptr) = 0;
  virtual void CopyToDevice(void* dst, const void* src_host, size_t bytes) = 0;
  virtual void CopyToHost(void* dst_host, const void* src, size_t bytes) = 0;
  virtual void Copy(void* dst, const void* src, size_t bytes) = 0;
  // Makes a weight tensor usable by ops. The CPU backend returns `host`
  // itself (no copy); others upload. The result lives as long as the backend.
  virtual absl::StatusOr<const float*> UploadWeights(const float* host, size_t count) = 0;

  // out[i, :] = table[tokens_host[i], :], table is [vocab, d].
  virtual void Embed(const int32_t* tokens_host, int n, const float* table, int d, float* out) = 0;
  // out[i] = x[i] / sqrt(mean(x[i]^2) + eps) * w; x, out are [n, d] (may alias).
  virtual void RmsNorm(const float* x, int n, int d, const float* w, float eps, float* out) = 0;
  // y[n, out] = x[n, in] * w[out, in]^T (w row-major like a linear layer).
  virtual void Gemm(const float* x, int n, int in, const float* w, int out, float* y) = 0;
  // Several products of one input x[n, in]: for each target,
  // y[n, out] = x * w^T, or y += x * w^T when `accumulate` (a residual add
  // fused into the product). Backends run them as one op where they can;
  // the default issues one Gemm (+ Add) per target.
  virtual void GemmMulti(const float* x, int n, int in, const GemmTarget* targets, int count);
  // x[i] += y[i].
  virtual void Add(float* x, const float* y, size_t count) = 0;
  // Rotate-half RoPE in place on x [n, heads, head_dim] at positions_host[i].
  virtual void Rope(float* x, int n, int heads, int head_dim, const int32_t* positions_host,
                    double theta) = 0;
  // gate[i] = silu(gate[i]) * up[i].
  virtual void SiluMul(float* gate, const float* up, size_t count) = 0;
  // out[i, :] = x[rows_host[i], :] for i < n; x [*, d], out [n, d] (no alias).
  // The default is Embed (the same gather).
  virtual void GatherRows(const float* x, int d, const int32_t* rows_host, int n, float* out) {
    Embed(rows_host, n, x, d, out);
  }
  // Mixture-of-experts combine (DESIGN.md §1.7): for each row i < n of
  // x [n, d], x[i] += Σ_{j<k}, in order of j, weights_host[i*k+j] *
  // y[rows_host[i*k+j], :]. y holds the experts' outputs (must not alias x).
  virtual void MoeCombine(float* x, int n, int d, int k, const float* y,
                          const int32_t* rows_host, const float* weights_host) = 0;
  // Encodes n rows of row_elems floats (src row stride src_stride floats)
  // into the cache format at dst_rows_host[i].
  virtual void StoreRows(KvFormat format, const float* src, int n, int row_elems, size_t src_stride,
                         uint8_t* const* dst_rows_host) = 0;
  // Rounds x [n, row_elems] through the cache format in place (what a later
  // read of the stored rows would return).
  virtual void RoundTrip(KvFormat format, float* x, int n, int row_elems) = 0;
  // One softmax over the union of global keys [0, t] and local keys
  // [max(lo, t-W+1), t] per query (DESIGN.md §1.3); scale 1/sqrt(D), GQA.
  virtual void Attention(const AttentionParams& params,
                         const std::vector<AttentionSegment>& segments) = 0;
  // Blocks until all queued work is done (no-op on CPU).
  virtual void Synchronize() = 0;
  // The first error an op met (ops queue work and return nothing, so a
  // device fault surfaces here). Sticky: after a fault the backend's results
  // cannot be trusted. The engine checks it after every forward step (the
  // step's results copied to the host) and fails the step with it, so a
  // fault never yields tokens under an OK status. The CPU backend has none.
  virtual absl::Status status() const { return absl::OkStatus(); }
};

using BackendFactory = std::function<absl::StatusOr<std::unique_ptr<Backend>>()>;

// Backends register themselves at static-initialization time from their own
// targets (linked whole-archive); the engine picks one by name ("cpu", "cuda").
bool RegisterBackend(const std::string& name, BackendFactory factory);
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& name);
std::vector<std::string> RegisteredBackends();

}  // namespace ced
