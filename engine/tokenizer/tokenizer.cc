#include "engine/tokenizer/tokenizer.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "engine/tokenizer/utf8.h"

namespace ced {

std::string Tokenizer::Decode(absl::Span<const int> ids) const {
  std::string bytes;
  bytes.reserve(ids.size());
  for (int id : ids) bytes += TokenBytes(id);
  return ToValidUtf8(bytes);
}

absl::Status Tokenizer::ValidateIds(absl::Span<const int> ids) const {
  const int vocab = vocab_size();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", ids[i], " at index ", i, " is out of range [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ByteTokenizer>> ByteTokenizer::Create(const Options& options) {
  if (options.vocab_size < kMinVocabSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte tokenizer: vocab_size ", options.vocab_size, " is smaller than the ",
                     kMinVocabSize, " ids it needs (256 bytes, BOS, EOS)"));
  }
  return std::unique_ptr<ByteTokenizer>(new ByteTokenizer(options.vocab_size));
}

std::vector<int> ByteTokenizer::Encode(std::string_view text, bool add_bos) const {
  std::vector<int> ids;
  ids.reserve(text.size() + (add_bos ? 1 : 0));
  if (add_bos) ids.push_back(kBosId);
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::string ByteTokenizer::TokenBytes(int id) const {
  if (id < 0 || id >= kNumByteTokens) return std::string();
  return std::string(1, static_cast<char>(id));
}

std::string IncrementalDecoder::Feed(int token_id) {
  pending_ += tokenizer_->TokenBytes(token_id);
  std::string out;
  size_t consumed = AppendValidUtf8(pending_, /*at_end=*/false, &out);
  pending_.erase(0, consumed);
  return out;
}

std::string IncrementalDecoder::Flush() {
  std::string out = ToValidUtf8(pending_);
  pending_.clear();
  return out;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> CreateTokenizer(const std::string& model_dir,
                                                           int vocab_size) {
  if (!model_dir.empty()) {
    std::error_code ec;
    const std::filesystem::path dir(model_dir);
    if (!std::filesystem::is_directory(dir, ec)) {
      return absl::NotFoundError(absl::StrCat(model_dir, ": not a model directory"));
    }
    const std::filesystem::path json = dir / "tokenizer.json";
    if (std::filesystem::exists(json, ec)) {
      HfTokenizer::Options options;
      options.tokenizer_json = json.string();
      options.vocab_size = vocab_size;
      auto tokenizer = HfTokenizer::Create(options);
      if (!tokenizer.ok()) return tokenizer.status();
      return std::unique_ptr<Tokenizer>(std::move(tokenizer).value());
    }
  }
  ByteTokenizer::Options options;
  options.vocab_size = vocab_size;
  auto tokenizer = ByteTokenizer::Create(options);
  if (!tokenizer.ok()) return tokenizer.status();
  return std::unique_ptr<Tokenizer>(std::move(tokenizer).value());
}

}  // namespace ced
