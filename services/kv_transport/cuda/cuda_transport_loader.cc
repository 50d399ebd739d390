// Host side of libced_kv_cuda.so (see cuda_transport.h). Nothing here links
// against CUDA or NCCL.
#include "absl/strings/str_cat.h"
#include "services/kv_transport/cuda/cuda_transport.h"

#ifdef CED_HAVE_CUDA_PLUGINS
#include <dlfcn.h>

#include "engine/backend/cuda/plugin.h"
#endif

namespace ced::kv_transport {

bool IsCudaTransportKind(const std::string& kind) { return kind == "nccl"; }

absl::StatusOr<std::unique_ptr<KvTransport>> CreateCudaKvTransport(
    const TransportOptions& options) {
#ifdef CED_HAVE_CUDA_PLUGINS
  static const absl::StatusOr<void*>* const handle = new absl::StatusOr<void*>(
      cuda_plugin::OpenPlugin({kCedKvCudaPluginFileName, "CED_KV_CUDA_PLUGIN",
                               kCedKvCudaAbiVersionSymbol, CED_KV_CUDA_PLUGIN_ABI_VERSION}));
  if (!handle->ok()) return handle->status();
  void* fn = dlsym(**handle, kCedKvCudaCreateTransportSymbol);
  if (fn == nullptr) {
    return absl::UnavailableError(absl::StrCat(kCedKvCudaPluginFileName, " has no symbol ",
                                               kCedKvCudaCreateTransportSymbol, ": rebuild it"));
  }
  absl::StatusOr<std::unique_ptr<KvTransport>> out =
      absl::InternalError("the CUDA transport plugin returned nothing");
  reinterpret_cast<CedKvCudaCreateTransportFn>(fn)(&options, &out);
  return out;
#else
  return absl::UnavailableError(absl::StrCat("transport option 'kind': '", options.kind,
                                             "' needs a build with CUDA and NCCL (CED_CUDA=ON)"));
#endif
}

}  // namespace ced::kv_transport
