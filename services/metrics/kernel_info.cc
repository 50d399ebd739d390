#include "services/metrics/kernel_info.h"

#include <string>

#include "engine/common/status.h"
#include "kernels/cpu/gemm_packed.h"
#include "kernels/cpu/isa.h"

namespace ced::metrics {

absl::Status RegisterCpuKernelInfo(Registry* registry) {
  if (registry == nullptr) return absl::InvalidArgumentError("RegisterCpuKernelInfo: null registry");
  ASSIGN_OR_RETURN(auto* info,
                   registry->AddGauge("ced_cpu_kernel_info",
                                      "CPU kernel variant in use (isa), the best this CPU "
                                      "supports (best), the weight prefetch hint (prefetch: "
                                      "nta or l2, by CPU vendor) and whether weights whose "
                                      "values are bf16 are packed as bf16 (weights: "
                                      "bf16_where_lossless or f32); CED_CPU_ISA, "
                                      "CED_CPU_PREFETCH and CED_CPU_WEIGHTS force them.",
                                      {"isa", "best", "prefetch", "weights"}));
  info->WithLabelValues({std::string(kernels::CpuIsaName(kernels::ActiveCpuIsa())),
                         std::string(kernels::CpuIsaName(kernels::BestCpuIsa())),
                         std::string(kernels::PrefetchHintName(kernels::ActivePrefetchHint())),
                         kernels::PackedBf16Allowed() ? "bf16_where_lossless" : "f32"})
      .Set(1);
  return absl::OkStatus();
}

}  // namespace ced::metrics
