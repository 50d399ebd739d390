// tokenizer.json normalizers: NFC, NFD, NFKC, NFKD (utf8proc) and Sequence.
// Internal to ced_tokenizer. Immutable after creation; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"

namespace ced::tokenizer_internal {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // The normalized form of `text` (well-formed UTF-8): either `text` itself
  // (unchanged) or a view of `*scratch`, which this call may overwrite.
  virtual std::string_view Apply(std::string_view text, std::string* scratch) const = 0;
};

// The normalizer described by `config` (the "normalizer" object of
// tokenizer.json; `where` names it in errors). nullptr for JSON null.
// Unimplemented naming the type for any other normalizer (Lowercase,
// Replace, Strip, Precompiled, BertNormalizer, ...).
absl::StatusOr<std::unique_ptr<Normalizer>> CreateNormalizer(const nlohmann::json& config,
                                                             const std::string& where);

}  // namespace ced::tokenizer_internal
