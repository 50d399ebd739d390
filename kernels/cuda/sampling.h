// Token sampling on the GPU, one block per row of logits [n, vocab] (device).
//
// The engine samples on the host today (engine/sampling); these are the GPU
// entry points for when logits stay on the device. The random draw is the
// host sampler's: uniform = SplitMix64(SplitMix64(seed) ^ SplitMix64(~step))
// as a 53-bit fraction, with step = steps[row].
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ced::kernels {

// out[i] = argmax of row i, ties to the lowest id, NaN never chosen (0 when
// every logit is NaN or -inf).
cudaError_t ArgmaxCuda(const float* logits, int n, int vocab, int32_t* out, cudaStream_t stream);

// Candidates are the `min(top_k, kCudaSampleMaxCandidates)` most probable ids
// (top_k = 0 means the cap), ties to lower ids; of those, the smallest most-
// probable prefix with mass >= top_p; one uniform draw over the kept mass in
// id order picks the token. temperature 0 or top_k 1 is the argmax.
inline constexpr int kCudaSampleMaxCandidates = 256;
struct CudaSamplingParams {
  float temperature = 0.0f;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
};
// steps: device array of n generation-step indices; out: device [n].
cudaError_t SampleCuda(const float* logits, int n, int vocab, const CudaSamplingParams& params,
                       const uint64_t* steps, int32_t* out, cudaStream_t stream);

}  // namespace ced::kernels
