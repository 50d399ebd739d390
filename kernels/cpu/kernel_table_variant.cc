// The entry-point table of one kernel variant (compiled once per variant).
// No static initializer may run variant code: the table is constant data.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/kernel_table.h"
// Last: everything below is compiled for the variant.
#include "kernels/cpu/gemm_panel.h"
#include "kernels/cpu/variant_kernels.h"

namespace ced::kernels::CED_VARIANT_NS {

constexpr CpuIsa kIsa = static_cast<CpuIsa>(CED_KERNEL_VARIANT);

extern const KernelTable kTable;
const KernelTable kTable = {
    kIsa, kPanel, GemmPacked, GemvPacked, GemvRows, Attention, RmsNormRow, RopeRow, SiluMul, Add,
};

}  // namespace ced::kernels::CED_VARIANT_NS
