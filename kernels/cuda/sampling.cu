#include "kernels/cuda/sampling.h"

#include <cmath>

namespace ced::kernels {
namespace {

constexpr int kThreads = 256;

__device__ uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// (value, id) ordered by value descending then id ascending; NaN is -inf.
struct Cand {
  float v;
  int id;
};
__device__ __forceinline__ bool Better(Cand a, Cand b) {
  return a.v > b.v || (a.v == b.v && a.id < b.id);
}

// Block-wide best candidate strictly after `after` in the order (after.id < 0:
// no bound). Every thread gets the result.
__device__ Cand BlockBest(const float* row, int vocab, Cand after) {
  __shared__ Cand warp_best[kThreads / 32];
  Cand best{-INFINITY, vocab};
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float x = isnan(row[i]) ? -INFINITY : row[i];
    const Cand c{x, i};
    if (after.id >= 0 && !Better(after, c)) continue;
    if (Better(c, best)) best = c;
  }
  for (int o = 16; o > 0; o >>= 1) {
    Cand other{__shfl_xor_sync(0xffffffffu, best.v, o), __shfl_xor_sync(0xffffffffu, best.id, o)};
    if (Better(other, best)) best = other;
  }
  if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = best;
  __syncthreads();
  Cand total = warp_best[0];
  for (int w = 1; w < kThreads / 32; ++w) {
    if (Better(warp_best[w], total)) total = warp_best[w];
  }
  __syncthreads();
  return total;
}

__global__ void ArgmaxKernel(const float* logits, int vocab, int32_t* out) {
  const float* row = logits + static_cast<size_t>(blockIdx.x) * vocab;
  const Cand best = BlockBest(row, vocab, Cand{0.0f, -1});
  if (threadIdx.x == 0) out[blockIdx.x] = (best.id >= vocab || best.v == -INFINITY) ? 0 : best.id;
}

__global__ void SampleKernel(const float* logits, int vocab, CudaSamplingParams p,
                             const uint64_t* steps, int32_t* out) {
  __shared__ Cand cands[kCudaSampleMaxCandidates];
  const float* row = logits + static_cast<size_t>(blockIdx.x) * vocab;
  int k = p.top_k <= 0 ? kCudaSampleMaxCandidates : min(p.top_k, kCudaSampleMaxCandidates);
  k = min(k, vocab);
  Cand prev{0.0f, -1};
  for (int c = 0; c < k; ++c) {
    prev = BlockBest(row, vocab, prev);
    if (threadIdx.x == 0) cands[c] = prev;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  const Cand best = cands[0];
  if (best.id >= vocab || best.v == -INFINITY) {
    out[blockIdx.x] = 0;
    return;
  }
  if (p.temperature == 0.0f || p.top_k == 1) {
    out[blockIdx.x] = best.id;
    return;
  }
  // Weights of the candidates, most probable first; 0 past -inf.
  float w[kCudaSampleMaxCandidates];
  const float inv_t = 1.0f / p.temperature;
  double total = 0.0;
  for (int c = 0; c < k; ++c) {
    if (isinf(best.v)) {
      w[c] = cands[c].v == best.v ? 1.0f : 0.0f;
    } else {
      w[c] = cands[c].v == -INFINITY ? 0.0f : expf((cands[c].v - best.v) * inv_t);
    }
    total += w[c];
  }
  // Nucleus: the smallest prefix with mass >= top_p * total.
  int kept = k;
  if (p.top_p < 1.0f) {
    const double target = static_cast<double>(p.top_p) * total;
    double cum = 0.0;
    for (int c = 0; c < k; ++c) {
      cum += w[c];
      if (cum >= target) {
        kept = c + 1;
        break;
      }
    }
  }
  double kept_mass = 0.0;
  for (int c = 0; c < kept; ++c) kept_mass += w[c];
  const uint64_t z = SplitMix64(SplitMix64(p.seed) ^ SplitMix64(~steps[blockIdx.x]));
  const double target = static_cast<double>(z >> 11) * 0x1.0p-53 * kept_mass;
  // Walk the kept candidates in id order.
  double cum = 0.0;
  int last_id = -1, chosen = best.id;
  for (;;) {
    int next = -1;
    for (int c = 0; c < kept; ++c) {
      if (w[c] > 0.0f && cands[c].id > last_id && (next < 0 || cands[c].id < cands[next].id)) {
        next = c;
      }
    }
    if (next < 0) break;
    last_id = cands[next].id;
    chosen = last_id;
    cum += w[next];
    if (cum > target) break;
  }
  out[blockIdx.x] = chosen;
}

}  // namespace

cudaError_t ArgmaxCuda(const float* logits, int n, int vocab, int32_t* out, cudaStream_t stream) {
  if (n <= 0 || vocab <= 0) return cudaSuccess;
  ArgmaxKernel<<<n, kThreads, 0, stream>>>(logits, vocab, out);
  return cudaGetLastError();
}

cudaError_t SampleCuda(const float* logits, int n, int vocab, const CudaSamplingParams& params,
                       const uint64_t* steps, int32_t* out, cudaStream_t stream) {
  if (n <= 0 || vocab <= 0) return cudaSuccess;
  if (!(params.temperature >= 0.0f) || !std::isfinite(params.temperature) || params.top_k < 0 ||
      !(params.top_p > 0.0f && params.top_p <= 1.0f)) {
    return cudaErrorInvalidValue;
  }
  SampleKernel<<<n, kThreads, 0, stream>>>(logits, vocab, params, steps, out);
  return cudaGetLastError();
}

}  // namespace ced::kernels
