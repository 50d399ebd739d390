// Prologue of a kernel source compiled once per instruction-set variant
// (kernels/cpu/CMakeLists.txt compiles it with CED_KERNEL_VARIANT = 0, 1, 2).
//
// Include it after every system header: from here on, functions are compiled
// for the variant's instructions (#pragma GCC target; the command line stays
// portable, so library code the source instantiates is not), and they must be
// declared inside namespace ced::kernels::CED_VARIANT_NS (one copy per
// variant, no name shared between variants). Only the dispatcher
// (kernels/cpu/kernel_table.h) calls into a variant, after checking the CPU.
#pragma once

#if !defined(CED_KERNEL_VARIANT)
#error "kernels/cpu/variant.h: compile this source through ced_add_kernel_variants()"
#endif

// The project builds with GCC. Clang (the fuzz build, tests/fuzz) ignores
// these pragmas: its variants are portable code, correct on every CPU.
#if CED_KERNEL_VARIANT == 2
#pragma GCC target("avx,avx2,fma,f16c,bmi,bmi2,popcnt,avx512f,avx512bw,avx512vl,avx512dq")
#define CED_VARIANT_NS avx512
#define CED_VARIANT_NAME "avx512"
// Floats per native vector register, and rows x (columns / register) of the
// packed-GEMM register tile: 8 x 2 accumulators of the 32 zmm registers.
#define CED_VEC_FLOATS 16
#define CED_PANEL 32
#define CED_TILE_ROWS 8
#elif CED_KERNEL_VARIANT == 1
#pragma GCC target("avx,avx2,fma,f16c,bmi,bmi2,popcnt")
#define CED_VARIANT_NS avx2
#define CED_VARIANT_NAME "avx2"
// 6 x 2 accumulators + 2 panel loads + 1 broadcast of the 16 ymm registers.
#define CED_VEC_FLOATS 8
#define CED_PANEL 16
#define CED_TILE_ROWS 6
#elif CED_KERNEL_VARIANT == 0
#define CED_VARIANT_NS generic
#define CED_VARIANT_NAME "generic"
// SSE2 on x86-64 (NEON on AArch64): 3 x 4 accumulators of 16 registers.
#define CED_VEC_FLOATS 4
#define CED_PANEL 16
#define CED_TILE_ROWS 3
#else
#error "unknown CED_KERNEL_VARIANT"
#endif
