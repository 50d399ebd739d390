// Host side of the CUDA backend plugin: registers "cuda" and "cuda-bf16" in the
// backend registry; the first factory call loads libced_cuda.so (see plugin.h).
// Nothing here links against CUDA.
#include <dlfcn.h>

#include "absl/strings/str_cat.h"
#include "engine/backend/cuda/plugin.h"

namespace ced::cuda_plugin {
namespace {

absl::StatusOr<std::unique_ptr<Backend>> Create(const char* name) {
  absl::StatusOr<void*> fn = PluginSymbol(kCedCudaPluginCreateBackendSymbol);
  if (!fn.ok()) return fn.status();
  absl::StatusOr<std::unique_ptr<Backend>> out =
      absl::InternalError("the CUDA plugin returned nothing");
  reinterpret_cast<CedCudaPluginCreateBackendFn> (*fn)(name, &out);
  return out;
}

[[maybe_unused]] const bool kRegistered =
    RegisterBackend("cuda", [] { return Create("cuda"); }) &&
    RegisterBackend("cuda-bf16", [] { return Create("cuda-bf16"); });

}  // namespace

absl::StatusOr<void*> LoadPlugin() {
  static const absl::StatusOr<void*>* const handle = new absl::StatusOr<void*>(
      OpenPlugin({kCedCudaPluginFileName, "CED_CUDA_PLUGIN", kCedCudaPluginAbiVersionSymbol,
                  CED_CUDA_PLUGIN_ABI_VERSION}));
  return *handle;
}

absl::StatusOr<void*> PluginSymbol(const char* symbol) {
  absl::StatusOr<void*> handle = LoadPlugin();
  if (!handle.ok()) return handle.status();
  void* fn = dlsym(*handle, symbol);
  if (fn == nullptr) {
    return absl::UnavailableError(
        absl::StrCat(kCedCudaPluginFileName, " has no symbol ", symbol, ": rebuild it"));
  }
  return fn;
}

}  // namespace ced::cuda_plugin
