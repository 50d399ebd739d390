// ced-loadgen's --target list. The flag parser itself is the benches' own
// (bench/common/flags.h).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ced::loadgen {

struct Target {
  std::string label, address;
};
// "ced=127.0.0.1:5000,dec=127.0.0.1:6000" or "127.0.0.1:5000" (label
// "gateway"); an error naming --target on an empty item or duplicate label.
absl::StatusOr<std::vector<Target>> ParseTargets(const std::string& text);

}  // namespace ced::loadgen
