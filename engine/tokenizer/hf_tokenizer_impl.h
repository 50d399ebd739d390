// The parts of an HfTokenizer, shared by hf_tokenizer.cc (encoding) and
// hf_tokenizer_load.cc (reading the JSON). Internal to ced_tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/tokenizer/added_tokens.h"
#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/pre_tokenizer.h"

namespace ced {

struct HfTokenizer::Impl {
  std::unique_ptr<tokenizer_internal::Normalizer> normalizer;  // may be null
  tokenizer_internal::PreTokenizerPipeline pre_tokenizer;
  std::unique_ptr<tokenizer_internal::BpeModel> model;

  std::vector<tokenizer_internal::AddedToken> added;
  // Content (and normalized content) -> index in `added`.
  absl::flat_hash_map<std::string, int> added_by_content;
  absl::flat_hash_map<int, int> added_by_id;  // id -> index in `added`
  size_t max_added_bytes = 0;
  std::unique_ptr<tokenizer_internal::WordSplitter> split_unnormalized;
  std::unique_ptr<tokenizer_internal::WordSplitter> split_normalized;

  enum class Kind : uint8_t { kNone, kModel, kAdded, kSpecial };
  std::vector<Kind> kind;  // by id, up to token_id_end

  std::vector<int> prefix_ids;  // added by Encode(add_bos=true)
  std::vector<int> suffix_ids;
  int bos_id = -1;
  int eos_id = -1;
  int vocab_size = 0;
};

}  // namespace ced
