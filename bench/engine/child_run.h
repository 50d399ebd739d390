// Runs this bench binary again as a child process with one extra
// environment variable (e.g. OPENBLAS_CORETYPE, which OpenBLAS reads only
// when it loads) and returns the JSON report the child wrote. Blocking.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace ced::bench {

// `args` are the child's flags (no program name); `json_path` must be the
// path its --json flag names. `env` is "NAME=value".
absl::StatusOr<nlohmann::ordered_json> RunChild(const std::vector<std::string>& args,
                                                const std::string& env,
                                                const std::string& json_path);

}  // namespace ced::bench
