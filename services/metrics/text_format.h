// Helpers for the Prometheus text exposition format, version 0.0.4.
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ced::metrics {

// Content-Type of a text-format 0.0.4 scrape response.
inline constexpr char kTextContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// Formats a sample value (or an `le` bound) the way Prometheus parses it: "+Inf", "-Inf",
// "NaN"; integral values below 2^53 without exponent or fraction ("42", "-3"); anything
// else as the shortest decimal that round-trips to the same double ("0.1", "2.5e-07").
std::string FormatValue(double value);

// Escapes HELP text: '\' -> "\\", newline -> "\n".
std::string EscapeHelp(std::string_view help);

// Escapes a label value: '\' -> "\\", '"' -> "\"", newline -> "\n".
std::string EscapeLabelValue(std::string_view value);

// Appends one sample line "name{l1="v1",...[,extra_name="extra_value"]} value\n" to `out`.
// `label_names` and `label_values` have equal sizes; `extra_name` is skipped when empty
// (histograms pass "le" here). Values are escaped; names are assumed valid.
void AppendSampleLine(std::string_view name, const std::vector<std::string>& label_names,
                      const std::vector<std::string>& label_values, std::string_view extra_name,
                      std::string_view extra_value, double value, std::string* out);

}  // namespace ced::metrics
