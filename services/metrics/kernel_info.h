// The CPU kernel variant a worker runs, as a Prometheus info metric.
#pragma once

#include "absl/status/status.h"
#include "services/metrics/registry.h"

namespace ced::metrics {

// Registers ced_cpu_kernel_info{isa="<active>",best="<best this CPU runs>",
// prefetch="nta|l2",weights="bf16_where_lossless|f32"} = 1 (kernels/cpu/isa.h,
// gemm_packed.h). Call once per registry; errors are Registry's.
absl::Status RegisterCpuKernelInfo(Registry* registry);

}  // namespace ced::metrics
