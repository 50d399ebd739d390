#include "services/metrics/kernel_info.h"

#include <string>

#include "engine/common/status.h"
#include "kernels/cpu/isa.h"

namespace ced::metrics {

absl::Status RegisterCpuKernelInfo(Registry* registry) {
  if (registry == nullptr) return absl::InvalidArgumentError("RegisterCpuKernelInfo: null registry");
  ASSIGN_OR_RETURN(auto* info,
                   registry->AddGauge("ced_cpu_kernel_info",
                                      "CPU kernel variant in use (isa) and the best this CPU "
                                      "supports (best); CED_CPU_ISA forces a lower one.",
                                      {"isa", "best"}));
  info->WithLabelValues({std::string(kernels::CpuIsaName(kernels::ActiveCpuIsa())),
                         std::string(kernels::CpuIsaName(kernels::BestCpuIsa()))})
      .Set(1);
  return absl::OkStatus();
}

}  // namespace ced::metrics
