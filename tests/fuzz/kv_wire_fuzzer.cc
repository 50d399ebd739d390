// libFuzzer harness for what a decode worker parses off the KV data plane
// before any byte lands: the fixed 64-byte message header (DecodeHeader,
// ValidateHeader) and the sequence tail checked against the worker's model
// config (DecodeTail). Input layout:
//   byte 0      bit 0: repair the header checksum (so the fuzzer gets past
//               the CRC to the field checks); bits 1-2: which tiny config
//   bytes 1-64  a KV message header
//   the rest    a sequence tail payload
// Accepted headers must re-encode to the same bytes; accepted tails must have
// exactly the section sizes the config implies and re-encode to their input.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/kv/sequence_state.h"
#include "engine/model/config.h"
#include "services/kv_transport/checksum.h"
#include "services/kv_transport/wire.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

namespace kvt = ced::kv_transport;

constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 20;
constexpr size_t kChecksummedBytes = 60;
constexpr size_t kTailHeaderBytes = 32;

// Four small configs covering encoder-decoder / decoder-only, no local
// branch, and every KV format.
const char* const kConfigs[] = {
    R"({"vocab_size": 300, "hidden_size": 16, "num_layers": 4, "num_heads": 2,
        "num_kv_heads": 1, "head_dim": 8, "intermediate_size": 32,
        "num_encoder_layers": 2, "sliding_window": 4, "max_position": 64})",
    R"({"vocab_size": 260, "hidden_size": 8, "num_layers": 2, "num_heads": 2,
        "num_kv_heads": 2, "head_dim": 4, "intermediate_size": 16,
        "num_encoder_layers": 2, "sliding_window": 0, "max_position": 32,
        "kv_cache_dtype": "bf16"})",
    R"({"vocab_size": 258, "hidden_size": 32, "num_layers": 3, "num_heads": 4,
        "num_kv_heads": 2, "head_dim": 8, "intermediate_size": 64,
        "num_encoder_layers": 1, "sliding_window": 8, "replay_window": 12,
        "max_position": 128, "kv_cache_dtype": "fp4_e2m1"})",
    R"({"vocab_size": 512, "hidden_size": 8, "num_layers": 2, "num_heads": 1,
        "num_kv_heads": 1, "head_dim": 2, "intermediate_size": 8,
        "num_encoder_layers": 1, "sliding_window": 2, "max_position": 16,
        "kv_cache_dtype": "fp8_e4m3"})",
};

const std::vector<ced::ModelConfig>& Configs() {
  static const auto* configs = [] {
    auto* out = new std::vector<ced::ModelConfig>();
    for (const char* json : kConfigs) {
      auto config = ced::ParseConfigJson(json, "fuzz config");
      FUZZ_CHECK(config.ok());
      out->push_back(*config);
    }
    return out;
  }();
  return *configs;
}

void FuzzHeader(const uint8_t* data, bool repair_checksum) {
  kvt::KvHeaderBytes bytes;
  std::memcpy(bytes.data(), data, kvt::kKvHeaderBytes);
  if (repair_checksum) {
    const uint32_t crc = kvt::Crc32c(0, bytes.data(), kChecksummedBytes);
    for (int i = 0; i < 4; ++i) bytes[kChecksummedBytes + i] = static_cast<uint8_t>(crc >> (8 * i));
  }
  auto header = kvt::DecodeHeader(absl::MakeConstSpan(bytes.data(), bytes.size()),
                                  kMaxPayloadBytes);
  if (!header.ok()) {
    FUZZ_CHECK(header.status().code() == absl::StatusCode::kInvalidArgument ||
               header.status().code() == absl::StatusCode::kDataLoss);
    return;
  }
  FUZZ_CHECK(kvt::ValidateHeader(*header, kMaxPayloadBytes).ok());
  FUZZ_CHECK(header->token_begin <= header->token_end);
  FUZZ_CHECK(header->payload_bytes <= kMaxPayloadBytes);
  FUZZ_CHECK(kvt::EncodeHeader(*header) == bytes);
}

void FuzzTail(absl::Span<const uint8_t> bytes, const ced::ModelConfig& config) {
  auto tail = ced::DecodeTail(bytes, config);
  if (!tail.ok()) {
    FUZZ_CHECK(tail.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  const ced::TailDescriptor& d = tail->desc;
  FUZZ_CHECK(d.format == config.kv_cache_dtype);
  FUZZ_CHECK(d.num_tokens >= 1 && d.num_tokens <= config.max_position);
  FUZZ_CHECK(d.replay_start >= 0 && d.replay_start < d.num_tokens);
  FUZZ_CHECK(tail->enc_local.size() == ced::EncLocalBytes(config, d));
  FUZZ_CHECK(tail->dec_local.size() == ced::DecLocalBytes(config, d));
  FUZZ_CHECK(tail->h_e.size() * sizeof(float) == ced::HeBytes(config, d));
  FUZZ_CHECK(tail->first_logprobs.size() <= static_cast<size_t>(ced::kMaxTailLogprobs));
  FUZZ_CHECK(tail->first_logprobs.empty() || d.replay_done);
  for (const auto& [token, logprob] : tail->first_logprobs) {
    FUZZ_CHECK(token >= 0 && token < config.vocab_size);
    FUZZ_CHECK(logprob <= 0.0f);
  }
  // Every byte is read: encoding it again gives the same bytes.
  const std::vector<uint8_t> again = ced::EncodeTail(*tail);
  FUZZ_CHECK(again.size() == bytes.size());
  FUZZ_CHECK(std::memcmp(again.data(), bytes.data(), bytes.size()) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const ced::ModelConfig& config = Configs()[(mode >> 1) & 3];
  ++data;
  --size;
  if (size < kvt::kKvHeaderBytes) {
    // Too short for a header: DecodeHeader must still reject it cleanly.
    auto header = kvt::DecodeHeader(absl::MakeConstSpan(data, size), kMaxPayloadBytes);
    FUZZ_CHECK(!header.ok());
    FuzzTail(absl::MakeConstSpan(data, size), config);
    return 0;
  }
  FuzzHeader(data, (mode & 1) != 0);
  FuzzTail(absl::MakeConstSpan(data + kvt::kKvHeaderBytes, size - kvt::kKvHeaderBytes), config);
  return 0;
}
