// UTF-8 validation with U+FFFD replacement, for streaming text out of token bytes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ced {

inline constexpr std::string_view kUtf8Replacement = "\xEF\xBF\xBD";  // U+FFFD

// Appends the well-formed UTF-8 in `in` to `out`, replacing each maximal
// ill-formed subpart (Unicode §3.9, as WHATWG decoders do) with one U+FFFD.
// When `at_end` is false, a trailing sequence that is incomplete but could
// still become valid is held back: the return value is the number of bytes of
// `in` consumed, and the caller keeps the rest for the next call. When
// `at_end` is true everything is consumed (an incomplete tail becomes U+FFFD).
size_t AppendValidUtf8(std::string_view in, bool at_end, std::string* out);

// The whole of `in` as well-formed UTF-8.
std::string ToValidUtf8(std::string_view in);

}  // namespace ced
