// Finding and dlopen()ing a CUDA plugin (plugin.h). Nothing here links
// against CUDA.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/backend/cuda/plugin.h"

namespace ced::cuda_plugin {
namespace {

std::string ExecutableDir() {
  std::string path(4096, '\0');
  const ssize_t n = readlink("/proc/self/exe", path.data(), path.size() - 1);
  if (n <= 0) return "";
  path.resize(static_cast<size_t>(n));
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

std::vector<std::string> Candidates(const PluginSpec& spec) {
  if (const char* env = std::getenv(spec.env_var); env != nullptr && *env != '\0') {
    return {env};
  }
  std::vector<std::string> c;
  // Next to the executable, then lib/ beside it and beside each of its three
  // nearest ancestors: <prefix>/bin/ced -> <prefix>/lib, <build>/bin/ced and
  // <build>/tests/cuda/<test> -> <build>/lib (also in a moved build tree).
  std::string dir = ExecutableDir();
  if (!dir.empty()) c.push_back(absl::StrCat(dir, "/", spec.file_name));
  for (int up = 0; up < 4 && !dir.empty(); ++up) {
    c.push_back(absl::StrCat(dir, "/lib/", spec.file_name));
    const size_t slash = dir.rfind('/');
    dir = slash == std::string::npos || slash == 0 ? "" : dir.substr(0, slash);
  }
#ifdef CED_CUDA_PLUGIN_BUILD_DIR
  c.push_back(absl::StrCat(CED_CUDA_PLUGIN_BUILD_DIR, "/", spec.file_name));
#endif
  return c;
}

}  // namespace

absl::StatusOr<void*> OpenPlugin(const PluginSpec& spec) {
  std::vector<std::string> tried;
  for (const std::string& path : Candidates(spec)) {
    if (access(path.c_str(), F_OK) != 0) {
      tried.push_back(absl::StrCat(path, " (no such file)"));
      continue;
    }
    // RTLD_LOCAL: the plugin's symbols (and its copies of the kernels) stay
    // private; only the two entry points are looked up.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* e = dlerror();
      tried.push_back(absl::StrCat(path, " (", e != nullptr ? e : "dlopen failed", ")"));
      continue;
    }
    auto version = reinterpret_cast<int (*)()>(dlsym(handle, spec.abi_symbol));
    if (version == nullptr || version() != spec.abi_version) {
      tried.push_back(absl::StrCat(path, " (plugin ABI version ",
                                   version == nullptr ? -1 : version(), ", expected ",
                                   spec.abi_version, ": rebuild it)"));
      dlclose(handle);
      continue;
    }
    return handle;
  }
  return absl::UnavailableError(absl::StrCat("the CUDA plugin ", spec.file_name,
                                             " could not be loaded (set ", spec.env_var,
                                             " to its path); tried: ", absl::StrJoin(tried, "; ")));
}

}  // namespace ced::cuda_plugin
