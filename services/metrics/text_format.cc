#include "services/metrics/text_format.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace ced::metrics {

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == 0) return "0";                                // Also folds -0 into "0".
  constexpr double kExactIntegerLimit = 9007199254740992.0;  // 2^53
  if (std::fabs(value) < kExactIntegerLimit && value == std::trunc(value)) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  char buf[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  return buf;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void AppendSampleLine(std::string_view name, const std::vector<std::string>& label_names,
                      const std::vector<std::string>& label_values, std::string_view extra_name,
                      std::string_view extra_value, double value, std::string* out) {
  out->append(name.data(), name.size());
  if (!label_names.empty() || !extra_name.empty()) {
    out->push_back('{');
    const char* sep = "";
    for (size_t i = 0; i < label_names.size(); ++i) {
      absl::StrAppend(out, sep, label_names[i], "=\"", EscapeLabelValue(label_values[i]), "\"");
      sep = ",";
    }
    if (!extra_name.empty()) {
      absl::StrAppend(out, sep, std::string(extra_name), "=\"", EscapeLabelValue(extra_value),
                      "\"");
    }
    out->push_back('}');
  }
  absl::StrAppend(out, " ", FormatValue(value), "\n");
}

}  // namespace ced::metrics
