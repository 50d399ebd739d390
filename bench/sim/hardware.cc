#include "bench/sim/hardware.h"

#include "absl/strings/str_cat.h"

namespace ced::sim {

absl::StatusOr<GpuSpec> GpuByName(std::string_view name) {
  if (name == "h100") return GpuSpec{"h100", 989e12, 3.35e12, 80e9};
  if (name == "h200") return GpuSpec{"h200", 989e12, 4.8e12, 141e9};
  return absl::InvalidArgumentError(
      absl::StrCat("--gpu: unknown GPU kind '", std::string(name), "' (known: h100, h200)"));
}

}  // namespace ced::sim
