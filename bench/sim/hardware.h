// Device specs for the simulator's roofline model: the GPU kinds of the
// study, and measured device profiles (a CPU of this machine, calibrated by
// ced-sim-calibrate) read from a small text file. Plain values; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ced::sim {

struct GpuSpec {
  std::string name;
  double peak_flops = 0;       // dense matmul rate (bf16 on the GPUs), FLOP/s
  double hbm_bytes_per_s = 0;  // memory bandwidth, bytes/s
  double hbm_bytes = 0;        // memory capacity, bytes
  double bytes_per_param = 2;  // weights as stored (2 = bf16, 4 = f32)

  // Costs beyond the roofline; 0 for the GPU kinds, measured for a profile.
  double prefill_step_s = 0;   // fixed part of one prefill step
  double prefill_token_s = 0;  // per prompt token (attention, norms, ...)
  double decode_step_s = 0;    // fixed part of one decode iteration
  double decode_seq_s = 0;     // per sequence in a decode iteration
  double request_s = 0;        // per request: gateway, router and RPC hops before prefill
  // > 0: global KV budget of an instance in bytes (a worker's --kv-cache-mb),
  // instead of 90% of the memory minus the weights.
  double kv_room_bytes = 0;
  // > 0: K/V link per prefill instance in bytes/s, instead of --link-gbps.
  double link_bytes_per_s = 0;
  // A prefill and a decode instance sharing one machine (the CPU cluster):
  // how much slower a decode step runs while the neighbour prefills, and a
  // prefill while the neighbour decodes (measured; >= 1, 1 = no effect).
  double decode_colocated_slowdown = 1;
  double prefill_colocated_slowdown = 1;
  // Attention's rate (score and value products with their softmax), FLOP/s;
  // 0: peak_flops. Measured for a CPU profile, where long contexts run
  // below the matmul rate.
  double attention_flops_per_s = 0;
  // Every prefill's compute (fresh or resumed) times this factor: a prefill
  // measured where the instances serve (a cluster's prefill worker, alone)
  // over the same prefill as calibrated in process. > 0; 1 = as calibrated.
  double prefill_scale = 1;
};

// "h100" (H100 SXM: 989 TFLOP/s, 3.35 TB/s, 80 GB) or "h200" (989 TFLOP/s,
// 4.8 TB/s, 141 GB). INVALID_ARGUMENT naming the known kinds otherwise.
absl::StatusOr<GpuSpec> GpuByName(std::string_view name);

// A device profile as text: one `key value` per line, '#' starts a comment.
// Keys are the GpuSpec field names (name, peak_flops, hbm_bytes_per_s, ...);
// peak_flops, hbm_bytes_per_s and hbm_bytes are required. Unknown keys and
// bad numbers are errors naming the key and line.
absl::StatusOr<GpuSpec> ParseDeviceProfile(absl::string_view text, absl::string_view filename);
absl::StatusOr<GpuSpec> LoadDeviceProfile(const std::string& path);
// The inverse of ParseDeviceProfile (every field, full precision).
std::string DeviceProfileText(const GpuSpec& spec);

}  // namespace ced::sim
