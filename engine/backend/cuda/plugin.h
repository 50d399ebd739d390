// The seam between a ced binary and the CUDA backend plugin (libced_cuda.so).
//
// The CUDA backend is a dlopen()ed plugin rather than a linked library: shared
// libraries loaded at program start have their thread-local storage reserved in
// every thread's stack, and cuBLAS/cuBLASLt carry ~110 KB of it, more than the
// fixed 100 KB thread stacks of Debian's civetweb (the /metrics server), whose
// threads then fail to start (pthread_create: EINVAL). Libraries loaded by
// dlopen() get their TLS allocated on demand instead (none of the CUDA
// libraries is marked DF_STATIC_TLS), so the services keep a small static TLS
// and can still run the CUDA backend.
//
// Both sides are built from the same tree by the same compiler; the ABI version
// guards against a stale plugin file.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"

// Bump whenever the functions below change shape; CMake passes a hash of
// backend.h (CED_BACKEND_INTERFACE_HASH) so Backend changes are covered too.
#ifndef CED_BACKEND_INTERFACE_HASH
#error "CED_BACKEND_INTERFACE_HASH must come from the build (engine/backend/cuda/CMakeLists.txt)"
#endif
#define CED_CUDA_PLUGIN_ABI_VERSION (1 ^ CED_BACKEND_INTERFACE_HASH)

extern "C" {
// Returns CED_CUDA_PLUGIN_ABI_VERSION as the plugin was built.
using CedCudaPluginAbiVersionFn = int (*)();
// Creates the backend `name` ("cuda" or "cuda-bf16") into *out. Runs no CUDA
// call before it is invoked.
using CedCudaPluginCreateBackendFn = void (*)(const char* name,
                                              absl::StatusOr<std::unique_ptr<ced::Backend>>* out);
}

inline constexpr const char* kCedCudaPluginAbiVersionSymbol = "ced_cuda_plugin_abi_version";
inline constexpr const char* kCedCudaPluginCreateBackendSymbol = "ced_cuda_plugin_create_backend";
inline constexpr const char* kCedCudaPluginFileName = "libced_cuda.so";

namespace ced::cuda_plugin {

// A CUDA plugin file and how to find and check it.
struct PluginSpec {
  const char* file_name;   // e.g. "libced_cuda.so"
  const char* env_var;     // a path that overrides the search, e.g. "CED_CUDA_PLUGIN"
  const char* abi_symbol;  // int (*)() returning the ABI version it was built with
  int abi_version;         // the version this binary expects
};

// dlopen()s `spec.file_name` from $<env_var> (a file path; when set, only
// there), else the first found of: the executable's directory, lib/ in it or
// in one of its three nearest ancestors, the build tree's lib/ directory; and
// checks its ABI version. UNAVAILABLE naming
// every place tried (with dlerror()) when none loads. Not cached.
absl::StatusOr<void*> OpenPlugin(const PluginSpec& spec);

// The backend plugin (libced_cuda.so), opened once per process (later calls
// return the first result).
absl::StatusOr<void*> LoadPlugin();

// Looks up `symbol` in the backend plugin.
absl::StatusOr<void*> PluginSymbol(const char* symbol);

}  // namespace ced::cuda_plugin
