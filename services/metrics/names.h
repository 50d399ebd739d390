// Validation of Prometheus metric and label names.
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace ced::metrics {

// OK when `name` matches [a-zA-Z_:][a-zA-Z0-9_:]* and does not start with "__"
// (reserved for Prometheus-internal names); InvalidArgument naming it otherwise.
absl::Status ValidateMetricName(std::string_view name);

// OK when `name` matches [a-zA-Z_][a-zA-Z0-9_]* and does not start with "__";
// InvalidArgument naming it otherwise.
absl::Status ValidateLabelName(std::string_view name);

}  // namespace ced::metrics
