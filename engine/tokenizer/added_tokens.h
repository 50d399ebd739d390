// Added tokens of tokenizer.json: matched in the text before the model runs,
// longest match first at the leftmost position, as the reference's
// DictionarySplitter does.
// Internal to ced_tokenizer. Immutable after construction; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace ced::tokenizer_internal {

struct AddedToken {
  std::string content;
  int id = -1;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;  // read, but not honoured: the reference ignores it
};

// Splits text at occurrences of a set of words.
class WordSplitter {
 public:
  explicit WordSplitter(const std::vector<std::string>& words);

  // Appends the sections of `text`: each occurrence of a word (the longest
  // one starting at the leftmost position where any starts) and the text
  // between occurrences. Empty sections are not appended.
  void Split(std::string_view text, std::vector<std::string_view>* out) const;

 private:
  // Length of the longest word starting at text[pos], or 0.
  size_t LongestAt(std::string_view text, size_t pos) const;

  std::array<bool, 256> first_byte_{};
  absl::flat_hash_map<uint64_t, int> children_;  // (node << 8 | byte) -> child node
  std::vector<bool> is_word_;                    // node -> a word ends here
};

}  // namespace ced::tokenizer_internal
