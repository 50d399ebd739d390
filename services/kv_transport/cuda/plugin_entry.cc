// Entry points of libced_kv_cuda.so (cuda_transport.h); everything else in the
// plugin is hidden.
#include "absl/strings/str_cat.h"
#include "services/kv_transport/cuda/cuda_transport.h"
#include "services/kv_transport/cuda/nccl_transport.h"

extern "C" __attribute__((visibility("default"))) int ced_kv_cuda_plugin_abi_version() {
  return CED_KV_CUDA_PLUGIN_ABI_VERSION;
}

extern "C" __attribute__((visibility("default"))) void ced_kv_cuda_create_transport(
    const ced::kv_transport::TransportOptions* options,
    absl::StatusOr<std::unique_ptr<ced::kv_transport::KvTransport>>* out) {
  if (options->kind == "nccl") {
    *out = ced::kv_transport::cuda::CreateNcclTransport(*options);
  } else {
    *out = absl::InvalidArgumentError(absl::StrCat("transport option 'kind': '", options->kind,
                                                   "' is not a CUDA transport (expected nccl)"));
  }
}
