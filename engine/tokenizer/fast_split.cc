#include "engine/tokenizer/fast_split.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "engine/tokenizer/onig_regex.h"
#include "engine/tokenizer/utf8_scan.h"

namespace ced::tokenizer_internal {
namespace {

// Character classes, as bits.
constexpr uint8_t kL = 1;       // \p{L}
constexpr uint8_t kN = 2;       // \p{N}
constexpr uint8_t kM = 4;       // \p{M}
constexpr uint8_t kP = 8;       // \p{P}
constexpr uint8_t kS = 16;      // \p{S}
constexpr uint8_t kSpace = 32;  // \s
constexpr uint8_t kCrLf = 64;   // \r or \n
constexpr uint8_t kKnown = 128;
constexpr char32_t kMaxCodePoint = 0x10FFFF;

// Oniguruma's answer for each class, asked once per code point (thread-safe:
// racing threads compute and store the same byte).
class ClassTable {
 public:
  static const ClassTable& Get() {
    static const ClassTable* table = new ClassTable();
    return *table;
  }

  uint8_t Classes(char32_t cp) const {
    if (cp < 128) return ascii_[cp];
    uint8_t bits = table_[cp].load(std::memory_order_relaxed);
    if (bits == 0) {
      bits = Probe(cp);
      table_[cp].store(bits, std::memory_order_relaxed);
    }
    return bits;
  }

 private:
  ClassTable() : table_(new std::atomic<uint8_t>[kMaxCodePoint + 1]()) {
    const char* patterns[] = {"\\p{L}", "\\p{N}", "\\p{M}", "\\p{P}", "\\p{S}", "\\s"};
    for (int i = 0; i < 6; ++i) {
      auto regex = OnigRegex::Create(patterns[i], "class probe");
      if (!regex.ok()) std::abort();  // constant patterns: cannot fail
      probes_[i] = std::move(regex).value();
    }
    for (char32_t cp = 0; cp < 128; ++cp) ascii_[cp] = Probe(cp);
  }

  uint8_t Probe(char32_t cp) const {
    std::string utf8;
    AppendUtf8(cp, &utf8);
    uint8_t bits = kKnown;
    for (int i = 0; i < 6; ++i) {
      if (probes_[i]->MatchesWhole(utf8)) bits |= static_cast<uint8_t>(1u << i);
    }
    if (cp == '\r' || cp == '\n') bits |= kCrLf;
    return bits;
  }

  std::unique_ptr<OnigRegex> probes_[6];
  uint8_t ascii_[128];
  std::unique_ptr<std::atomic<uint8_t>[]> table_;
};

// One character of the text: its code point, classes and UTF-8 length; past
// the end, classes 0 and length 0.
struct Char {
  char32_t cp;
  uint8_t bits;
  uint8_t len;
};

class Scanner {
 public:
  explicit Scanner(std::string_view text) : text_(text), classes_(ClassTable::Get()) {}

  size_t size() const { return text_.size(); }

  Char At(size_t pos) const {
    if (pos >= text_.size()) return {0, 0, 0};
    const auto b0 = static_cast<unsigned char>(text_[pos]);
    if (b0 < 0x80) return {b0, classes_.Classes(b0), 1};
    size_t next = pos;
    const char32_t cp = NextCodePoint(text_, &next);
    return {cp, classes_.Classes(cp), static_cast<uint8_t>(next - pos)};
  }

  // End of the run of characters having any of `bits`, from `pos`.
  size_t RunEnd(size_t pos, uint8_t bits) const {
    for (;;) {
      const Char c = At(pos);
      if ((c.bits & bits) == 0) return pos;
      pos += c.len;
    }
  }

  // End of a match of \s*[\r\n]+|\s+(?!\S)|\s+ starting at `pos` (a \s).
  size_t SpaceMatchEnd(size_t pos) const {
    size_t last_crlf_end = 0, last_start = pos;
    int count = 0;
    for (;;) {
      const Char c = At(pos);
      if ((c.bits & kSpace) == 0) break;
      if (c.bits & kCrLf) last_crlf_end = pos + c.len;
      last_start = pos;
      pos += c.len;
      ++count;
    }
    if (last_crlf_end != 0) return last_crlf_end;      // \s*[\r\n]+
    if (pos == text_.size() || count < 2) return pos;  // \s+(?!\S) at the end, or \s+
    return last_start;                                 // \s+(?!\S), one back
  }

 private:
  std::string_view text_;
  const ClassTable& classes_;
};

bool IsAsciiLetter(char32_t cp) { return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z'; }
char32_t AsciiLower(char32_t cp) { return cp < 128 && IsAsciiLetter(cp) ? (cp | 0x20) : cp; }

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+   (Qwen2; Llama-3 with 3)
class Qwen2Splitter final : public FastSplitter {
 public:
  explicit Qwen2Splitter(int max_digits) : max_digits_(max_digits) {}

  void Matches(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const override {
    const Scanner s(text);
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t end = MatchAt(s, pos);
      out->emplace_back(pos, end);  // every character starts a match here
      pos = end;
    }
  }

 private:
  size_t MatchAt(const Scanner& s, size_t p) const {
    const Char c0 = s.At(p);
    if (c0.cp == '\'') {
      const Char c1 = s.At(p + 1);
      const char32_t l1 = AsciiLower(c1.cp);
      if (l1 == 's' || l1 == 't' || l1 == 'm' || l1 == 'd') return p + 2;
      if (l1 == 'r' || l1 == 'v' || l1 == 'l') {
        const char32_t l2 = AsciiLower(s.At(p + 2).cp);
        if (l2 == (l1 == 'l' ? 'l' : 'e')) return p + 3;
      }
    }
    if ((c0.bits & (kCrLf | kL | kN)) == 0) {
      if (s.At(p + c0.len).bits & kL) return s.RunEnd(p + c0.len, kL);
    } else if (c0.bits & kL) {
      return s.RunEnd(p, kL);
    }
    if (c0.bits & kN) {
      size_t end = p + c0.len;
      for (int i = 1; i < max_digits_; ++i) {
        const Char c = s.At(end);
        if ((c.bits & kN) == 0) break;
        end += c.len;
      }
      return end;
    }
    constexpr uint8_t kOther = kSpace | kL | kN;  // [^\s\p{L}\p{N}] is "none of these"
    size_t q = p;
    if (c0.cp == ' ') {
      const Char c1 = s.At(p + 1);
      if (c1.len != 0 && (c1.bits & kOther) == 0) q = p + 1;
    }
    const Char cq = s.At(q);
    if (cq.len != 0 && (cq.bits & kOther) == 0) {
      size_t end = q + cq.len;
      for (;;) {
        const Char c = s.At(end);
        if (c.len == 0 || (c.bits & kOther) != 0) break;
        end += c.len;
      }
      return s.RunEnd(end, kCrLf);
    }
    return s.SpaceMatchEnd(p);  // c0 is \s: every other class is handled above
  }

  int max_digits_;
};

bool IsAsciiPunct(char32_t cp) {
  return (cp >= '!' && cp <= '/') || (cp >= ':' && cp <= '@') || (cp >= '[' && cp <= '`') ||
         (cp >= '{' && cp <= '~');
}

// [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|
// ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+   (DeepSeek-V3)
class DeepSeekSplitter final : public FastSplitter {
 public:
  void Matches(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const override {
    const Scanner s(text);
    size_t pos = 0;
    while (pos < text.size()) {
      size_t len = 0;
      const size_t end = MatchAt(s, pos, &len);
      if (end == 0) {  // no match here: try at the next character
        pos += len;
        continue;
      }
      out->emplace_back(pos, end);
      pos = end;
    }
  }

 private:
  // End of the match at `p`, or 0 when none starts there (`*len` is then the
  // length of the character at `p`).
  static size_t MatchAt(const Scanner& s, size_t p, size_t* len) {
    const Char c0 = s.At(p);
    *len = c0.len;
    const Char c1 = s.At(p + c0.len);
    if (IsAsciiPunct(c0.cp) && c1.cp < 128 && IsAsciiLetter(c1.cp)) {
      size_t end = p + 2;
      while (end < s.size()) {
        const Char c = s.At(end);
        if (!(c.cp < 128 && IsAsciiLetter(c.cp))) break;
        ++end;
      }
      return end;
    }
    if ((c0.bits & (kCrLf | kL | kP | kS)) == 0 && (c1.bits & (kL | kM))) {
      return s.RunEnd(p + c0.len, kL | kM);
    }
    if (c0.bits & (kL | kM)) return s.RunEnd(p, kL | kM);
    size_t q = p;
    if (c0.cp == ' ' && (c1.bits & (kP | kS))) q = p + 1;
    if (s.At(q).bits & (kP | kS)) return s.RunEnd(s.RunEnd(q, kP | kS), kCrLf);
    if (c0.bits & kSpace) return s.SpaceMatchEnd(p);
    return 0;
  }
};

// \p{N}{1,3}
class Digits3Splitter final : public FastSplitter {
 public:
  void Matches(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const override {
    const Scanner s(text);
    size_t pos = 0;
    while (pos < text.size()) {
      const Char c0 = s.At(pos);
      if ((c0.bits & kN) == 0) {
        pos += c0.len;
        continue;
      }
      size_t end = pos + c0.len;
      for (int i = 1; i < 3; ++i) {
        const Char c = s.At(end);
        if ((c.bits & kN) == 0) break;
        end += c.len;
      }
      out->emplace_back(pos, end);
      pos = end;
    }
  }
};

// [\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+
class CjkRunSplitter final : public FastSplitter {
 public:
  void Matches(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const override {
    size_t pos = 0, run_start = 0;
    bool in_run = false;
    while (pos < text.size()) {
      const size_t start = pos;
      const char32_t cp = static_cast<unsigned char>(text[pos]) < 0x80
                              ? static_cast<unsigned char>(text[pos++])
                              : NextCodePoint(text, &pos);
      const bool cjk = (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x30FF);
      if (cjk && !in_run) run_start = start;
      if (!cjk && in_run) out->emplace_back(run_start, start);
      in_run = cjk;
    }
    if (in_run) out->emplace_back(run_start, text.size());
  }
};

// The pattern with literal CR and LF written as \r and \n (the same regex).
std::string EscapeCrLf(std::string_view pattern) {
  std::string out;
  for (const char c : pattern) {
    if (c == '\r') {
      out += "\\r";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

constexpr const char* kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kDeepSeekPattern =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}"
    "\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kDigits3Pattern = "\\p{N}{1,3}";
// The CJK ranges, written with the characters themselves (as in DeepSeek-V3).
constexpr const char* kCjkPattern =
    "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+";

}  // namespace

std::unique_ptr<FastSplitter> CreateFastSplitter(std::string_view pattern) {
  const std::string p = EscapeCrLf(pattern);
  if (p == kQwen2Pattern) return std::make_unique<Qwen2Splitter>(1);
  if (p == kLlama3Pattern) return std::make_unique<Qwen2Splitter>(3);
  if (p == kDeepSeekPattern) return std::make_unique<DeepSeekSplitter>();
  if (p == kDigits3Pattern) return std::make_unique<Digits3Splitter>();
  if (p == kCjkPattern) return std::make_unique<CjkRunSplitter>();
  return nullptr;
}

}  // namespace ced::tokenizer_internal
