// KV transports for GPU memory (DESIGN.md §2 "KV data plane"):
//
//   "nccl"  payload bytes move GPU to GPU with NCCL point-to-point (NVLink,
//           InfiniBand/RoCE via NCCL's net plugins, or PCIe), headers and
//           verdicts over a small TCP control connection per peer that also
//           carries the NCCL unique id (nccl_transport.h).
//
// Payload spans may be device memory or host memory (host spans are staged
// through device memory), so the workers can select "nccl" with
// --kv-transport nccl whatever their backend. Same KvSink contract and wire
// header validation as "ucx": the 64-byte header is decoded and checked, and
// the sink's Accept (the reservation check) runs before any payload byte is
// sent, let alone lands; the payload CRC32C is computed on the GPU for device
// spans.
//
// The implementation lives in the plugin libced_kv_cuda.so (NCCL and the CUDA
// runtime carry thread-local storage that must stay out of the services'
// static TLS, see engine/backend/cuda/plugin.h); this header is the host side.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "services/kv_transport/transport.h"

// Changes whenever the entry point or TransportOptions changes shape.
#define CED_KV_CUDA_PLUGIN_ABI_VERSION \
  ((1 << 20) | static_cast<int>(sizeof(::ced::kv_transport::TransportOptions)))

extern "C" {
using CedKvCudaCreateTransportFn =
    void (*)(const ced::kv_transport::TransportOptions* options,
             absl::StatusOr<std::unique_ptr<ced::kv_transport::KvTransport>>* out);
}
inline constexpr const char* kCedKvCudaPluginFileName = "libced_kv_cuda.so";
inline constexpr const char* kCedKvCudaAbiVersionSymbol = "ced_kv_cuda_plugin_abi_version";
inline constexpr const char* kCedKvCudaCreateTransportSymbol = "ced_kv_cuda_create_transport";

namespace ced::kv_transport {

// True when `kind` names a transport of this header ("nccl").
bool IsCudaTransportKind(const std::string& kind);

// Loads libced_kv_cuda.so (once; $CED_KV_CUDA_PLUGIN overrides where) and
// creates the transport. UNAVAILABLE in a build without CUDA, when the plugin
// does not load, or when there is no CUDA device ("no CUDA device ...").
absl::StatusOr<std::unique_ptr<KvTransport>> CreateCudaKvTransport(const TransportOptions& options);

}  // namespace ced::kv_transport
