// Element-wise kernels and K/V codecs on the GPU against the CPU kernels:
// bit-exact for gathers and codecs, tight tolerances for float math.
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/kv_codec.h"
#include "kernels/cpu/math.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/kv_codec.h"
#include "tests/cuda/cuda_test_util.h"

namespace ced::testing {
namespace {

using kernels::KvFormat;

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, float rel,
                const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rel * (1.0f + std::fabs(want[i]))) << what << " at " << i;
  }
}

TEST(CudaKernelsTest, EmbedGathersRows) {
  CED_SKIP_WITHOUT_CUDA();
  const int vocab = 50, d = 300, n = 7;
  const auto table = RandomFloats(static_cast<size_t>(vocab) * d, 1);
  const std::vector<int32_t> tokens = {3, 0, 49, 3, 17, 8, 1};
  DeviceArray<float> dt(table), out(static_cast<size_t>(n) * d);
  DeviceArray<int32_t> dtok(tokens);
  ASSERT_EQ(kernels::EmbedCuda(dtok.get(), n, dt.get(), d, out.get(), nullptr), cudaSuccess);
  const auto got = out.ToHost();
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(0, std::memcmp(&got[i * d], &table[tokens[i] * d], d * sizeof(float))) << i;
  }
}

TEST(CudaKernelsTest, RmsNormAndFusedAddMatchCpu) {
  CED_SKIP_WITHOUT_CUDA();
  const int n = 5, d = 1000;
  const auto x = RandomFloats(n * d, 2, 3.0f), y = RandomFloats(n * d, 3), w = RandomFloats(d, 4);
  std::vector<float> want(n * d);
  kernels::RmsNormCpu(x.data(), n, d, w.data(), 1e-5f, want.data());
  DeviceArray<float> dx(x), dy(y), dw(w), out(n * d);
  ASSERT_EQ(kernels::RmsNormCuda(dx.get(), n, d, dw.get(), 1e-5f, out.get(), nullptr), cudaSuccess);
  ExpectNear(out.ToHost(), want, 1e-6f, "rmsnorm");

  std::vector<float> sum = x;
  kernels::AddCpu(sum.data(), y.data(), sum.size());
  kernels::RmsNormCpu(sum.data(), n, d, w.data(), 1e-5f, want.data());
  ASSERT_EQ(kernels::AddRmsNormCuda(dx.get(), dy.get(), n, d, dw.get(), 1e-5f, out.get(), nullptr),
            cudaSuccess);
  ExpectNear(dx.ToHost(), sum, 0.0f, "residual");
  ExpectNear(out.ToHost(), want, 1e-6f, "fused rmsnorm");
}

TEST(CudaKernelsTest, RopeMatchesCpu) {
  CED_SKIP_WITHOUT_CUDA();
  const int n = 9, heads = 4, D = 64;
  auto x = RandomFloats(n * heads * D, 5);
  const std::vector<int32_t> pos = {0, 1, 2, 100, 511, 4095, 7, 8, 30000};
  DeviceArray<float> dx(x);
  DeviceArray<int32_t> dpos(pos);
  ASSERT_EQ(kernels::RopeCuda(dx.get(), n, heads, D, dpos.get(), 500000.0, nullptr), cudaSuccess);
  kernels::RopeCpu(x.data(), n, heads, D, pos.data(), 500000.0);
  ExpectNear(dx.ToHost(), x, 1e-6f, "rope");
}

TEST(CudaKernelsTest, SiluMulAndAddMatchCpu) {
  CED_SKIP_WITHOUT_CUDA();
  const size_t count = 100003;
  auto gate = RandomFloats(count, 6, 4.0f);
  const auto up = RandomFloats(count, 7);
  DeviceArray<float> dg(gate), du(up);
  ASSERT_EQ(kernels::SiluMulCuda(dg.get(), du.get(), count, nullptr), cudaSuccess);
  kernels::SiluMulCpu(gate.data(), up.data(), count);
  ExpectNear(dg.ToHost(), gate, 1e-5f, "silu");
  ASSERT_EQ(kernels::AddCuda(dg.get(), du.get(), count, nullptr), cudaSuccess);
  kernels::AddCpu(gate.data(), up.data(), count);
  ExpectNear(dg.ToHost(), gate, 1e-5f, "add");
}

// Rows with awkward values: zeros, subnormals, ties, huge, inf, NaN.
std::vector<float> CodecRows(int n, int row_elems) {
  auto v = RandomFloats(static_cast<size_t>(n) * row_elems, 8, 2.0f);
  const float specials[] = {0.0f, -0.0f, 1e-9f, -3e-3f, 0.25f, 448.0f, 500.0f, -1e30f, 3.3e38f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 1.0f / 1024, 2.75f};
  for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); ++i) v[i * 7] = specials[i];
  for (int j = 0; j < row_elems; ++j) v[row_elems + j] *= 1e-6f;  // a row of tiny values
  for (int j = 0; j < 16; ++j) v[2 * row_elems + j] = 0.0f;       // an all-zero fp4 group
  return v;
}

class CudaCodecTest : public ::testing::TestWithParam<KvFormat> {};

TEST_P(CudaCodecTest, EncodeDecodeRoundTripMatchCpuBytes) {
  CED_SKIP_WITHOUT_CUDA();
  const KvFormat f = GetParam();
  const int n = 6, row_elems = 256, stride = 300;
  const size_t rb = kernels::KvRowBytes(f, row_elems);
  auto rows = CodecRows(n, row_elems);
  std::vector<float> src(static_cast<size_t>(n) * stride, 7.0f);
  for (int i = 0; i < n; ++i) std::copy_n(&rows[i * row_elems], row_elems, &src[i * stride]);

  std::vector<uint8_t> want(n * rb);
  std::vector<float> want_dec(n * row_elems);
  for (int i = 0; i < n; ++i) {
    kernels::EncodeRow(f, &src[i * stride], row_elems, &want[i * rb]);
    kernels::DecodeRow(f, &want[i * rb], row_elems, &want_dec[i * row_elems]);
  }
  DeviceArray<float> dsrc(src), ddec(n * row_elems);
  DeviceArray<uint8_t> dst(n * rb);
  std::vector<uint8_t*> ptrs(n);  // rows in reverse order: pointers are honoured
  for (int i = 0; i < n; ++i) ptrs[i] = dst.get() + (n - 1 - i) * rb;
  DeviceArray<uint8_t*> dptrs(ptrs);
  ASSERT_EQ(kernels::EncodeRowsCuda(f, dsrc.get(), n, row_elems, stride, dptrs.get(), nullptr),
            cudaSuccess);
  const auto got = dst.ToHost();
  for (int i = 0; i < n; ++i) {
    for (size_t b = 0; b < rb; ++b) {
      ASSERT_EQ(got[(n - 1 - i) * rb + b], want[i * rb + b]) << "row " << i << " byte " << b;
    }
  }
  ASSERT_EQ(kernels::DecodeRowsCuda(f, reinterpret_cast<const uint8_t* const*>(dptrs.get()), n,
                                    row_elems, ddec.get(), nullptr),
            cudaSuccess);
  const auto dec = ddec.ToHost();
  ASSERT_EQ(0, std::memcmp(dec.data(), want_dec.data(), dec.size() * sizeof(float)));

  // RoundTrip: f32 is untouched (like the CPU backend); others decode(encode).
  DeviceArray<float> rt(rows);
  ASSERT_EQ(kernels::RoundTripCuda(f, rt.get(), n, row_elems, nullptr), cudaSuccess);
  const auto rt_host = rt.ToHost();
  if (f == KvFormat::kF32) {
    ASSERT_EQ(0, std::memcmp(rt_host.data(), rows.data(), rows.size() * sizeof(float)));
  } else {
    ASSERT_EQ(0, std::memcmp(rt_host.data(), want_dec.data(), rows.size() * sizeof(float)));
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaCodecTest,
                         ::testing::Values(KvFormat::kF32, KvFormat::kBF16, KvFormat::kFP8E4M3,
                                           KvFormat::kFP4E2M1),
                         [](const auto& info) {
                           return std::string(kernels::KvFormatName(info.param));
                         });

}  // namespace
}  // namespace ced::testing
