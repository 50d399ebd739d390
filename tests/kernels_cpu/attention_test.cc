#include "kernels/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kv_codec.h"

namespace ced::kernels {
namespace {

constexpr int kBlockSize = 16;
constexpr double kTolerance = 1e-4;

// Query heads H, kv heads G, head size D. The default is the shape most
// tests use (group of 4, D = 64).
struct HeadShape {
  int heads = 8;
  int kv_heads = 2;
  int head_dim = 64;
  int kv_dim() const { return kv_heads * head_dim; }
};

// One sequence's segment: query positions [q_begin, q_begin + n), local window
// clipped at lo.
struct SegmentSpec {
  int q_begin = 0;
  int n = 0;
  int lo = 0;
};

// Inputs of one segment, in the kernel's layout plus the decoded f32 values
// the reference reads.
struct SegmentData {
  SegmentSpec spec;
  std::vector<float> q, out;                // [n, H*D]
  std::vector<float> global_k, global_v;    // decoded, [T, G*D]
  std::vector<float> local_k, local_v;      // decoded, [T, G*D] (only window rows used)
  std::vector<const uint8_t*> k_blocks, v_blocks;
  std::vector<uint8_t> k_ring, v_ring;      // W rows in `format`
  std::vector<float> chunk_k, chunk_v;      // [n, G*D], rounded through `format`
};

std::vector<float> RandomRows(size_t count, std::mt19937* rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = normal(*rng);
  return v;
}

// Encodes `row` into `dst` and overwrites `row` with the decoded values.
void EncodeAndRound(KvFormat f, float* row, int kv_dim, uint8_t* dst) {
  EncodeRow(f, row, kv_dim, dst);
  DecodeRow(f, dst, kv_dim, row);
}

// Builds every segment's data; global blocks of all segments share one pool
// and are handed out in a shuffled order.
class Batch {
 public:
  // global false: a window-only layer (no global branch; block tables null).
  Batch(KvFormat format, int window, const std::vector<SegmentSpec>& specs, uint32_t seed,
        bool global = true, HeadShape shape = {})
      : format_(format), window_(window), global_(global), shape_(shape), segs_(specs.size()) {
    std::mt19937 rng(seed);
    const int H = shape.heads, D = shape.head_dim, kv_dim = shape.kv_dim();
    const size_t row_bytes = KvRowBytes(format, kv_dim);
    int total_blocks = 0;
    for (const SegmentSpec& s : specs) {
      total_blocks += (s.q_begin + s.n + kBlockSize - 1) / kBlockSize;
    }
    pool_k_.assign(static_cast<size_t>(total_blocks) * kBlockSize * row_bytes, 0xA5);
    pool_v_.assign(pool_k_.size(), 0x5A);
    std::vector<int> ids(total_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    int next_id = 0;
    for (size_t si = 0; si < specs.size(); ++si) {
      SegmentData& d = segs_[si];
      d.spec = specs[si];
      const int T = d.spec.q_begin + d.spec.n;
      d.q = RandomRows(static_cast<size_t>(d.spec.n) * H * D, &rng);
      d.out.assign(d.q.size(), -1e30f);
      d.global_k = RandomRows(static_cast<size_t>(T) * kv_dim, &rng);
      d.global_v = RandomRows(d.global_k.size(), &rng);
      d.local_k = RandomRows(d.global_k.size(), &rng);
      d.local_v = RandomRows(d.global_k.size(), &rng);
      for (int b = 0; b * kBlockSize < T; ++b) {
        const size_t offset = static_cast<size_t>(ids[next_id++]) * kBlockSize * row_bytes;
        d.k_blocks.push_back(pool_k_.data() + offset);
        d.v_blocks.push_back(pool_v_.data() + offset);
        for (int r = 0; r < kBlockSize && b * kBlockSize + r < T; ++r) {
          const size_t pos = static_cast<size_t>(b) * kBlockSize + r;
          EncodeAndRound(format, &d.global_k[pos * kv_dim], kv_dim, pool_k_.data() + offset + r * row_bytes);
          EncodeAndRound(format, &d.global_v[pos * kv_dim], kv_dim, pool_v_.data() + offset + r * row_bytes);
        }
      }
      std::vector<uint8_t> scratch(row_bytes);
      if (window > 0) {
        d.k_ring.assign(static_cast<size_t>(window) * row_bytes, 0xC3);
        d.v_ring.assign(d.k_ring.size(), 0x3C);
      }
      for (int pos = 0; pos < T; ++pos) {
        float* k = &d.local_k[static_cast<size_t>(pos) * kv_dim];
        float* v = &d.local_v[static_cast<size_t>(pos) * kv_dim];
        if (pos < d.spec.q_begin && window > 0 && pos >= d.spec.q_begin - window) {
          const size_t slot = static_cast<size_t>(pos % window) * row_bytes;
          EncodeAndRound(format, k, kv_dim, d.k_ring.data() + slot);
          EncodeAndRound(format, v, kv_dim, d.v_ring.data() + slot);
        } else {
          EncodeAndRound(format, k, kv_dim, scratch.data());
          EncodeAndRound(format, v, kv_dim, scratch.data());
        }
      }
      d.chunk_k.assign(d.local_k.begin() + static_cast<size_t>(d.spec.q_begin) * kv_dim,
                       d.local_k.end());
      d.chunk_v.assign(d.local_v.begin() + static_cast<size_t>(d.spec.q_begin) * kv_dim,
                       d.local_v.end());
    }
  }

  void Run() {
    AttentionParams p;
    p.format = format_;
    p.num_heads = shape_.heads;
    p.num_kv_heads = shape_.kv_heads;
    p.head_dim = shape_.head_dim;
    p.window = window_;
    p.block_size = kBlockSize;
    p.global = global_;
    std::vector<AttentionSegment> segments;
    for (SegmentData& d : segs_) {
      AttentionSegment s;
      s.q = d.q.data();
      s.out = d.out.data();
      s.n = d.spec.n;
      s.q_begin = d.spec.q_begin;
      if (global_) {
        s.global_k_host = d.k_blocks.data();
        s.global_v_host = d.v_blocks.data();
      }
      if (window_ > 0) {
        s.local_k_ring = d.k_ring.data();
        s.local_v_ring = d.v_ring.data();
        s.chunk_local_k = d.chunk_k.data();
        s.chunk_local_v = d.chunk_v.data();
      }
      s.lo = d.spec.lo;
      segments.push_back(s);
    }
    AttentionCpu(p, segments);
  }

  // Max |kernel - reference| over every segment's output.
  double MaxError() const {
    double worst = 0.0;
    for (const SegmentData& d : segs_) worst = std::max(worst, SegmentError(d));
    return worst;
  }

 private:
  // DESIGN.md §1.3 in double precision: one softmax over global keys [0, t]
  // and local keys [max(lo, t-W+1), t]; query head h reads kv head h/(H/G).
  double SegmentError(const SegmentData& d) const {
    const int H = shape_.heads, D = shape_.head_dim, kv_dim = shape_.kv_dim();
    const int group = H / shape_.kv_heads;
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    double worst = 0.0;
    for (int i = 0; i < d.spec.n; ++i) {
      const int t = d.spec.q_begin + i;
      const int lb = window_ > 0 ? std::max(d.spec.lo, t - window_ + 1) : t + 1;
      for (int h = 0; h < H; ++h) {
        const int g = h / group;
        const float* q = &d.q[(static_cast<size_t>(i) * H + h) * D];
        // Keys: (matrix, position) pairs, global first.
        std::vector<std::pair<const float*, const float*>> kv;
        for (int pos = 0; global_ && pos <= t; ++pos) {
          const size_t off = static_cast<size_t>(pos) * kv_dim + g * D;
          kv.emplace_back(&d.global_k[off], &d.global_v[off]);
        }
        for (int pos = lb; pos <= t; ++pos) {
          const size_t off = static_cast<size_t>(pos) * kv_dim + g * D;
          kv.emplace_back(&d.local_k[off], &d.local_v[off]);
        }
        std::vector<double> s(kv.size());
        double m = -1e300;
        for (size_t j = 0; j < kv.size(); ++j) {
          double dot = 0.0;
          for (int e = 0; e < D; ++e) dot += static_cast<double>(q[e]) * kv[j].first[e];
          s[j] = dot * scale;
          m = std::max(m, s[j]);
        }
        double sum = 0.0;
        for (double& x : s) sum += (x = std::exp(x - m));
        const float* o = &d.out[(static_cast<size_t>(i) * H + h) * D];
        for (int e = 0; e < D; ++e) {
          double ref = 0.0;
          for (size_t j = 0; j < kv.size(); ++j) ref += s[j] * kv[j].second[e];
          worst = std::max(worst, std::abs(ref / sum - o[e]));
        }
      }
    }
    return worst;
  }

  KvFormat format_;
  int window_;
  bool global_;
  HeadShape shape_;
  std::vector<SegmentData> segs_;
  std::vector<uint8_t> pool_k_, pool_v_;
};

class AttentionCpuTest : public ::testing::TestWithParam<std::tuple<KvFormat, int, CpuIsa>> {
 protected:
  void SetUp() override {
    saved_threads_ = omp_get_max_threads();
    omp_set_num_threads(std::get<1>(GetParam()));
    ASSERT_TRUE(SetActiveCpuIsa(std::get<2>(GetParam())));
  }
  void TearDown() override {
    omp_set_num_threads(saved_threads_);
    SetActiveCpuIsa(BestCpuIsa());
  }

  double Check(int window, const std::vector<SegmentSpec>& specs, uint32_t seed,
               bool global = true, HeadShape shape = {}) {
    Batch batch(std::get<0>(GetParam()), window, specs, seed, global, shape);
    batch.Run();
    return batch.MaxError();
  }

 private:
  int saved_threads_ = 1;
};

TEST_P(AttentionCpuTest, PrefillWithRing) {
  EXPECT_LE(Check(/*window=*/32, {{/*q_begin=*/40, /*n=*/80, /*lo=*/0}}, 1), kTolerance);
}

TEST_P(AttentionCpuTest, PrefillClippedWindow) {
  // lo inside the ring and lo inside the chunk.
  EXPECT_LE(Check(32, {{50, 70, 30}}, 2), kTolerance);
  EXPECT_LE(Check(32, {{48, 64, 60}}, 3), kTolerance);
}

TEST_P(AttentionCpuTest, PrefillNoWindow) {
  EXPECT_LE(Check(/*window=*/0, {{33, 96, 0}}, 4), kTolerance);
}

TEST_P(AttentionCpuTest, PrefillFromZero) {
  EXPECT_LE(Check(24, {{0, 70, 0}}, 5), kTolerance);
}

TEST_P(AttentionCpuTest, PrefillAcrossKeyBlocks) {
  // Long segments take the global keys in blocks of 512 with an online
  // softmax: contexts of several blocks, a tile of query rows straddling a
  // block boundary (some rows see none of the last block's keys), lo inside
  // the context, and no window.
  EXPECT_LE(Check(32, {{1100, 130, 0}}, 16), kTolerance);
  EXPECT_LE(Check(32, {{480, 96, 0}}, 17), kTolerance);
  EXPECT_LE(Check(64, {{700, 80, 600}}, 18), kTolerance);
  EXPECT_LE(Check(0, {{1500, 40, 0}}, 19), kTolerance);
  EXPECT_LE(Check(600, {{900, 70, 0}}, 20, /*global=*/false), kTolerance);
  // Head sizes that are not a whole number of panels, across blocks too.
  for (const HeadShape& shape : {HeadShape{4, 2, 40}, HeadShape{6, 1, 96}}) {
    SCOPED_TRACE(testing::Message() << "H=" << shape.heads << " D=" << shape.head_dim);
    EXPECT_LE(Check(32, {{600, 70, 0}}, 21, /*global=*/true, shape), kTolerance);
  }
}

TEST_P(AttentionCpuTest, DecodeSequencesOfDifferentLengths) {
  // Lengths 1 (first token), inside one block, block boundaries, several blocks.
  std::vector<SegmentSpec> specs = {{0, 1, 0},  {7, 1, 0},  {15, 1, 0}, {16, 1, 0},
                                    {47, 1, 5}, {100, 1, 90}, {200, 1, 0}};
  EXPECT_LE(Check(32, specs, 6), kTolerance);
}

TEST_P(AttentionCpuTest, DecodeNoWindow) {
  EXPECT_LE(Check(0, {{3, 1, 0}, {64, 1, 0}, {130, 1, 0}}, 7), kTolerance);
}

TEST_P(AttentionCpuTest, DecodeAloneSplitsItsKeys) {
  // One decode row and more threads than rows: its keys are split into parts
  // (cut inside blocks and inside the ring) whose softmax states are merged.
  EXPECT_LE(Check(32, {{600, 1, 0}}, 10), kTolerance);
  EXPECT_LE(Check(0, {{300, 1, 0}}, 11), kTolerance);
  EXPECT_LE(Check(200, {{1000, 1, 700}}, 12), kTolerance);
  EXPECT_LE(Check(200, {{333, 1, 0}}, 13, /*global=*/false), kTolerance);
}

TEST_P(AttentionCpuTest, MixedPrefillShortAndDecode) {
  // A long segment, a short multi-row segment (below the BLAS path) and decodes.
  std::vector<SegmentSpec> specs = {{20, 72, 10}, {35, 7, 0}, {90, 1, 40}, {9, 1, 0}};
  EXPECT_LE(Check(16, specs, 8), kTolerance);
}

TEST_P(AttentionCpuTest, WindowOnlyLayer) {
  // No global branch: the softmax runs over the local keys alone, for decodes
  // (ring wrapping, window clipped at lo), a short and a long segment.
  std::vector<SegmentSpec> specs = {{0, 1, 0}, {50, 1, 0}, {77, 1, 70}, {35, 7, 0}, {20, 72, 10}};
  EXPECT_LE(Check(16, specs, 9, /*global=*/false), kTolerance);
}

TEST_P(AttentionCpuTest, OtherHeadShapes) {
  // The decode kernel takes a kv head's query heads two at a time (an odd
  // group ends on one head) and unrolls D = 32, 64 and 128 (32: below one
  // value chunk on AVX-512); the prefill path packs panels of D. Groups of 3
  // and 1, D = 128, and sizes that are not a whole number of vectors (40) or
  // of value chunks (96), each through decodes, a short segment and a long one.
  const std::vector<SegmentSpec> specs = {{0, 1, 0}, {47, 1, 5}, {130, 1, 0}, {35, 7, 0},
                                          {20, 72, 10}};
  for (const HeadShape& shape : {HeadShape{6, 2, 64}, HeadShape{4, 4, 128}, HeadShape{4, 2, 40},
                                 HeadShape{6, 1, 96}, HeadShape{2, 1, 16},
                                 HeadShape{4, 2, 32}, HeadShape{3, 1, 32}}) {
    SCOPED_TRACE(testing::Message() << "H=" << shape.heads << " G=" << shape.kv_heads
                                    << " D=" << shape.head_dim);
    EXPECT_LE(Check(32, specs, 14, /*global=*/true, shape), kTolerance);
    EXPECT_LE(Check(32, {{600, 1, 0}}, 15, /*global=*/true, shape), kTolerance);
  }
}

std::string ParamName(const ::testing::TestParamInfo<std::tuple<KvFormat, int, CpuIsa>>& info) {
  return std::string(KvFormatName(std::get<0>(info.param))) + "_threads" +
         std::to_string(std::get<1>(info.param)) + "_" +
         std::string(CpuIsaName(std::get<2>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(FormatsAndThreads, AttentionCpuTest,
                         ::testing::Combine(::testing::Values(KvFormat::kF32, KvFormat::kBF16,
                                                              KvFormat::kFP8E4M3,
                                                              KvFormat::kFP4E2M1),
                                            ::testing::Values(1, 2),
                                            ::testing::ValuesIn(SupportedCpuIsas())),
                         ParamName);

}  // namespace
}  // namespace ced::kernels
