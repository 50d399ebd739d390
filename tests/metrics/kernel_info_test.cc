#include "services/metrics/kernel_info.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/isa.h"

namespace ced::metrics {
namespace {

using ::testing::HasSubstr;

TEST(CpuKernelInfoTest, ExportsTheVariantPrefetchHintAndWeightStorage) {
  Registry registry;
  ASSERT_TRUE(RegisterCpuKernelInfo(&registry).ok());
  const std::string want =
      std::string("ced_cpu_kernel_info{isa=\"") +
      std::string(kernels::CpuIsaName(kernels::ActiveCpuIsa())) + "\",best=\"" +
      std::string(kernels::CpuIsaName(kernels::BestCpuIsa())) + "\",prefetch=\"" +
      std::string(kernels::PrefetchHintName(kernels::ActivePrefetchHint())) + "\",weights=\"" +
      (kernels::PackedBf16Allowed() ? "bf16_where_lossless" : "f32") + "\"} 1\n";
  EXPECT_THAT(registry.Serialize(), HasSubstr(want));
  EXPECT_THAT(registry.Serialize(), HasSubstr("# TYPE ced_cpu_kernel_info gauge\n"));
  // Registering again (a process that serves two roles) keeps one series.
  ASSERT_TRUE(RegisterCpuKernelInfo(&registry).ok());
  const std::string text = registry.Serialize();
  EXPECT_EQ(text.find("ced_cpu_kernel_info{"), text.rfind("ced_cpu_kernel_info{")) << text;
  EXPECT_FALSE(RegisterCpuKernelInfo(nullptr).ok());
}

}  // namespace
}  // namespace ced::metrics
