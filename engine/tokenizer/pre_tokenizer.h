// tokenizer.json pre-tokenizers: Split (Regex run by Oniguruma, or by the
// equivalent hand-written matcher of fast_split.h for known patterns; or String;
// every `behavior`, `invert`), Digits, Sequence, and ByteLevel, which must
// come last: the model then sees each piece as raw bytes.
//
// Semantics follow the reference (@huggingface/tokenizers 0.2.0) where it
// implements them and Hugging Face's Rust tokenizers where it does not:
//  - Split Isolated and Removed (invert false) split exactly as the reference.
//  - MergedWithPrevious, MergedWithNext, Contiguous and `invert: true` follow
//    the Rust library (the reference treats the first three as Isolated, and
//    `invert` as "keep only the matches", which equals invert + Removed here).
//  - Empty regex matches are dropped (as the reference does).
//  - ByteLevel's built-in GPT-2 regex (use_regex) uses JavaScript's \s (which
//    has U+FEFF and lacks U+0085), as the reference does.
//  - Digits splits on ASCII digits (the reference's \d), not every Nd.
// Internal to ced_tokenizer. Immutable after creation; thread-safe.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace ced::tokenizer_internal {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Appends the non-empty pieces of `piece` to `out`. Pieces are views of
  // `piece` or of strings this call adds to `*arena` (kept until the caller
  // clears it).
  virtual void Split(std::string_view piece, std::deque<std::string>* arena,
                     std::vector<std::string_view>* out) const = 0;
};

struct PreTokenizerPipeline {
  std::vector<std::unique_ptr<PreTokenizer>> steps;  // applied in order
  bool byte_level = false;  // ends with ByteLevel (required by the tokenizer)
};

// The pipeline for the "pre_tokenizer" object of tokenizer.json (`where`
// names it in errors); JSON null gives no steps. Unimplemented naming the
// type for unsupported pre-tokenizers (Whitespace, Metaspace, BertPreTokenizer,
// Punctuation, ...) and for anything after a ByteLevel.
absl::StatusOr<PreTokenizerPipeline> CreatePreTokenizer(const nlohmann::json& config,
                                                        const std::string& where);

}  // namespace ced::tokenizer_internal
