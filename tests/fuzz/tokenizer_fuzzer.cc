// libFuzzer harness for the tokenizer: Encode, Decode, ValidateIds and the
// streaming IncrementalDecoder over the byte tokenizer. Input layout:
//   bytes 0-1   vocabulary size above the minimum (little-endian, mod 1024)
//   byte 2      bit 0: add BOS when encoding
//   the rest    both the text to encode and, read as little-endian int16s,
//               token ids to decode (some out of range on purpose)
// Checked: text round-trips up to U+FFFD replacement; Decode is well-formed
// UTF-8; streaming deltas concatenate to Decode; ValidateIds accepts exactly
// the ids inside the vocabulary.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

bool IsUtf8(const std::string& s) { return ced::ToValidUtf8(s) == s; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  ced::ByteTokenizer::Options options;
  options.vocab_size = ced::ByteTokenizer::kMinVocabSize + ((data[0] | data[1] << 8) % 1024);
  auto created = ced::ByteTokenizer::Create(options);
  FUZZ_CHECK(created.ok());
  const ced::Tokenizer& tokenizer = **created;
  const bool add_bos = (data[2] & 1) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 3), size - 3);

  // Text -> ids -> text.
  const std::vector<int> encoded = tokenizer.Encode(text, add_bos);
  FUZZ_CHECK(encoded.size() == text.size() + (add_bos ? 1 : 0));
  FUZZ_CHECK(tokenizer.ValidateIds(encoded).ok());
  FUZZ_CHECK(tokenizer.Decode(encoded) == ced::ToValidUtf8(text));

  // Arbitrary ids -> text, whole and streamed.
  std::vector<int> ids;
  bool all_valid = true;
  for (size_t i = 0; i + 1 < text.size(); i += 2) {
    const int id = static_cast<int16_t>(static_cast<uint8_t>(text[i]) |
                                        static_cast<uint8_t>(text[i + 1]) << 8);
    ids.push_back(id);
    all_valid = all_valid && id >= 0 && id < tokenizer.vocab_size();
  }
  FUZZ_CHECK(tokenizer.ValidateIds(ids).ok() == all_valid);
  const std::string decoded = tokenizer.Decode(ids);
  FUZZ_CHECK(IsUtf8(decoded));
  ced::IncrementalDecoder stream(&tokenizer);
  std::string streamed;
  for (int id : ids) {
    const std::string delta = stream.Feed(id);
    FUZZ_CHECK(IsUtf8(delta));
    streamed += delta;
  }
  const std::string rest = stream.Flush();
  FUZZ_CHECK(IsUtf8(rest));
  streamed += rest;
  FUZZ_CHECK(streamed == decoded);
  FUZZ_CHECK(stream.Flush().empty());

  // The low-level streaming primitive holds back at most an unfinished character.
  std::string out;
  const size_t consumed = ced::AppendValidUtf8(text, /*at_end=*/false, &out);
  FUZZ_CHECK(consumed <= text.size() && text.size() - consumed <= 3);
  FUZZ_CHECK(IsUtf8(out));
  return 0;
}
