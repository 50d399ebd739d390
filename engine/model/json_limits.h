// Internal to ced_model: a guard run before handing untrusted text to the
// JSON DOM parser, whose tree teardown and printing recurse per nesting level.
#pragma once

#include <string_view>

namespace ced::model_internal {

// True when no array/object in `text` nests deeper than `limit` (brackets
// inside strings do not count). Linear time, no allocation.
inline bool JsonDepthWithin(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (ch == '\\') {
        escaped = true;
      } else if (ch == '"') {
        in_string = false;
      }
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > limit) return false;
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  return true;
}

}  // namespace ced::model_internal
