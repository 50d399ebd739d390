// Entry points of one kernel variant, behind the dispatcher's table
// (kernels/cpu/kernel_table.h); include after kernels/cpu/simd_math.h. The
// contracts are those of the public entry points of the same names.
#pragma once

#include "kernels/cpu/simd_math.h"

namespace ced::kernels::CED_VARIANT_NS {

void GemmPacked(const float* x, int n, int in, const PackedGemmTarget* targets, int count);
void GemvPacked(const float* x, int in, const PackedGemmTarget* targets, int count);
void GemvRows(const float* x, int in, const float* w, int r0, int r1, float* y, bool acc);
void Attention(const AttentionParams& p, const std::vector<AttentionSegment>& segments);
void RmsNormRow(const float* x, int d, const float* w, float eps, float* out);
void RopeRow(float* x, int heads, int head_dim, const float* cos, const float* sin);
void SiluMul(float* gate, const float* up, size_t count);
void Add(float* x, const float* y, size_t count);
void EncodeRow(KvFormat f, const float* src, size_t n, uint8_t* dst);
void DecodeRowSlice(KvFormat f, const uint8_t* src, size_t n, size_t begin, size_t count,
                    float* dst);

}  // namespace ced::kernels::CED_VARIANT_NS
