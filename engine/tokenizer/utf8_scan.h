// Small UTF-8 and Unicode helpers shared by the tokenizer.json components.
// Internal to ced_tokenizer; inputs are well-formed UTF-8 unless stated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ced::tokenizer_internal {

// Length of the UTF-8 sequence that starts with `lead` (1 for a stray
// continuation byte, so that scanning always advances).
inline size_t Utf8CharLength(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// The code point at `*pos` of `text`; advances `*pos` past it.
inline char32_t NextCodePoint(std::string_view text, size_t* pos) {
  const auto b0 = static_cast<unsigned char>(text[*pos]);
  const size_t n = Utf8CharLength(b0);
  if (n == 1 || *pos + n > text.size()) {
    ++*pos;
    return b0;
  }
  char32_t cp = b0 & (0x7F >> n);
  for (size_t i = 1; i < n; ++i)
    cp = (cp << 6) | (static_cast<unsigned char>(text[*pos + i]) & 0x3F);
  *pos += n;
  return cp;
}

// The code point that ends at `end` (> 0) of `text`; sets `*begin` to its start.
inline char32_t PrevCodePoint(std::string_view text, size_t end, size_t* begin) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80 && end - b < 4) --b;
  *begin = b;
  size_t pos = b;
  return NextCodePoint(text, &pos);
}

inline void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// JavaScript's String.prototype.trim whitespace: WhiteSpace (incl. U+FEFF
// and every Zs) and LineTerminator. This is what the reference strips for an
// added token's lstrip/rstrip.
inline bool IsJsTrimSpace(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
    case 0xFEFF:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

// `text` without leading (TrimStart) or trailing (TrimEnd) JS whitespace.
inline std::string_view JsTrimStart(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t next = pos;
    if (!IsJsTrimSpace(NextCodePoint(text, &next))) break;
    pos = next;
  }
  return text.substr(pos);
}

inline std::string_view JsTrimEnd(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t begin;
    if (!IsJsTrimSpace(PrevCodePoint(text, end, &begin))) break;
    end = begin;
  }
  return text.substr(0, end);
}

}  // namespace ced::tokenizer_internal
