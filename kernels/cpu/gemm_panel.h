// The packed-panel products of one kernel variant, shared by its GEMM and
// attention sources (include after kernels/cpu/simd_math.h).
#pragma once

#include "kernels/cpu/simd_math.h"

namespace ced::kernels::CED_VARIANT_NS {

constexpr int kPanel = CED_PANEL;  // columns per panel
static_assert(kPanel % kLanes == 0, "panels hold whole vectors");

// y[n, cols] (+)= x[n, in] * B on one thread, B given as panels of kPanel
// columns: panel p starts at b + p * panel_stride and holds rows [0, in) of
// kPanel floats (columns past `cols` are read but not stored). x rows are
// ldx floats apart, y rows ldy.
void PanelGemm(const float* x, size_t ldx, int n, int in, const float* b, size_t panel_stride,
               int cols, float* y, size_t ldy, bool accumulate);

// One panel on the calling thread: y[0, cols) (+)= x[in] * panel
// (panel [in][kPanel], columns past `cols` are read but not stored).
void PanelGemv(const float* x, int in, const float* panel, int cols, float* y, bool accumulate);

}  // namespace ced::kernels::CED_VARIANT_NS
