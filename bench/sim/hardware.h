// GPU specs for the simulator's roofline model. Plain values; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ced::sim {

struct GpuSpec {
  std::string name;
  double peak_flops = 0;       // dense bf16, FLOP/s
  double hbm_bytes_per_s = 0;  // memory bandwidth, bytes/s
  double hbm_bytes = 0;        // memory capacity, bytes
};

// "h100" (H100 SXM: 989 TFLOP/s, 3.35 TB/s, 80 GB) or "h200" (989 TFLOP/s,
// 4.8 TB/s, 141 GB). INVALID_ARGUMENT naming the known kinds otherwise.
absl::StatusOr<GpuSpec> GpuByName(std::string_view name);

}  // namespace ced::sim
