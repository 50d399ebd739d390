// Tokenizers: text <-> token ids, and streaming detokenization.
//
// `Tokenizer` is the interface the gateway and engine code against: the byte
// tokenizer below, or a Hugging Face tokenizer.json (hf_tokenizer.h).
// Implementations are immutable after creation and safe to share across
// threads. `IncrementalDecoder` is per stream and not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ced {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Token ids of `text`, preceded by bos_id() when `add_bos`.
  virtual std::vector<int> Encode(std::string_view text, bool add_bos) const = 0;
  // The raw bytes a token stands for (possibly part of a UTF-8 sequence);
  // empty for special tokens and ids outside [0, vocab_size()).
  virtual std::string TokenBytes(int id) const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  virtual int vocab_size() const = 0;

  // Well-formed UTF-8 text of `ids`: the concatenated token bytes with each
  // ill-formed subpart replaced by U+FFFD.
  virtual std::string Decode(absl::Span<const int> ids) const;

  // InvalidArgument naming the first id outside [0, vocab_size()) and its
  // index, e.g. "token id 300 at index 2 is out of range [0, 258)".
  absl::Status ValidateIds(absl::Span<const int> ids) const;
};

// Byte-level tokenizer: ids 0..255 are bytes, 256 is BOS, 257 is EOS. Models
// with a larger vocabulary may use it; ids 258..vocab_size-1 decode to nothing.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int kNumByteTokens = 256;
  static constexpr int kBosId = 256;
  static constexpr int kEosId = 257;
  static constexpr int kMinVocabSize = 258;

  struct Options {
    int vocab_size = kMinVocabSize;  // must be >= kMinVocabSize
  };
  static absl::StatusOr<std::unique_ptr<ByteTokenizer>> Create(const Options& options);

  std::vector<int> Encode(std::string_view text, bool add_bos) const override;
  std::string TokenBytes(int id) const override;
  int bos_id() const override { return kBosId; }
  int eos_id() const override { return kEosId; }
  int vocab_size() const override { return vocab_size_; }

 private:
  explicit ByteTokenizer(int vocab_size) : vocab_size_(vocab_size) {}
  int vocab_size_;
};

// Turns a stream of token ids into text deltas that are always complete,
// well-formed UTF-8: the bytes of an unfinished multi-byte character are held
// back until the character completes; ill-formed bytes become U+FFFD. The
// concatenation of every Feed() and the final Flush() equals
// tokenizer.Decode(all ids).
class IncrementalDecoder {
 public:
  // `tokenizer` is not owned and must outlive the decoder.
  explicit IncrementalDecoder(const Tokenizer* tokenizer) : tokenizer_(tokenizer) {}

  // Text completed by this token (may be empty).
  std::string Feed(int token_id);
  // Text still held back, as U+FFFD for an unfinished character; call once at
  // the end of the stream. The decoder is empty afterwards.
  std::string Flush();

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;  // at most 3 bytes of an unfinished character
};

// The tokenizer of the model in `model_dir`: its tokenizer.json (with the
// tokenizer_config.json beside it, if any) as an HfTokenizer whose
// vocab_size() is the model's `vocab_size`, or the byte tokenizer when the
// directory has no tokenizer.json (`model_dir` may be empty: no directory).
// NotFound when `model_dir` is given but is not a directory; InvalidArgument
// when `vocab_size` cannot hold every id of the tokenizer (the error names
// both) or a file is malformed; Unimplemented naming the file and the JSON
// path of a component that is not supported.
absl::StatusOr<std::unique_ptr<Tokenizer>> CreateTokenizer(const std::string& model_dir,
                                                           int vocab_size);

}  // namespace ced
