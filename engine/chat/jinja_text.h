// Python str semantics on UTF-8 text, for the Jinja engine: code-point
// length and indexing, whitespace (str.isspace), strip/split, repr. Invalid
// UTF-8 bytes count as one code point each (U+FFFD-like), never crash.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ced::jinja {

// Decodes the code point at `s[*pos]` and advances `*pos` (by 1 on invalid bytes).
char32_t DecodeUtf8(std::string_view s, size_t* pos);
void AppendUtf8(char32_t cp, std::string* out);
std::vector<char32_t> ToCodePoints(std::string_view s);
std::string FromCodePoints(const std::vector<char32_t>& cps, size_t begin, size_t end);
size_t CodePointLength(std::string_view s);

// Python's str.isspace() for one code point (also what `\s` matches in re).
bool IsPySpace(char32_t cp);

// str.strip / lstrip / rstrip: `chars` null strips whitespace, else any code point in it.
std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split(sep, maxsplit) / rsplit; `sep` null splits on whitespace runs.
std::vector<std::string> PySplit(std::string_view s, const std::string* sep, int64_t maxsplit,
                                 bool from_right);
// str.replace(old, new, count); count < 0: all.
std::string PyReplace(std::string_view s, std::string_view from, std::string_view to,
                      int64_t count);
// Python's repr() of a str (quotes chosen as Python does).
std::string PyStrRepr(std::string_view s);
// Python's repr() of a float (shortest round trip, "1e+16", "0.1", "2.0", "inf", "nan").
std::string PyFloatRepr(double d);
// str.lower / upper / title / capitalize (ASCII and Latin-1/Greek/Cyrillic basics).
std::string PyLower(std::string_view s);
std::string PyUpper(std::string_view s);
std::string PyTitle(std::string_view s);
std::string PyCapitalize(std::string_view s);

}  // namespace ced::jinja
