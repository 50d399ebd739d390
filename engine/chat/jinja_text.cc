#include "engine/chat/jinja_text.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace ced::jinja {

char32_t DecodeUtf8(std::string_view s, size_t* pos) {
  const auto b0 = static_cast<unsigned char>(s[*pos]);
  int len = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
  if (len == 1) {
    ++*pos;
    return b0;
  }
  if (len == 0 || *pos + len > s.size()) {
    ++*pos;
    return 0xDC00 + b0;  // a lone byte, like Python's surrogateescape
  }
  char32_t cp = b0 & (0x7F >> len);
  for (int i = 1; i < len; ++i) {
    const auto b = static_cast<unsigned char>(s[*pos + i]);
    if ((b & 0xC0) != 0x80) {
      ++*pos;
      return 0xDC00 + b0;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  *pos += len;
  return cp;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) {  // an undecodable byte, restored as is
    out->push_back(static_cast<char>(cp - 0xDC00));
  } else if (cp < 0x80) {
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

std::vector<char32_t> ToCodePoints(std::string_view s) {
  std::vector<char32_t> cps;
  cps.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) cps.push_back(DecodeUtf8(s, &pos));
  return cps;
}

std::string FromCodePoints(const std::vector<char32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) AppendUtf8(cps[i], &out);
  return out;
}

size_t CodePointLength(std::string_view s) {
  size_t n = 0;
  for (size_t pos = 0; pos < s.size(); ++n) DecodeUtf8(s, &pos);
  return n;
}

bool IsPySpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right) {
  const std::vector<char32_t> cps = ToCodePoints(s);
  std::vector<char32_t> set;
  if (chars != nullptr) set = ToCodePoints(*chars);
  auto strip = [&](char32_t c) {
    if (chars == nullptr) return IsPySpace(c);
    for (char32_t x : set) {
      if (x == c) return true;
    }
    return false;
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip(cps[e - 1])) --e;
  }
  return FromCodePoints(cps, b, e);
}

std::vector<std::string> PySplit(std::string_view s, const std::string* sep, int64_t maxsplit,
                                 bool from_right) {
  std::vector<std::string> parts;
  if (sep != nullptr) {
    if (!from_right) {
      size_t start = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t hit = s.find(*sep, start);
        if (hit == std::string_view::npos) break;
        parts.emplace_back(s.substr(start, hit - start));
        start = hit + sep->size();
      }
      parts.emplace_back(s.substr(start));
      return parts;
    }
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      parts.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    parts.emplace_back(s.substr(0, end));
    return std::vector<std::string>(parts.rbegin(), parts.rend());
  }
  // Whitespace runs; leading/trailing whitespace yields no empty parts.
  const std::vector<char32_t> cps = ToCodePoints(s);
  if (from_right) {
    std::vector<std::string> rev;
    size_t e = cps.size();
    while (true) {
      while (e > 0 && IsPySpace(cps[e - 1])) --e;
      if (e == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(rev.size()) == maxsplit) {
        rev.push_back(FromCodePoints(cps, 0, e));
        break;
      }
      size_t b = e;
      while (b > 0 && !IsPySpace(cps[b - 1])) --b;
      rev.push_back(FromCodePoints(cps, b, e));
      e = b;
    }
    return std::vector<std::string>(rev.rbegin(), rev.rend());
  }
  size_t b = 0;
  while (true) {
    while (b < cps.size() && IsPySpace(cps[b])) ++b;
    if (b == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      size_t e = cps.size();
      while (e > b && IsPySpace(cps[e - 1])) --e;
      parts.push_back(FromCodePoints(cps, b, e));
      break;
    }
    size_t e = b;
    while (e < cps.size() && !IsPySpace(cps[e])) ++e;
    parts.push_back(FromCodePoints(cps, b, e));
    b = e;
  }
  return parts;
}

std::string PyReplace(std::string_view s, std::string_view from, std::string_view to,
                      int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every code point
    size_t pos = 0;
    int64_t n = 0;
    while (true) {
      if (count < 0 || n < count) {
        out.append(to);
        ++n;
      }
      if (pos >= s.size()) break;
      size_t next = pos;
      DecodeUtf8(s, &next);
      out.append(s.substr(pos, next - pos));
      pos = next;
    }
    return out;
  }
  size_t start = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    size_t hit = s.find(from, start);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(start, hit - start));
    out.append(to);
    start = hit + from.size();
  }
  out.append(s.substr(start));
  return out;
}

namespace {
bool IsPrintable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c >= 0xDC80 && c <= 0xDCFF) return false;
  if (c == 0x1680 || c == 0x180E || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) ||
      (c >= 0xE000 && c <= 0xF8FF)) {
    return false;
  }
  return true;
}

char32_t MapCase(char32_t c, bool upper) {
  if (upper) {
    if (c >= 'a' && c <= 'z') return c - 32;
    if ((c >= 0xE0 && c <= 0xFE && c != 0xF7) || (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) ||
        (c >= 0x430 && c <= 0x44F)) {
      return c - 32;
    }
    if (c >= 0x450 && c <= 0x45F) return c - 80;
    return c;
  }
  if (c >= 'A' && c <= 'Z') return c + 32;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7) || (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) ||
      (c >= 0x410 && c <= 0x42F)) {
    return c + 32;
  }
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool IsCased(char32_t c) { return MapCase(c, true) != c || MapCase(c, false) != c; }
}  // namespace

std::string PyStrRepr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t pos = 0; pos < s.size();) {
    char32_t c = DecodeUtf8(s, &pos);
    char buf[16];
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (IsPrintable(c)) {
      AppendUtf8(c, &out);
    } else {
      if (c >= 0xDC80 && c <= 0xDCFF) {
        std::snprintf(buf, sizeof(buf), "\\udc%02x", static_cast<unsigned>(c - 0xDC00));
      } else if (c < 0x100) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      } else if (c < 0x10000) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      }
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

std::string PyFloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+02"
  const size_t e_pos = sci.find('e');
  const int exp = std::atoi(sci.c_str() + e_pos + 1);
  std::string mant = sci.substr(0, e_pos);
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits.push_back(c);
  }
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + eb;
  }
  if (exp < 0) {
    return out + "0." + std::string(-exp - 1, '0') + digits;
  }
  if (static_cast<int>(digits.size()) <= exp + 1) {
    return out + digits + std::string(exp + 1 - digits.size(), '0') + ".0";
  }
  return out + digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
}

std::string PyLower(std::string_view s) {
  std::string out;
  for (size_t pos = 0; pos < s.size();) AppendUtf8(MapCase(DecodeUtf8(s, &pos), false), &out);
  return out;
}

std::string PyUpper(std::string_view s) {
  std::string out;
  for (size_t pos = 0; pos < s.size();) AppendUtf8(MapCase(DecodeUtf8(s, &pos), true), &out);
  return out;
}

std::string PyTitle(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (size_t pos = 0; pos < s.size();) {
    char32_t c = DecodeUtf8(s, &pos);
    const bool cased = IsCased(c);
    AppendUtf8(cased ? MapCase(c, !prev_cased) : c, &out);
    prev_cased = cased;
  }
  return out;
}

std::string PyCapitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (size_t pos = 0; pos < s.size();) {
    AppendUtf8(MapCase(DecodeUtf8(s, &pos), first), &out);
    first = false;
  }
  return out;
}

}  // namespace ced::jinja
