// CUDA attention (two K/V sources, one softmax) against AttentionCpu on the
// same cache bytes: prefill chunks, batched decode, GQA, every cache format.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/kv_codec.h"
#include "kernels/cuda/attention.h"
#include "tests/cuda/cuda_test_util.h"

namespace ced::testing {
namespace {

using kernels::AttentionParams;
using kernels::AttentionSegment;
using kernels::AttentionSegmentCuda;
using kernels::KvFormat;

struct SegSpec {
  int q_begin, n, lo;
};

struct Case {
  KvFormat format;
  int H, G, D, W, bs;
  std::vector<SegSpec> segs;
};

// Host mirror of one segment's data; the device copy has the same byte layout.
struct SegData {
  std::vector<float> q, k_chunk, v_chunk;
  std::vector<uint8_t> blocks_k, blocks_v;  // nblocks * bs rows, blocks stored in reverse order
  std::vector<uint8_t> ring_k, ring_v;      // W rows
  int nblocks = 0;
};

void RunCase(const Case& c) {
  const int kv_dim = c.G * c.D, qd = c.H * c.D;
  const size_t rb = kernels::KvRowBytes(c.format, kv_dim);
  AttentionParams p;
  p.format = c.format;
  p.num_heads = c.H;
  p.num_kv_heads = c.G;
  p.head_dim = c.D;
  p.window = c.W;
  p.block_size = c.bs;

  std::vector<SegData> data(c.segs.size());
  uint32_t seed = 100;
  auto encode_rows = [&](int rows, std::vector<uint8_t>* out) {
    const auto src = RandomFloats(static_cast<size_t>(rows) * kv_dim, seed++);
    out->assign(rows * rb, 0);
    for (int r = 0; r < rows; ++r) {
      kernels::EncodeRow(c.format, &src[r * kv_dim], kv_dim, out->data() + r * rb);
    }
  };
  for (size_t si = 0; si < c.segs.size(); ++si) {
    const SegSpec& s = c.segs[si];
    SegData& d = data[si];
    d.nblocks = (s.q_begin + s.n + c.bs - 1) / c.bs;
    d.q = RandomFloats(static_cast<size_t>(s.n) * qd, seed++);
    encode_rows(d.nblocks * c.bs, &d.blocks_k);
    encode_rows(d.nblocks * c.bs, &d.blocks_v);
    encode_rows(std::max(c.W, 1), &d.ring_k);
    encode_rows(std::max(c.W, 1), &d.ring_v);
    // Chunk-local rows are f32 already rounded through the format.
    for (auto* chunk : {&d.k_chunk, &d.v_chunk}) {
      std::vector<uint8_t> enc;
      encode_rows(s.n, &enc);
      chunk->resize(static_cast<size_t>(s.n) * kv_dim);
      for (int r = 0; r < s.n; ++r) {
        kernels::DecodeRow(c.format, &enc[r * rb], kv_dim, chunk->data() + r * kv_dim);
      }
    }
  }

  // CPU reference: block b lives at rows of block (nblocks-1-b).
  std::vector<std::vector<const uint8_t*>> ktab(data.size()), vtab(data.size());
  std::vector<std::vector<float>> want(data.size());
  std::vector<AttentionSegment> cpu(data.size());
  for (size_t si = 0; si < data.size(); ++si) {
    SegData& d = data[si];
    for (int b = 0; b < d.nblocks; ++b) {
      ktab[si].push_back(d.blocks_k.data() + (d.nblocks - 1 - b) * c.bs * rb);
      vtab[si].push_back(d.blocks_v.data() + (d.nblocks - 1 - b) * c.bs * rb);
    }
    want[si].assign(static_cast<size_t>(c.segs[si].n) * qd, 0.0f);
    AttentionSegment& s = cpu[si];
    s.q = d.q.data();
    s.out = want[si].data();
    s.n = c.segs[si].n;
    s.q_begin = c.segs[si].q_begin;
    s.global_k_host = ktab[si].data();
    s.global_v_host = vtab[si].data();
    s.local_k_ring = d.ring_k.data();
    s.local_v_ring = d.ring_v.data();
    s.chunk_local_k = d.k_chunk.data();
    s.chunk_local_v = d.v_chunk.data();
    s.lo = c.segs[si].lo;
  }
  kernels::AttentionCpu(p, cpu);

  // Device copies with device block tables.
  std::vector<std::unique_ptr<DeviceArray<float>>> floats;
  std::vector<std::unique_ptr<DeviceArray<uint8_t>>> bytes;
  std::vector<std::unique_ptr<DeviceArray<const uint8_t*>>> tables;
  std::vector<AttentionSegmentCuda> gpu(data.size());
  std::vector<DeviceArray<float>*> outs;
  int max_rows = 0;
  for (size_t si = 0; si < data.size(); ++si) {
    SegData& d = data[si];
    auto put_f = [&](const std::vector<float>& v) {
      floats.push_back(std::make_unique<DeviceArray<float>>(v));
      return floats.back()->get();
    };
    auto put_b = [&](const std::vector<uint8_t>& v) {
      bytes.push_back(std::make_unique<DeviceArray<uint8_t>>(v));
      return bytes.back()->get();
    };
    AttentionSegmentCuda& s = gpu[si];
    s.q = put_f(d.q);
    s.out = put_f(std::vector<float>(want[si].size(), -1.0f));
    outs.push_back(floats.back().get());
    s.n = c.segs[si].n;
    s.q_begin = c.segs[si].q_begin;
    s.lo = c.segs[si].lo;
    for (int kv = 0; kv < 2; ++kv) {
      uint8_t* blocks = put_b(kv == 0 ? d.blocks_k : d.blocks_v);
      std::vector<const uint8_t*> tab;
      for (int b = 0; b < d.nblocks; ++b) tab.push_back(blocks + (d.nblocks - 1 - b) * c.bs * rb);
      tables.push_back(std::make_unique<DeviceArray<const uint8_t*>>(tab));
      (kv == 0 ? s.global_k : s.global_v) = tables.back()->get();
    }
    s.local_k_ring = put_b(d.ring_k);
    s.local_v_ring = put_b(d.ring_v);
    s.chunk_local_k = put_f(d.k_chunk);
    s.chunk_local_v = put_f(d.v_chunk);
    max_rows = std::max(max_rows, s.n);
  }
  DeviceArray<AttentionSegmentCuda> dsegs(gpu);
  ASSERT_EQ(kernels::AttentionCuda(p, dsegs.get(), static_cast<int>(gpu.size()), max_rows, nullptr),
            cudaSuccess);
  for (size_t si = 0; si < data.size(); ++si) {
    const auto got = outs[si]->ToHost();
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[si][i], 2e-5f * (1.0f + std::fabs(want[si][i])))
          << kernels::KvFormatName(c.format) << " segment " << si << " value " << i;
    }
  }
}

class CudaAttentionTest : public ::testing::TestWithParam<KvFormat> {};

TEST_P(CudaAttentionTest, PrefillChunkWithWindowAndGqa) {
  CED_SKIP_WITHOUT_CUDA();
  RunCase({GetParam(), 8, 2, 64, 16, 16, {{40, 24, 0}}});
}

TEST_P(CudaAttentionTest, LongPrefillChunkHeadDim128) {
  CED_SKIP_WITHOUT_CUDA();
  RunCase({GetParam(), 4, 4, 128, 0, 32, {{96, 70, 0}}});
}

TEST_P(CudaAttentionTest, BatchedDecodeWithClippedWindow) {
  CED_SKIP_WITHOUT_CUDA();
  RunCase({GetParam(), 8, 2, 64, 16, 16, {{100, 1, 90}, {5, 1, 0}, {300, 1, 0}, {47, 1, 47}}});
}

TEST_P(CudaAttentionTest, ReplaySegmentsOfDifferentLengths) {
  CED_SKIP_WITHOUT_CUDA();
  RunCase({GetParam(), 4, 2, 32, 8, 16, {{30, 16, 30}, {0, 9, 0}, {64, 3, 60}}});
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaAttentionTest,
                         ::testing::Values(KvFormat::kF32, KvFormat::kBF16, KvFormat::kFP8E4M3,
                                           KvFormat::kFP4E2M1),
                         [](const auto& info) {
                           return std::string(kernels::KvFormatName(info.param));
                         });

TEST(CudaAttentionShapeTest, RejectsUnsupportedShapes) {
  CED_SKIP_WITHOUT_CUDA();
  AttentionParams p;
  p.num_heads = 4;
  p.num_kv_heads = 4;
  p.head_dim = 512;
  p.block_size = 16;
  DeviceArray<AttentionSegmentCuda> segs(1);
  EXPECT_EQ(kernels::AttentionCuda(p, segs.get(), 1, 1, nullptr), cudaErrorInvalidValue);
  p.head_dim = 64;
  p.num_kv_heads = 3;
  EXPECT_EQ(kernels::AttentionCuda(p, segs.get(), 1, 1, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace ced::testing
