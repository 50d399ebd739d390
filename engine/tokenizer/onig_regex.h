// A compiled Oniguruma regular expression, run verbatim as Hugging Face
// tokenizers run the `Regex` patterns of tokenizer.json.
//
// Internal to ced_tokenizer. Immutable after Create; Matches() may be called
// from many threads at once (each call uses its own match region).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ced::tokenizer_internal {

class OnigRegex {
 public:
  // Compiles `pattern` (UTF-8, Oniguruma syntax). `(?i:...)` folds ASCII
  // letters only, as the reference (@huggingface/tokenizers) does; everything
  // else (\p{..}, lookaround, possessive and counted quantifiers) is
  // Oniguruma's. InvalidArgument naming `what` and Oniguruma's message.
  static absl::StatusOr<std::unique_ptr<OnigRegex>> Create(std::string_view pattern,
                                                           std::string_view what);
  ~OnigRegex();
  OnigRegex(const OnigRegex&) = delete;
  OnigRegex& operator=(const OnigRegex&) = delete;

  // Appends the [begin, end) byte ranges of the successive non-empty matches
  // in `text` (well-formed UTF-8), leftmost first, as JavaScript's matchAll
  // with the `u` flag finds them (after an empty match the search resumes one
  // character later). Lookaround sees all of `text` and nothing beyond it.
  void Matches(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const;

  // Whether the regex matches all of `text` (anchored at both ends).
  bool MatchesWhole(std::string_view text) const;

 private:
  explicit OnigRegex(void* regex) : regex_(regex) {}
  void* regex_;  // regex_t*
};

}  // namespace ced::tokenizer_internal
