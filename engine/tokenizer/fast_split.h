// Hand-written matchers for the Split regexes of well-known tokenizer.json
// files (Qwen2/Qwen3, Llama-3, DeepSeek-V3), recognized by exact pattern
// text. They find the same matches as OnigRegex::Matches on the same pattern:
// each implements the regex's alternation order and greediness, and the
// Unicode classes (\p{L}, \p{N}, \s, ...) are Oniguruma's own, asked once per
// code point from Oniguruma and cached process-wide.
//
// Internal to ced_tokenizer. Immutable after creation; Matches() may be called
// from many threads at once.
#pragma once

#include <memory>
#include <string_view>
#include <utility>
#include <vector>

namespace ced::tokenizer_internal {

class FastSplitter {
 public:
  virtual ~FastSplitter() = default;
  // As OnigRegex::Matches: appends the [begin, end) byte ranges of the
  // successive matches in `text` (well-formed UTF-8), leftmost first.
  virtual void Matches(std::string_view text,
                       std::vector<std::pair<size_t, size_t>>* out) const = 0;
};

// The matcher for `pattern`, or null when the pattern is not one of the known
// texts (the caller then runs it with Oniguruma).
std::unique_ptr<FastSplitter> CreateFastSplitter(std::string_view pattern);

}  // namespace ced::tokenizer_internal
