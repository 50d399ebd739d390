#include "engine/tokenizer/added_tokens.h"

namespace ced::tokenizer_internal {

WordSplitter::WordSplitter(const std::vector<std::string>& words) : is_word_(1, false) {
  for (const std::string& word : words) {
    if (word.empty()) continue;
    first_byte_[static_cast<unsigned char>(word[0])] = true;
    int node = 0;
    for (char c : word) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(c);
      auto [it, inserted] = children_.try_emplace(key, static_cast<int>(is_word_.size()));
      if (inserted) is_word_.push_back(false);
      node = it->second;
    }
    is_word_[node] = true;
  }
}

size_t WordSplitter::LongestAt(std::string_view text, size_t pos) const {
  int node = 0;
  size_t longest = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[i]);
    const auto it = children_.find(key);
    if (it == children_.end()) break;
    node = it->second;
    if (is_word_[node]) longest = i + 1 - pos;
  }
  return longest;
}

void WordSplitter::Split(std::string_view text, std::vector<std::string_view>* out) const {
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    if (!first_byte_[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    const size_t n = LongestAt(text, i);
    if (n == 0) {
      ++i;
      continue;
    }
    if (i > start) out->push_back(text.substr(start, i - start));
    out->push_back(text.substr(i, n));
    i += n;
    start = i;
  }
  if (start < text.size()) out->push_back(text.substr(start));
}

}  // namespace ced::tokenizer_internal
