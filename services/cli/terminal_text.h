// Text for a terminal: generated text may hold control bytes (ESC, BEL, a
// carriage return...) that would drive the user's terminal. When stdout is a
// terminal the CLI prints them escaped (`\x1b`); newlines and tabs stay.
// Input is well-formed UTF-8 (the detokenizer's output); C1 controls
// (U+0080..U+009F) are escaped too.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>
#include <string_view>

namespace ced::cli {

inline std::string EscapeControls(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    unsigned code = 0x100;  // none
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      code = c;
    } else if (c == 0xc2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      code = static_cast<unsigned char>(text[++i]);
    }
    if (code == 0x100) {
      out.push_back(static_cast<char>(c));
    } else {
      out += "\\x";
      out.push_back(kHex[code >> 4]);
      out.push_back(kHex[code & 15]);
    }
  }
  return out;
}

// Writes `text` to stdout, escaped when stdout is a terminal.
inline void PrintText(std::string_view text) {
  static const bool tty = isatty(fileno(stdout)) != 0;
  const std::string shown = tty ? EscapeControls(text) : std::string(text);
  std::fwrite(shown.data(), 1, shown.size(), stdout);
}

}  // namespace ced::cli
