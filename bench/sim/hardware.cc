#include "bench/sim/hardware.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ced::sim {

absl::StatusOr<GpuSpec> GpuByName(std::string_view name) {
  if (name == "h100") return GpuSpec{"h100", 989e12, 3.35e12, 80e9};
  if (name == "h200") return GpuSpec{"h200", 989e12, 4.8e12, 141e9};
  return absl::InvalidArgumentError(
      absl::StrCat("--gpu: unknown GPU kind '", std::string(name), "' (known: h100, h200)"));
}

namespace {

std::vector<std::pair<const char*, double GpuSpec::*>> NumericFields() {
  return {{"peak_flops", &GpuSpec::peak_flops},
          {"attention_flops_per_s", &GpuSpec::attention_flops_per_s},
          {"hbm_bytes_per_s", &GpuSpec::hbm_bytes_per_s},
          {"hbm_bytes", &GpuSpec::hbm_bytes},
          {"bytes_per_param", &GpuSpec::bytes_per_param},
          {"prefill_step_s", &GpuSpec::prefill_step_s},
          {"prefill_token_s", &GpuSpec::prefill_token_s},
          {"decode_step_s", &GpuSpec::decode_step_s},
          {"decode_seq_s", &GpuSpec::decode_seq_s},
          {"request_s", &GpuSpec::request_s},
          {"kv_room_bytes", &GpuSpec::kv_room_bytes},
          {"link_bytes_per_s", &GpuSpec::link_bytes_per_s},
          {"decode_colocated_slowdown", &GpuSpec::decode_colocated_slowdown},
          {"prefill_colocated_slowdown", &GpuSpec::prefill_colocated_slowdown},
          {"prefill_scale", &GpuSpec::prefill_scale}};
}

}  // namespace

absl::StatusOr<GpuSpec> ParseDeviceProfile(absl::string_view text, absl::string_view filename) {
  GpuSpec spec;
  spec.name = "profile";
  bool seen_peak = false, seen_bw = false, seen_mem = false;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (size_t hash = line.find('#'); hash != absl::string_view::npos) line = line.substr(0, hash);
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    std::vector<absl::string_view> parts =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    const std::string where = absl::StrCat(filename, ":", line_no, ": ");
    if (parts.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(where, "expected 'key value'"));
    }
    const absl::string_view key = parts[0];
    if (key == "name") {
      spec.name = std::string(parts[1]);
      continue;
    }
    double GpuSpec::*field = nullptr;
    for (const auto& [name, member] : NumericFields()) {
      if (key == name) field = member;
    }
    if (field == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where, "unknown key '", key, "'"));
    }
    double value = 0;
    if (!absl::SimpleAtod(parts[1], &value) || !std::isfinite(value) || value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "key '", key, "': expected a number >= 0, got '", parts[1], "'"));
    }
    spec.*field = value;
    seen_peak |= key == "peak_flops";
    seen_bw |= key == "hbm_bytes_per_s";
    seen_mem |= key == "hbm_bytes";
  }
  if (!seen_peak || !seen_bw || !seen_mem) {
    return absl::InvalidArgumentError(
        absl::StrCat(filename, ": peak_flops, hbm_bytes_per_s and hbm_bytes are required"));
  }
  if (!(spec.peak_flops > 0) || !(spec.hbm_bytes_per_s > 0) || !(spec.bytes_per_param > 0) ||
      !(spec.prefill_scale > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        filename, ": peak_flops, hbm_bytes_per_s, bytes_per_param and prefill_scale must be > 0"));
  }
  return spec;
}

absl::StatusOr<GpuSpec> LoadDeviceProfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("--device-profile: cannot read '", path, "'"));
  std::stringstream text;
  text << in.rdbuf();
  return ParseDeviceProfile(text.str(), path);
}

std::string DeviceProfileText(const GpuSpec& spec) {
  std::string out = absl::StrCat("name ", spec.name, "\n");
  for (const auto& [name, member] : NumericFields()) {
    absl::StrAppendFormat(&out, "%s %.9g\n", name, spec.*member);
  }
  return out;
}

}  // namespace ced::sim
