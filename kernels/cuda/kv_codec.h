// K/V cache row codecs on the GPU (DESIGN.md §1.5). Byte-for-byte the same
// encoding as kernels/cpu/kv_codec.h, so caches written on either device can
// be read (and transferred) by the other.
//
// Device pointers throughout; `*_rows` are DEVICE arrays of n DEVICE row
// pointers. Work is queued on `stream`; the launch status is returned.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/kv_codec.h"

namespace ced::kernels {

// Encodes n rows of row_elems floats (row i at src + i * src_stride) into
// the cache format at dst_rows[i]. For fp4, row_elems must be a multiple of 16.
cudaError_t EncodeRowsCuda(KvFormat format, const float* src, int n, int row_elems,
                           size_t src_stride, uint8_t* const* dst_rows, cudaStream_t stream);
// Decodes n stored rows (src_rows[i]) into dst [n, row_elems].
cudaError_t DecodeRowsCuda(KvFormat format, const uint8_t* const* src_rows, int n, int row_elems,
                           float* dst, cudaStream_t stream);
// Rounds x [n, row_elems] through the format in place (what decoding the
// encoded rows would return). A no-op for f32, like the CPU backend.
cudaError_t RoundTripCuda(KvFormat format, float* x, int n, int row_elems, cudaStream_t stream);

}  // namespace ced::kernels
