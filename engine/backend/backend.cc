#include "engine/backend/backend.h"

#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ced {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, BackendFactory> factories;
};

Registry& GetRegistry() {
  static auto* registry = new Registry;
  return *registry;
}

}  // namespace

void Backend::GemmMulti(const float* x, int n, int in, const GemmTarget* targets, int count) {
  for (int i = 0; i < count; ++i) {
    const GemmTarget& t = targets[i];
    if (!t.accumulate) {
      Gemm(x, n, in, t.w, t.out, t.y);
      continue;
    }
    const size_t elems = static_cast<size_t>(n) * t.out;
    float* tmp = static_cast<float*>(Alloc(elems * sizeof(float)));
    Gemm(x, n, in, t.w, t.out, tmp);
    Add(t.y, tmp, elems);
    Free(tmp);
  }
}

bool RegisterBackend(const std::string& name, BackendFactory factory) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.factories.emplace(name, std::move(factory)).second;
}

std::vector<std::string> RegisteredBackends() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, unused] : r.factories) names.push_back(name);
  return names;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& name) {
  BackendFactory factory;
  {
    Registry& r = GetRegistry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.factories.find(name);
    if (it == r.factories.end()) {
      std::vector<std::string> names;
      for (const auto& [n, unused] : r.factories) names.push_back(n);
      return absl::InvalidArgumentError(absl::StrCat("device '", name,
                                                     "' is not available in this build (have: ",
                                                     absl::StrJoin(names, ", "), ")"));
    }
    factory = it->second;
  }
  return factory();
}

}  // namespace ced
