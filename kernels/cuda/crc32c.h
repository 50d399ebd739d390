// CRC32C (Castagnoli) of device memory, for the KV transports that move
// payloads GPU to GPU (services/kv_transport/cuda): the wire header carries the
// payload's CRC32C, the same value services/kv_transport/checksum.h computes on
// the host.
//
// The GPU computes one CRC per `chunk_bytes` piece in parallel; the host folds
// them with Crc32cCombiner (GF(2) linear algebra, no data access).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace ced::kernels {

// out[i] = CRC32C (start value 0) of data[i * chunk_bytes, min(size, (i + 1) *
// chunk_bytes)) for i < ceil(size / chunk_bytes). `data` and `out` are device
// memory; queued on `stream`.
cudaError_t Crc32cChunksCuda(const uint8_t* data, size_t size, size_t chunk_bytes, uint32_t* out,
                             cudaStream_t stream);

}  // namespace ced::kernels
