// A Hugging Face tokenizer.json tokenizer (byte-level BPE: GPT-2, Llama-3,
// Qwen2/3, DeepSeek-V3 families), equal token for token to the reference
// implementation @huggingface/tokenizers 0.2.0 on the files those families ship.
//
// Supported: model BPE (vocab; merges as "a b" or [a, b]; ignore_merges;
// unk_token, fuse_unk); normalizers NFC/NFD/NFKC/NFKD/Sequence; pre-tokenizers
// Split (Regex run verbatim by Oniguruma, String; every behavior; invert),
// Digits, Sequence and a final ByteLevel; post-processors ByteLevel,
// TemplateProcessing, Sequence; decoder ByteLevel; added tokens (special or
// not, lstrip/rstrip, normalized). Anything else is refused when loading, with
// an error naming the file, the JSON path and the type (pre_tokenizer.h and
// bpe.h list the details and where the reference and the Rust library differ).
//
// Text in:
//  - Ill-formed UTF-8 in Encode's input is first replaced, each maximal
//    ill-formed subpart by one U+FFFD (what the reference sees when the bytes
//    are decoded into a JavaScript string by TextDecoder or Buffer).
//  - Added tokens are matched before normalization (those with
//    normalized=false) and after it (normalized=true), longest match first;
//    lstrip/rstrip strip JavaScript whitespace beside them; single_word is
//    not honoured (nor is it by the reference).
//  - Encode(text, add_bos=false) equals the reference's encode(text).ids
//    whenever the post-processor adds nothing. add_bos=true also adds the
//    special tokens the tokenizer asks for, like add_special_tokens in
//    transformers: BOS (and EOS) as tokenizer_config.json's add_bos_token
//    (add_eos_token) say when it has them, else those around $A in a
//    TemplateProcessing post-processor; none otherwise (Qwen adds no BOS).
// Text out:
//  - TokenBytes(id) is the raw bytes of the token (its byte-level spelling
//    undone), the content of a non-special added token, and empty for special
//    tokens (added tokens with special=true and those tokenizer_config.json
//    lists in additional_special_tokens) and for unknown ids.
//  - So Decode(ids) skips special tokens: it equals the reference's
//    decode(ids, {skip_special_tokens: true}) when clean_up_tokenization_spaces
//    is false (the files of these families say so; the clean-up is never done
//    here, since it cannot be streamed). IncrementalDecoder gives the same text
//    in deltas that never split a character.
//
// Thread-safety: immutable after Create (a word cache is internally locked);
// share one instance across threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"

namespace ced {

class HfTokenizer final : public Tokenizer {
 public:
  struct Options {
    std::string tokenizer_json;  // path of tokenizer.json
    // Path of tokenizer_config.json; empty: the one beside tokenizer_json
    // when it exists (bos/eos tokens, add_bos_token, additional_special_tokens).
    std::string tokenizer_config;
    // The model's vocabulary size, which vocab_size() reports; it must hold
    // every id of the tokenizer (InvalidArgument naming both otherwise).
    // 0: the tokenizer's own size (token_id_end()).
    int vocab_size = 0;
  };
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> Create(const Options& options);
  ~HfTokenizer() override;

  std::vector<int> Encode(std::string_view text, bool add_bos) const override;
  std::string TokenBytes(int id) const override;
  // -1 when the tokenizer names no such token.
  int bos_id() const override;
  int eos_id() const override;
  int vocab_size() const override;

  // One past the largest id of the vocabulary and added tokens.
  int token_id_end() const;
  // Whether Encode(text, /*add_bos=*/true) adds any token.
  bool adds_special_tokens() const;
  // Whether `id` is a special token (decodes to nothing).
  bool IsSpecial(int id) const;

  struct Impl;  // hf_tokenizer_impl.h

 private:
  explicit HfTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ced
