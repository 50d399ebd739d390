#include "engine/chat/jinja_lexer.h"

#include <cerrno>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/chat/jinja_text.h"

namespace ced::jinja {
namespace {

absl::Status LexError(int line, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", std::string(what)));
}

int CountNewlines(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// Length of the run of Python whitespace starting at `pos`.
size_t SpaceRun(std::string_view s, size_t pos) {
  size_t p = pos;
  while (p < s.size()) {
    size_t next = p;
    if (!IsPySpace(DecodeUtf8(s, &next))) break;
    p = next;
  }
  return p - pos;
}

std::string RStripSpace(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {  // step back over whole code points
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t p = start;
    if (!IsPySpace(DecodeUtf8(s, &p)) || p != end) break;
    end = start;
  }
  return std::string(s.substr(0, end));
}

bool IsIdentStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsHex(char c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Python's unicode-escape decoding of a string literal body.
absl::StatusOr<std::string> Unescape(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out.push_back(body[i]);
      continue;
    }
    const char c = body[++i];
    switch (c) {
      case '\n':
        break;
      case '\\':
        out.push_back('\\');
        break;
      case '\'':
        out.push_back('\'');
        break;
      case '"':
        out.push_back('"');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        if (i + n >= body.size()) {
          return LexError(line, absl::StrCat("truncated \\", std::string(1, c), " escape"));
        }
        for (size_t k = 1; k <= n; ++k) {
          if (!IsHex(body[i + k])) {
            return LexError(line, absl::StrCat("truncated \\", std::string(1, c), " escape"));
          }
        }
        const unsigned long cp =
            std::strtoul(std::string(body.substr(i + 1, n)).c_str(), nullptr, 16);
        if (cp > 0x10FFFF) return LexError(line, "illegal Unicode character in string");
        AppendUtf8(static_cast<char32_t>(cp), &out);
        i += n;
        break;
      }
      case 'N':
        return LexError(line, "\\N{...} escapes are not supported");
      default:
        if (c >= '0' && c <= '7') {
          unsigned cp = 0;
          size_t k = 0;
          while (k < 3 && i + k < body.size() && body[i + k] >= '0' && body[i + k] <= '7') {
            cp = cp * 8 + (body[i + k] - '0');
            ++k;
          }
          AppendUtf8(cp, &out);
          i += k - 1;
        } else {
          out.push_back('\\');  // unknown escapes stay as written
          out.push_back(c);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  absl::StatusOr<std::vector<Token>> Run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t tag = src_.find('{', pos_);
      while (tag != std::string::npos && tag + 1 < src_.size() && src_[tag + 1] != '{' &&
             src_[tag + 1] != '%' && src_[tag + 1] != '#') {
        tag = src_.find('{', tag + 1);
      }
      if (tag == std::string::npos || tag + 1 >= src_.size()) {
        EmitData(src_.substr(pos_));
        pos_ = src_.size();
        break;
      }
      const char kind = src_[tag + 1];
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      std::string text = src_.substr(pos_, tag - pos_);
      const int text_newlines = CountNewlines(text);
      if (sign == '-') {
        text = RStripSpace(text);
      } else if (sign != '+' && kind != '{') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
            SpaceRun(text, l_pos) == text.size() - l_pos) {
          text.resize(l_pos);
        }
      }
      EmitData(text);
      line_ += text_newlines;
      pos_ = tag + 2 + (sign == '-' || sign == '+');
      absl::Status st;
      if (kind == '#') {
        st = Comment();
      } else if (kind == '%' && IsRaw()) {
        st = Raw();
      } else {
        st = Tag(kind == '%');
      }
      if (!st.ok()) return st;
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    tokens_.push_back(Token{TokenType::kEof, "", 0, 0, line_});
    return std::move(tokens_);
  }

 private:
  void EmitData(std::string text) {
    if (text.empty()) return;
    tokens_.push_back(Token{TokenType::kData, std::move(text), 0, 0, line_});
  }

  // After an end tag at `end` (index of its first char) of length `len`,
  // with sign `sign`: consume it and the whitespace/newline it trims.
  void ConsumeEnd(size_t end, size_t len, char sign, bool trim_newline) {
    line_ += CountNewlines(std::string_view(src_).substr(pos_, end - pos_));
    pos_ = end + len;
    size_t skip = 0;
    if (sign == '-') {
      skip = SpaceRun(src_, pos_);
    } else if (sign != '+' && trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      skip = 1;
    }
    line_ += CountNewlines(std::string_view(src_).substr(pos_, skip));
    pos_ += skip;
  }

  absl::Status Comment() {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) return LexError(line_, "missing end of comment tag");
    char sign = end > pos_ ? src_[end - 1] : '\0';
    if (sign != '-' && sign != '+') sign = '\0';
    ConsumeEnd(end, 2, sign, /*trim_newline=*/true);
    return absl::OkStatus();
  }

  // {% raw %} / {%- raw -%}: the text up to {% endraw %} is data.
  bool IsRaw() {
    size_t p = pos_ + SpaceRun(src_, pos_);
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    p += SpaceRun(src_, p);
    return src_.compare(p, 2, "%}") == 0 || src_.compare(p, 3, "-%}") == 0;
  }

  absl::Status Raw() {
    size_t p = src_.find("raw", pos_) + 3;
    p += SpaceRun(src_, p);
    const bool strip_after = src_[p] == '-';
    ConsumeEnd(p + strip_after, 2, strip_after ? '-' : '+', false);
    for (size_t search = pos_;;) {
      const size_t open = src_.find("{%", search);
      if (open == std::string::npos) return LexError(line_, "missing end of raw directive");
      size_t q = open + 2;
      const char sign = (src_[q] == '-' || src_[q] == '+') ? src_[q] : '\0';
      q += sign != '\0';
      q += SpaceRun(src_, q);
      if (src_.compare(q, 6, "endraw") != 0) {
        search = open + 2;
        continue;
      }
      q += 6;
      q += SpaceRun(src_, q);
      char end_sign = '\0';
      if (src_[q] == '-' || src_[q] == '+') end_sign = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) {
        search = open + 2;
        continue;
      }
      std::string text = src_.substr(pos_, open - pos_);
      const int newlines = CountNewlines(text);
      if (sign == '-') text = RStripSpace(text);
      EmitData(std::move(text));
      line_ += newlines;
      pos_ = q;
      ConsumeEnd(q, 2, end_sign, true);
      return absl::OkStatus();
    }
  }

  absl::Status Tag(bool block) {
    tokens_.push_back(
        Token{block ? TokenType::kBlockBegin : TokenType::kVarBegin, "", 0, 0, line_});
    const int start_line = line_;
    std::string brackets;
    while (true) {
      if (pos_ >= src_.size()) {
        return LexError(start_line, block ? "unterminated block tag {% ... %}"
                                          : "unterminated expression {{ ... }}");
      }
      const char c = src_[pos_];
      if (brackets.empty()) {
        const std::string_view rest = std::string_view(src_).substr(pos_);
        const char* end = block ? "%}" : "}}";
        char sign = '\0';
        size_t len = 0;
        if ((c == '-' || (block && c == '+')) && rest.substr(1, 2) == end) {
          sign = c;
          len = 3;
        } else if (rest.substr(0, 2) == end) {
          len = 2;
        }
        if (len > 0) {
          tokens_.push_back(
              Token{block ? TokenType::kBlockEnd : TokenType::kVarEnd, "", 0, 0, line_});
          ConsumeEnd(pos_, len, sign, block);
          return absl::OkStatus();
        }
      }
      const size_t space = SpaceRun(src_, pos_);
      if (space > 0) {
        line_ += CountNewlines(std::string_view(src_).substr(pos_, space));
        pos_ += space;
        continue;
      }
      if (IsDigit(c)) {
        if (absl::Status st = Number(); !st.ok()) return st;
      } else if (IsIdentStart(c)) {
        size_t e = pos_;
        while (e < src_.size() && (IsIdentStart(src_[e]) || IsDigit(src_[e]))) ++e;
        tokens_.push_back(Token{TokenType::kName, src_.substr(pos_, e - pos_), 0, 0, line_});
        pos_ = e;
      } else if (c == '\'' || c == '"') {
        size_t e = pos_ + 1;
        while (e < src_.size() && src_[e] != c) e += src_[e] == '\\' ? 2 : 1;
        if (e >= src_.size()) return LexError(line_, "unterminated string literal");
        auto value = Unescape(std::string_view(src_).substr(pos_ + 1, e - pos_ - 1), line_);
        if (!value.ok()) return value.status();
        tokens_.push_back(Token{TokenType::kString, *std::move(value), 0, 0, line_});
        line_ += CountNewlines(std::string_view(src_).substr(pos_, e - pos_));
        pos_ = e + 1;
      } else {
        static const char* kOps[] = {"**", "//", "==", "!=", ">=", "<=", "+", "-", "/",
                                     "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                     "<",  ">",  "=",  ".",  ":",  "|",  ",", ";"};
        std::string op;
        for (const char* o : kOps) {
          if (src_.compare(pos_, std::char_traits<char>::length(o), o) == 0) {
            op = o;
            break;
          }
        }
        if (op.empty()) {
          return LexError(line_, absl::StrCat("unexpected character '", std::string(1, c), "'"));
        }
        if (op == "(" || op == "[" || op == "{") {
          brackets.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        } else if (op == ")" || op == "]" || op == "}") {
          if (brackets.empty() || brackets.back() != op[0]) {
            return LexError(line_, absl::StrCat("unexpected '", op, "'"));
          }
          brackets.pop_back();
        }
        tokens_.push_back(Token{TokenType::kOp, op, 0, 0, line_});
        pos_ += op.size();
      }
    }
  }

  absl::Status Number() {
    size_t e = pos_;
    auto digits = [&](size_t p) {
      while (p < src_.size() && (IsDigit(src_[p]) ||
                                 (src_[p] == '_' && p + 1 < src_.size() && IsDigit(src_[p + 1])))) {
        ++p;
      }
      return p;
    };
    e = digits(e);
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && IsDigit(src_[e + 1])) {
      e = digits(e + 1);
      is_float = true;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t p = e + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && IsDigit(src_[p])) {
        e = digits(p);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = pos_; i < e; ++i) {
      if (src_[i] != '_') text.push_back(src_[i]);
    }
    Token t{is_float ? TokenType::kFloat : TokenType::kInt, text, 0, 0, line_};
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      t.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) return LexError(line_, "integer literal out of range");
    }
    tokens_.push_back(std::move(t));
    pos_ = e;
    return absl::OkStatus();
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source) {
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src.push_back(source[i]);
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src)).Run();
}

}  // namespace ced::jinja
