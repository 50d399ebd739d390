// GPU benchmarks of the CUDA kernels (figures for bench/results/gpu.md):
//  1. prefill of a 2k-token prompt on a 1B-class shape: MFU against dense
//     bf16 peak, GEMMs alone and with attention and the row kernels;
//  2. CED prefill (encoder + decoder K/V projections + replay) against the
//     decoder-only prefill on the same shape;
//  3. decode attention at long context per KV format: bytes read per second;
//  4. the KV transfer paths' local costs: pinned host <-> device copies (the
//     staging bound of a GPU transfer over a host-memory fabric), device to
//     device copies, and the GPU payload CRC32C of the "nccl" KV transport.
// Prints markdown to stdout. Flags: --peak_tflops=989 --hbm_gbs=4800.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/kv_codec.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/crc32c.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/kv_codec.h"
#include "kernels/cuda/kv_codec_device.cuh"

namespace {

using ced::kernels::AttentionParams;
using ced::kernels::AttentionSegmentCuda;
using ced::kernels::KvFormat;

#define CK(x)                                                                  \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,           \
                   cudaGetErrorString(e_));                                    \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)
#define CB(x)                                                                  \
  do {                                                                         \
    cublasStatus_t s_ = (x);                                                   \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                         \
      std::fprintf(stderr, "%s:%d %s: cublas %d\n", __FILE__, __LINE__, #x,    \
                   static_cast<int>(s_));                                      \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

__global__ void FillKernel(float* x, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = scale * (static_cast<float>(h & 0xffff) / 32768.0f - 1.0f);
  }
}

// The CPU codec library is not linked in the standalone build.
const char* FormatName(KvFormat f) {
  switch (f) {
    case KvFormat::kF32: return "f32";
    case KvFormat::kBF16: return "bf16";
    case KvFormat::kFP8E4M3: return "fp8_e4m3";
    case KvFormat::kFP4E2M1: return "fp4_e2m1";
  }
  return "?";
}

template <typename T>
T* DevAlloc(size_t count) {
  void* p = nullptr;
  CK(cudaMalloc(&p, count * sizeof(T) + 16));
  return static_cast<T*>(p);
}

float* RandomF32(size_t n, uint32_t seed, float scale) {
  float* p = DevAlloc<float>(n);
  FillKernel<<<1024, 256>>>(p, n, seed, scale);
  CK(cudaGetLastError());
  return p;
}

uint16_t* RandomBf16(size_t n, uint32_t seed, float scale) {
  float* f = RandomF32(n, seed, scale);
  uint16_t* h = DevAlloc<uint16_t>(n);
  CK(ced::kernels::F32ToBf16Cuda(f, h, n, nullptr));
  CK(cudaDeviceSynchronize());
  CK(cudaFree(f));
  return h;
}

struct Shape {  // Llama-3.2-1B-like
  int d = 2048, L = 16, H = 32, G = 8, D = 64, F = 8192;
  int QDim() const { return H * D; }
  int KvDim() const { return G * D; }
};

struct LayerWeights {
  uint16_t *wqkv, *wo, *wgu, *wdown;  // bf16 [out, in]
  float *norm1, *norm2;
};

class Prefill {
 public:
  Prefill(const Shape& s, int n, cublasHandle_t blas) : s_(s), n_(n), blas_(blas) {
    for (int l = 0; l < s.L; ++l) {
      LayerWeights w;
      w.wqkv = RandomBf16(static_cast<size_t>(s.QDim() + 2 * s.KvDim()) * s.d, 10 + l, 0.02f);
      w.wo = RandomBf16(static_cast<size_t>(s.d) * s.QDim(), 100 + l, 0.02f);
      w.wgu = RandomBf16(static_cast<size_t>(2 * s.F) * s.d, 200 + l, 0.02f);
      w.wdown = RandomBf16(static_cast<size_t>(s.d) * s.F, 300 + l, 0.02f);
      w.norm1 = RandomF32(s.d, 400 + l, 1.0f);
      w.norm2 = RandomF32(s.d, 500 + l, 1.0f);
      layers_.push_back(w);
    }
    const size_t N = n;
    x_ = RandomF32(N * s.d, 1, 1.0f);
    a_ = DevAlloc<float>(N * s.d);
    a16_ = DevAlloc<uint16_t>(N * std::max(s.F, s.d));
    qkv_ = DevAlloc<float>(N * (s.QDim() + 2 * s.KvDim()));
    attn_ = DevAlloc<float>(N * s.QDim());
    gu_ = DevAlloc<float>(N * 2 * s.F);
    tmp_ = DevAlloc<float>(N * s.d);
    // Global K/V cache in bf16, contiguous blocks of 16 positions.
    bs_ = 16;
    row_bytes_ = ced::kernels::cuda_codec::RowBytes(KvFormat::kBF16, s.KvDim());
    kcache_ = DevAlloc<uint8_t>(N * row_bytes_);
    vcache_ = DevAlloc<uint8_t>(N * row_bytes_);
    const int nb = (n + bs_ - 1) / bs_;
    std::vector<const uint8_t*> kt(nb), vt(nb);
    std::vector<uint8_t*> krows(n), vrows(n);
    for (int b = 0; b < nb; ++b) {
      kt[b] = kcache_ + static_cast<size_t>(b) * bs_ * row_bytes_;
      vt[b] = vcache_ + static_cast<size_t>(b) * bs_ * row_bytes_;
    }
    for (int i = 0; i < n; ++i) {
      krows[i] = kcache_ + i * row_bytes_;
      vrows[i] = vcache_ + i * row_bytes_;
    }
    ktab_ = Upload(kt);
    vtab_ = Upload(vt);
    krows_ = Upload(krows);
    vrows_ = Upload(vrows);
    std::vector<int32_t> pos(n);
    for (int i = 0; i < n; ++i) pos[i] = i;
    pos_ = Upload(pos);
  }

  // y[rows, out] = x16[rows, in] * w[out, in]^T.
  void Gemm(const uint16_t* x16, int rows, int in, const uint16_t* w, int out, float* y) {
    const float one = 1.0f, zero = 0.0f;
    CB(cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &one, w, CUDA_R_16BF, in, x16,
                    CUDA_R_16BF, in, &zero, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F,
                    CUBLAS_GEMM_DEFAULT));
    gemm_flops_ += 2.0 * rows * in * out;
  }

  // One full layer over `rows` positions starting at q_begin (rows <= n).
  void Layer(int l, int rows, int q_begin, bool with_attention) {
    const LayerWeights& w = layers_[l];
    const int qkv = s_.QDim() + 2 * s_.KvDim();
    CK(ced::kernels::RmsNormCuda(x_, rows, s_.d, w.norm1, 1e-5f, a_, nullptr));
    CK(ced::kernels::F32ToBf16Cuda(a_, a16_, static_cast<size_t>(rows) * s_.d, nullptr));
    Gemm(a16_, rows, s_.d, w.wqkv, qkv, qkv_);
    if (with_attention) Attention(rows, q_begin);
    CK(ced::kernels::F32ToBf16Cuda(attn_, a16_, static_cast<size_t>(rows) * s_.QDim(), nullptr));
    Gemm(a16_, rows, s_.QDim(), w.wo, s_.d, tmp_);
    CK(ced::kernels::AddRmsNormCuda(x_, tmp_, rows, s_.d, w.norm2, 1e-5f, a_, nullptr));
    CK(ced::kernels::F32ToBf16Cuda(a_, a16_, static_cast<size_t>(rows) * s_.d, nullptr));
    Gemm(a16_, rows, s_.d, w.wgu, 2 * s_.F, gu_);
    CK(ced::kernels::SiluMulCuda(gu_, gu_ + static_cast<size_t>(rows) * s_.F,
                                 static_cast<size_t>(rows) * s_.F, nullptr));
    CK(ced::kernels::F32ToBf16Cuda(gu_, a16_, static_cast<size_t>(rows) * s_.F, nullptr));
    Gemm(a16_, rows, s_.F, w.wdown, s_.d, tmp_);
    CK(ced::kernels::AddCuda(x_, tmp_, static_cast<size_t>(rows) * s_.d, nullptr));
  }

  // Decoder global K/V projection of `rows` positions (CED prefill step 2).
  void KvProjection(int l, int rows) {
    Gemm(a16_, rows, s_.d, layers_[l].wqkv + static_cast<size_t>(s_.QDim()) * s_.d,
         2 * s_.KvDim(), qkv_);
  }

  void Attention(int rows, int q_begin) {
    // Packed q|k|v rows: store K and V of the chunk, then attend (W = 0).
    const int qkv = s_.QDim() + 2 * s_.KvDim();
    // Rows of qkv_ are H + 2G heads wide: rotating V too costs little here.
    CK(ced::kernels::RopeCuda(qkv_, rows, s_.H + 2 * s_.G, s_.D, pos_ + q_begin, 500000.0, nullptr));
    CK(ced::kernels::EncodeRowsCuda(KvFormat::kBF16, qkv_ + s_.QDim(), rows, s_.KvDim(), qkv,
                                    krows_ + q_begin, nullptr));
    CK(ced::kernels::EncodeRowsCuda(KvFormat::kBF16, qkv_ + s_.QDim() + s_.KvDim(), rows,
                                    s_.KvDim(), qkv, vrows_ + q_begin, nullptr));
    // The kernel reads q rows of H*D: gather them contiguous.
    CK(cudaMemcpy2DAsync(attn_, s_.QDim() * sizeof(float), qkv_, qkv * sizeof(float),
                         s_.QDim() * sizeof(float), rows, cudaMemcpyDeviceToDevice, nullptr));
    AttentionSegmentCuda seg;
    seg.q = attn_;
    seg.out = tmp_;  // overwritten below by the o-projection input copy
    seg.n = rows;
    seg.q_begin = q_begin;
    seg.global_k = ktab_;
    seg.global_v = vtab_;
    if (seg_dev_ == nullptr) seg_dev_ = DevAlloc<AttentionSegmentCuda>(1);
    CK(cudaMemcpyAsync(seg_dev_, &seg, sizeof(seg), cudaMemcpyHostToDevice, nullptr));
    AttentionParams p;
    p.format = KvFormat::kBF16;
    p.num_heads = s_.H;
    p.num_kv_heads = s_.G;
    p.head_dim = s_.D;
    p.window = 0;
    p.block_size = bs_;
    CK(ced::kernels::AttentionCuda(p, seg_dev_, 1, rows, nullptr));
    CK(cudaMemcpyAsync(attn_, tmp_, static_cast<size_t>(rows) * s_.QDim() * sizeof(float),
                       cudaMemcpyDeviceToDevice, nullptr));
    CK(cudaStreamSynchronize(nullptr));  // seg is a stack variable
    const double keys = static_cast<double>(rows) * q_begin + 0.5 * rows * (rows + 1.0);
    attn_flops_ += 4.0 * keys * s_.H * s_.D;
  }

  double gemm_flops() const { return gemm_flops_; }
  double attn_flops() const { return attn_flops_; }
  void ResetFlops() { gemm_flops_ = attn_flops_ = 0; }

 private:
  template <typename T>
  T* Upload(const std::vector<T>& v) {
    T* d = DevAlloc<T>(v.size());
    CK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
  }
  Shape s_;
  int n_;
  cublasHandle_t blas_;
  std::vector<LayerWeights> layers_;
  float *x_, *a_, *qkv_, *attn_, *gu_, *tmp_;
  uint16_t* a16_;
  int bs_;
  size_t row_bytes_;
  uint8_t *kcache_, *vcache_;
  const uint8_t **ktab_, **vtab_;
  uint8_t **krows_, **vrows_;
  int32_t* pos_;
  AttentionSegmentCuda* seg_dev_ = nullptr;
  double gemm_flops_ = 0, attn_flops_ = 0;
};

template <typename F>
double TimeMs(F&& f, int reps) {
  f();  // warm-up
  CK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) f();
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  return ms / reps;
}

double Flag(int argc, char** argv, const char* name, double def) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return std::atof(argv[i] + prefix.size());
  }
  return def;
}

void PrefillBench(double peak_tflops) {
  cublasHandle_t blas;
  CB(cublasCreate(&blas));
  const Shape s;
  const int N = 2048, chunk = 512;
  Prefill pf(s, N, blas);
  // Decoder-only: every layer over the prompt, chunked.
  auto dec_only = [&](bool attn) {
    for (int c = 0; c < N; c += chunk) {
      for (int l = 0; l < s.L; ++l) pf.Layer(l, chunk, c, attn);
    }
  };
  // CED (E = L/2, W = 0, R = 1): encoder over the prompt, decoder K/V
  // projections over the prompt, replay of the last position.
  auto ced = [&]() {
    for (int c = 0; c < N; c += chunk) {
      for (int l = 0; l < s.L / 2; ++l) pf.Layer(l, chunk, c, true);
      for (int l = s.L / 2; l < s.L; ++l) pf.KvProjection(l, chunk);
    }
    for (int l = s.L / 2; l < s.L; ++l) pf.Layer(l, 1, N - 1, true);
  };
  std::printf("## Prefill, 2048-token prompt, 1B-class shape (d 2048, 16 layers, 32/8 heads x 64, FFN 8192), bf16 GEMMs\n\n");
  std::printf("| path | ms | matmul TFLOP/s | MFU (matmul) | MFU (matmul + attention) |\n|---|---|---|---|---|\n");
  for (int attn = 0; attn < 2; ++attn) {
    pf.ResetFlops();
    const int reps = 3;
    const double ms = TimeMs([&] { dec_only(attn == 1); }, reps);
    const double gf = pf.gemm_flops() / (reps + 1), af = pf.attn_flops() / (reps + 1);
    const double tf = gf / ms / 1e9;
    std::printf("| decoder-only, %s | %.2f | %.1f | %.1f%% | %.1f%% |\n",
                attn ? "full layer" : "GEMMs + row kernels only", ms, tf, 100 * tf / peak_tflops,
                100 * (gf + af) / ms / 1e9 / peak_tflops);
  }
  pf.ResetFlops();
  const double t_dec = TimeMs([&] { dec_only(true); }, 3);
  const double t_ced = TimeMs(ced, 3);
  std::printf("\n## CED vs decoder-only prefill (same weights, E = L/2, W = 0, R = 1)\n\n");
  std::printf("| decoder-only ms | CED ms | speedup |\n|---|---|---|\n| %.2f | %.2f | %.2fx |\n\n",
              t_dec, t_ced, t_dec / t_ced);
  CB(cublasDestroy(blas));
}

void DecodeBench(double hbm_gbs) {
  const int B = 16, ctx = 32768, H = 32, G = 8, D = 128, bs = 16;
  std::printf("## Decode attention, batch %d x context %d (32/8 heads x 128), one query per sequence\n\n", B, ctx);
  std::printf("| KV format | ms / step | K/V GB read | GB/s | %% of HBM | tokens/s (attention only) |\n|---|---|---|---|---|---|\n");
  const int kv_dim = G * D;
  float* src = RandomF32(static_cast<size_t>(bs) * kv_dim, 7, 1.0f);
  float* q = RandomF32(static_cast<size_t>(B) * H * D, 8, 1.0f);
  float* out = DevAlloc<float>(static_cast<size_t>(B) * H * D);
  for (KvFormat f : {KvFormat::kBF16, KvFormat::kFP8E4M3, KvFormat::kFP4E2M1, KvFormat::kF32}) {
    const size_t rb = ced::kernels::cuda_codec::RowBytes(f, kv_dim);
    const size_t per_seq = static_cast<size_t>(ctx) * rb;
    uint8_t* k = DevAlloc<uint8_t>(per_seq * B);
    uint8_t* v = DevAlloc<uint8_t>(per_seq * B);
    // Fill every row with encoded values (one block's worth, repeated).
    std::vector<uint8_t*> rows(bs);
    uint8_t** drows = DevAlloc<uint8_t*>(bs);
    for (size_t base = 0; base < per_seq * B; base += bs * rb) {
      for (int r = 0; r < bs; ++r) rows[r] = k + base + r * rb;
      CK(cudaMemcpy(drows, rows.data(), bs * sizeof(uint8_t*), cudaMemcpyHostToDevice));
      CK(ced::kernels::EncodeRowsCuda(f, src, bs, kv_dim, kv_dim, drows, nullptr));
      if (base == 0) CK(cudaDeviceSynchronize());
    }
    CK(cudaMemcpy(v, k, per_seq * B, cudaMemcpyDeviceToDevice));
    const int nb = ctx / bs;
    std::vector<const uint8_t*> tab(static_cast<size_t>(2) * nb * B);
    std::vector<AttentionSegmentCuda> segs(B);
    const uint8_t** dtab = DevAlloc<const uint8_t*>(tab.size());
    for (int b = 0; b < B; ++b) {
      for (int j = 0; j < nb; ++j) {
        tab[(2 * b) * nb + j] = k + b * per_seq + static_cast<size_t>(j) * bs * rb;
        tab[(2 * b + 1) * nb + j] = v + b * per_seq + static_cast<size_t>(j) * bs * rb;
      }
      segs[b].q = q + static_cast<size_t>(b) * H * D;
      segs[b].out = out + static_cast<size_t>(b) * H * D;
      segs[b].n = 1;
      segs[b].q_begin = ctx - 1;
      segs[b].global_k = dtab + (2 * b) * nb;
      segs[b].global_v = dtab + (2 * b + 1) * nb;
    }
    CK(cudaMemcpy(dtab, tab.data(), tab.size() * sizeof(tab[0]), cudaMemcpyHostToDevice));
    AttentionSegmentCuda* dsegs = DevAlloc<AttentionSegmentCuda>(B);
    CK(cudaMemcpy(dsegs, segs.data(), B * sizeof(segs[0]), cudaMemcpyHostToDevice));
    AttentionParams p;
    p.format = f;
    p.num_heads = H;
    p.num_kv_heads = G;
    p.head_dim = D;
    p.block_size = bs;
    const double ms = TimeMs([&] { CK(ced::kernels::AttentionCuda(p, dsegs, B, 1, nullptr)); }, 5);
    const double gb = 2.0 * per_seq * B / 1e9;
    std::printf("| %s | %.3f | %.3f | %.0f | %.1f%% | %.0f |\n",
                FormatName(f), ms, gb, gb / ms * 1e3,
                100 * gb / ms * 1e3 / hbm_gbs, B / ms * 1e3);
    CK(cudaFree(k));
    CK(cudaFree(v));
    CK(cudaFree(drows));
    CK(cudaFree(dtab));
    CK(cudaFree(dsegs));
  }
  std::printf("\n");
}

void TransferBench() {
  std::printf("\n## KV transfer paths (local costs)\n\n");
  std::printf("| bytes | H2D pinned GB/s | D2H pinned GB/s | D2D GB/s | CRC32C on GPU GB/s |\n|---|---|---|---|---|\n");
  const size_t max_bytes = size_t{256} << 20;
  uint8_t* dev = DevAlloc<uint8_t>(max_bytes);
  uint8_t* dev2 = DevAlloc<uint8_t>(max_bytes);
  uint32_t* crcs = DevAlloc<uint32_t>(max_bytes / 65536 + 1);
  uint8_t* host = nullptr;
  CK(cudaMallocHost(&host, max_bytes));
  std::memset(host, 0x5A, max_bytes);
  for (size_t bytes : {size_t{256} << 10, size_t{4} << 20, size_t{64} << 20, max_bytes}) {
    const int reps = bytes >= (size_t{64} << 20) ? 5 : 50;
    const double h2d = TimeMs([&] { CK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice)); }, reps);
    const double d2h = TimeMs([&] { CK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost)); }, reps);
    const double d2d = TimeMs([&] { CK(cudaMemcpyAsync(dev2, dev, bytes, cudaMemcpyDeviceToDevice)); }, reps);
    const double crc = TimeMs([&] { CK(ced::kernels::Crc32cChunksCuda(dev, bytes, 65536, crcs, nullptr)); }, reps);
    auto gbs = [&](double ms) { return bytes / (ms * 1e6); };
    std::printf("| %zu KiB | %.1f | %.1f | %.0f | %.0f |\n", bytes >> 10, gbs(h2d), gbs(d2h),
                2 * gbs(d2d), gbs(crc));
  }
  std::printf("\nD2D counts bytes read + written. The \"nccl\" transport checks every payload with the CRC32C kernel on both sides.\n");
  CK(cudaFreeHost(host));
  CK(cudaFree(dev));
  CK(cudaFree(dev2));
  CK(cudaFree(crcs));
}

}  // namespace

int main(int argc, char** argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "ced_gpu_bench: no CUDA device\n");
    return 2;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const double peak = Flag(argc, argv, "peak_tflops", 989.0);
  const double hbm = Flag(argc, argv, "hbm_gbs", 4800.0);
  std::printf("Device: %s, %d SMs, %.0f GiB. Peak used: %.0f TFLOP/s dense bf16, %.0f GB/s HBM.\n\n",
              prop.name, prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0, peak, hbm);
  PrefillBench(peak);
  DecodeBench(hbm);
  TransferBench();
  return 0;
}
