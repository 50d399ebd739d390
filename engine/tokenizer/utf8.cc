#include "engine/tokenizer/utf8.h"

#include <cstdint>

namespace ced {
namespace {

// Length of the sequence a lead byte starts (0 = invalid lead) and the range
// its first continuation byte must fall in (excludes overlongs, surrogates
// and code points above U+10FFFF).
struct Lead {
  int length;
  uint8_t lo, hi;
};

Lead ClassifyLead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

size_t AppendValidUtf8(std::string_view in, bool at_end, std::string* out) {
  const size_t n = in.size();
  size_t i = 0;
  while (i < n) {
    const auto b = static_cast<uint8_t>(in[i]);
    if (b < 0x80) {
      out->push_back(static_cast<char>(b));
      ++i;
      continue;
    }
    const Lead lead = ClassifyLead(b);
    if (lead.length == 0) {
      out->append(kUtf8Replacement);
      ++i;
      continue;
    }
    // Count the continuation bytes that fit; stop at the first that does not.
    int good = 1;
    while (good < lead.length && i + good < n) {
      const auto c = static_cast<uint8_t>(in[i + good]);
      const uint8_t lo = good == 1 ? lead.lo : 0x80;
      const uint8_t hi = good == 1 ? lead.hi : 0xBF;
      if (c < lo || c > hi) break;
      ++good;
    }
    if (good == lead.length) {
      out->append(in.substr(i, good));
      i += good;
    } else if (i + good == n && !at_end) {
      return i;  // incomplete but still valid: wait for more bytes
    } else {
      out->append(kUtf8Replacement);  // one U+FFFD per maximal subpart
      i += good;
    }
  }
  return i;
}

std::string ToValidUtf8(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  AppendValidUtf8(in, /*at_end=*/true, &out);
  return out;
}

}  // namespace ced
