#include "engine/tokenizer/pre_tokenizer.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/fast_split.h"
#include "engine/tokenizer/onig_regex.h"
#include "nlohmann/json.hpp"

namespace ced::tokenizer_internal {
namespace {

using Range = std::pair<size_t, size_t>;

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// JavaScript's \s inside a character class (see pre_tokenizer.h).
constexpr const char* kJsSpaceClass =
    "\\t\\n\\x{0B}\\f\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}\\x{FEFF}";

std::string Gpt2Pattern() {
  const std::string s = absl::StrCat("[", kJsSpaceClass, "]");
  const std::string not_s = absl::StrCat("[^", kJsSpaceClass, "]");
  return absl::StrCat("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^", kJsSpaceClass,
                      "\\p{L}\\p{N}]+|", s, "+(?!", not_s, ")|", s, "+");
}

// Emits the pieces of `text` given the matched ranges, as the Rust library's
// Split does (is_match flipped by `invert`), dropping empty pieces.
void EmitParts(std::string_view text, const std::vector<Range>& matches, Behavior behavior,
               bool invert, std::vector<std::string_view>* out) {
  struct Part {
    size_t begin, end;
    bool is_match;
  };
  std::vector<Part> parts;
  parts.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (b > prev) parts.push_back({prev, b, invert});
    parts.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < text.size()) parts.push_back({prev, text.size(), invert});
  std::vector<Range> pieces;
  pieces.reserve(parts.size());
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kRemoved:
      for (const Part& p : parts) {
        if (!p.is_match) pieces.emplace_back(p.begin, p.end);
      }
      break;
    case Behavior::kIsolated:
      for (const Part& p : parts) pieces.emplace_back(p.begin, p.end);
      break;
    case Behavior::kMergedWithPrevious:
      for (const Part& p : parts) {
        if (p.is_match && !previous_match && !pieces.empty()) {
          pieces.back().second = p.end;
        } else {
          pieces.emplace_back(p.begin, p.end);
        }
        previous_match = p.is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (size_t i = parts.size(); i-- > 0;) {
        const Part& p = parts[i];
        if (p.is_match && !previous_match && !pieces.empty()) {
          pieces.back().first = p.begin;
        } else {
          pieces.emplace_back(p.begin, p.end);
        }
        previous_match = p.is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    case Behavior::kContiguous:
      for (const Part& p : parts) {
        if (p.is_match == previous_match && !pieces.empty()) {
          pieces.back().second = p.end;
        } else {
          pieces.emplace_back(p.begin, p.end);
        }
        previous_match = p.is_match;
      }
      break;
  }
  for (const auto& [b, e] : pieces) {
    if (e > b) out->push_back(text.substr(b, e - b));
  }
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<OnigRegex> regex, std::unique_ptr<FastSplitter> fast,
                    std::string literal, Behavior behavior, bool invert)
      : regex_(std::move(regex)),
        fast_(std::move(fast)),
        literal_(std::move(literal)),
        behavior_(behavior),
        invert_(invert) {}

  void Split(std::string_view piece, std::deque<std::string>* /*arena*/,
             std::vector<std::string_view>* out) const override {
    thread_local std::vector<Range> matches;
    matches.clear();
    if (fast_ != nullptr) {
      fast_->Matches(piece, &matches);
    } else if (regex_ != nullptr) {
      regex_->Matches(piece, &matches);
    } else if (!literal_.empty()) {
      for (size_t pos = piece.find(literal_); pos != std::string_view::npos;
           pos = piece.find(literal_, pos + literal_.size())) {
        matches.emplace_back(pos, pos + literal_.size());
      }
    }
    if (behavior_ == Behavior::kIsolated && !invert_) {  // the common case, without copies
      size_t prev = 0;
      for (const auto& [b, e] : matches) {
        if (b > prev) out->push_back(piece.substr(prev, b - prev));
        out->push_back(piece.substr(b, e - b));
        prev = e;
      }
      if (prev < piece.size()) out->push_back(piece.substr(prev));
      return;
    }
    EmitParts(piece, matches, behavior_, invert_, out);
  }

 private:
  std::unique_ptr<OnigRegex> regex_;  // or, when null, the literal
  std::unique_ptr<FastSplitter> fast_;  // when set, finds the same matches as regex_
  std::string literal_;
  Behavior behavior_;
  bool invert_;
};

// Runs of ASCII digits (one digit each when `individual`) and of the rest.
class DigitsPreTokenizer final : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void Split(std::string_view piece, std::deque<std::string>* /*arena*/,
             std::vector<std::string_view>* out) const override {
    size_t start = 0;
    while (start < piece.size()) {
      const bool digit = piece[start] >= '0' && piece[start] <= '9';
      size_t end = start + 1;
      if (!(digit && individual_)) {
        while (end < piece.size() && (piece[end] >= '0' && piece[end] <= '9') == digit) ++end;
      }
      out->push_back(piece.substr(start, end - start));
      start = end;
    }
  }

 private:
  bool individual_;
};

// ByteLevel's own part: add_prefix_space, then the GPT-2 regex (use_regex).
class ByteLevelSplit final : public PreTokenizer {
 public:
  ByteLevelSplit(bool add_prefix_space, std::unique_ptr<OnigRegex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  void Split(std::string_view piece, std::deque<std::string>* arena,
             std::vector<std::string_view>* out) const override {
    if (add_prefix_space_ && (piece.empty() || piece[0] != ' ')) {
      arena->push_back(std::string(" ").append(piece));
      piece = arena->back();
    }
    if (regex_ == nullptr) {
      if (!piece.empty()) out->push_back(piece);
      return;
    }
    thread_local std::vector<Range> matches;
    matches.clear();
    regex_->Matches(piece, &matches);
    for (const auto& [b, e] : matches) out->push_back(piece.substr(b, e - b));
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<OnigRegex> regex_;
};

absl::StatusOr<Behavior> ParseBehavior(const nlohmann::json& config, const std::string& where) {
  const std::string name = config.contains("behavior") && config["behavior"].is_string()
                               ? config["behavior"].get<std::string>()
                               : "";
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  return absl::InvalidArgumentError(absl::StrCat(
      where, ".behavior: \"", name,
      "\" is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous"));
}

bool BoolField(const nlohmann::json& config, const char* key, bool fallback) {
  return config.contains(key) && config[key].is_boolean() ? config[key].get<bool>() : fallback;
}

absl::Status AddStep(const nlohmann::json& config, const std::string& where,
                     PreTokenizerPipeline* pipeline) {
  if (!config.is_object() || !config.contains("type") || !config["type"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": expected an object with a \"type\""));
  }
  const std::string type = config["type"].get<std::string>();
  if (pipeline->byte_level) {
    return absl::UnimplementedError(
        absl::StrCat(where, ": a \"", type, "\" pre-tokenizer after ByteLevel is not supported"));
  }
  if (type == "Sequence") {
    const auto it = config.find("pretokenizers");
    if (it == config.end() || !it->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".pretokenizers: expected an array"));
    }
    for (size_t i = 0; i < it->size(); ++i) {
      if (absl::Status s =
              AddStep((*it)[i], absl::StrCat(where, ".pretokenizers[", i, "]"), pipeline);
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }
  if (type == "Split") {
    const auto pattern = config.find("pattern");
    auto behavior = ParseBehavior(config, where);
    if (!behavior.ok()) return behavior.status();
    const bool invert = BoolField(config, "invert", false);
    if (pattern != config.end() && pattern->is_object() && pattern->contains("Regex") &&
        (*pattern)["Regex"].is_string()) {
      auto regex = OnigRegex::Create((*pattern)["Regex"].get<std::string>(),
                                     absl::StrCat(where, ".pattern.Regex"));
      if (!regex.ok()) return regex.status();
      // CED_TOKENIZER_FAST_SPLIT=0 runs every regex with Oniguruma (for comparisons).
      const char* fast_env = std::getenv("CED_TOKENIZER_FAST_SPLIT");
      std::unique_ptr<FastSplitter> fast;
      if (fast_env == nullptr || std::strcmp(fast_env, "0") != 0) {
        fast = CreateFastSplitter((*pattern)["Regex"].get<std::string>());
      }
      pipeline->steps.push_back(std::make_unique<SplitPreTokenizer>(
          std::move(regex).value(), std::move(fast), std::string(), *behavior, invert));
      return absl::OkStatus();
    }
    if (pattern != config.end() && pattern->is_object() && pattern->contains("String") &&
        (*pattern)["String"].is_string()) {
      pipeline->steps.push_back(std::make_unique<SplitPreTokenizer>(
          nullptr, nullptr, (*pattern)["String"].get<std::string>(), *behavior, invert));
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".pattern: expected {\"Regex\": string} or {\"String\": string}"));
  }
  if (type == "Digits") {
    pipeline->steps.push_back(
        std::make_unique<DigitsPreTokenizer>(BoolField(config, "individual_digits", false)));
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    std::unique_ptr<OnigRegex> regex;
    if (BoolField(config, "use_regex", true)) {
      auto compiled = OnigRegex::Create(Gpt2Pattern(), absl::StrCat(where, " (GPT-2 regex)"));
      if (!compiled.ok()) return compiled.status();
      regex = std::move(compiled).value();
    }
    const bool add_prefix_space = BoolField(config, "add_prefix_space", false);
    if (add_prefix_space || regex != nullptr) {
      pipeline->steps.push_back(
          std::make_unique<ByteLevelSplit>(add_prefix_space, std::move(regex)));
    }
    pipeline->byte_level = true;
    return absl::OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat(where, ": pre-tokenizer type \"", type,
                   "\" is not supported (supported: ByteLevel, Split, Digits, Sequence)"));
}

}  // namespace

absl::StatusOr<PreTokenizerPipeline> CreatePreTokenizer(const nlohmann::json& config,
                                                        const std::string& where) {
  PreTokenizerPipeline pipeline;
  if (config.is_null()) return pipeline;
  if (absl::Status s = AddStep(config, where, &pipeline); !s.ok()) return s;
  return pipeline;
}

}  // namespace ced::tokenizer_internal
