// GPT-2's byte-level alphabet: every byte is written as one printable code
// point (printable Latin-1 bytes as themselves, the rest from U+0100 on).
// Vocabularies of byte-level tokenizers are spelled in it; the tokenizer
// works on raw bytes and uses these tables only to read the vocabulary.
// Internal to ced_tokenizer.
#pragma once

#include <array>
#include <cstdint>

namespace ced::tokenizer_internal {

// kByteToCodePoint[b] is the code point that stands for byte b.
inline constexpr std::array<char32_t, 256> kByteToCodePoint = [] {
  std::array<char32_t, 256> table{};
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    table[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
  }
  return table;
}();

// The byte a code point stands for, or -1 when it is not in the alphabet.
inline int ByteOfCodePoint(char32_t cp) {
  if (cp < 256) {
    return kByteToCodePoint[cp] == cp ? static_cast<int>(cp) : -1;
  }
  if (cp >= 256 + 68) return -1;  // 68 bytes are remapped
  for (int b = 0; b < 256; ++b) {
    if (kByteToCodePoint[b] == cp) return b;
  }
  return -1;
}

}  // namespace ced::tokenizer_internal
