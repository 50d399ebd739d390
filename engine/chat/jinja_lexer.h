// Jinja lexer with the settings Hugging Face uses for chat templates:
// trim_blocks (a newline right after a block or comment tag is dropped),
// lstrip_blocks (spaces and tabs before a block or comment tag on its own
// line are dropped), `-`/`+` whitespace control on both sides, newlines
// normalized to "\n" and one trailing newline of the source dropped
// (keep_trailing_newline=False). Comments are dropped; {% raw %} becomes data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ced::jinja {

enum class TokenType {
  kData,        // template text (text = the text)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifier or keyword (text)
  kString,      // string literal (text = the unescaped value)
  kInt,         // int_value
  kFloat,       // float_value
  kOp,          // operator or punctuation (text, e.g. "==", "(", "|")
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;  // 1-based line of the token's start
};

// Splits `source` into tokens, ending with kEof. InvalidArgument ("line N:
// ...") for an unterminated tag, comment or string, an unexpected character,
// or unbalanced brackets.
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source);

}  // namespace ced::jinja
