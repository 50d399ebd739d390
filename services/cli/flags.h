// A small `--name=value` / `--name value` parser for the ced subcommands.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ced::cli {

struct FlagSpec {
  std::string name;  // without dashes
  std::string default_value;
  std::string help;
  bool is_bool = false;
};

class Flags {
 public:
  // Parses argv (after the subcommand words). Unknown flags and missing
  // values are errors naming the flag. `--help` sets help().
  static absl::StatusOr<Flags> Parse(const std::vector<FlagSpec>& specs,
                                     const std::vector<std::string>& args);
  bool help() const { return help_; }
  const std::vector<std::string>& positional() const { return positional_; }
  std::string Get(const std::string& name) const;
  bool Has(const std::string& name) const { return set_.count(name) > 0; }
  absl::StatusOr<int64_t> GetInt(const std::string& name) const;
  // GetInt within [lo, hi]: "--name must be in [lo, hi], got V" otherwise.
  absl::StatusOr<int64_t> GetIntIn(const std::string& name, int64_t lo, int64_t hi) const;
  absl::StatusOr<double> GetDouble(const std::string& name) const;
  bool GetBool(const std::string& name) const;

 private:
  bool help_ = false;
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> set_;
  std::vector<std::string> positional_;
};

// Before work whose results go to `path` (given by --`flag`; empty: none):
// creates its parent folders and checks that the file can be written, so
// that a bad path is refused before the work rather than losing it after.
// Leaves an existing file as it is and no new file behind. INVALID_ARGUMENT
// naming the flag and the path.
absl::Status CheckWritable(const std::string& flag, const std::string& path);

// --logit-bias's "ID:BIAS,ID:BIAS" (empty: none); the ranges are the
// sampler's or the gateway's to check. INVALID_ARGUMENT naming the flag and
// the piece.
absl::StatusOr<std::vector<std::pair<int32_t, float>>> ParseLogitBias(const std::string& text);

// The sampling flags `ced generate` and `ced client generate` share:
// --temperature, --top-k, --top-p, --seed and the logit adjustments
// (SamplingFlagSpecs gives the adjustments' specs; `repetition_off` is the
// --repetition-penalty default that means off). Values as given: the ranges
// are the sampler's or the gateway's to check.
struct SamplingFlags {
  double temperature = 0, top_p = 1, presence_penalty = 0, frequency_penalty = 0,
         repetition_penalty = 1;
  int64_t top_k = 0, seed = 0;
  std::vector<std::pair<int32_t, float>> logit_bias;
};
std::vector<FlagSpec> SamplingFlagSpecs(const std::string& repetition_off);
absl::StatusOr<SamplingFlags> ParseSamplingFlags(const Flags& flags);

// "Usage: <usage>\n\n<summary>\n\nFlags:\n  --name (default) help..."
std::string FormatHelp(const std::string& usage, const std::string& summary,
                       const std::vector<FlagSpec>& specs);

}  // namespace ced::cli
