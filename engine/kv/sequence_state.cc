#include "engine/kv/sequence_state.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ced {
namespace {

constexpr uint32_t kTailMagic = 0x4c544543;  // "CETL"
constexpr uint32_t kTailVersion = 1;
constexpr size_t kHeaderBytes = 32;

void Put32(std::vector<uint8_t>* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint32_t Get32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}
size_t RowBytes(const ModelConfig& c, KvFormat f) { return kernels::KvRowBytes(f, c.KvDim()); }

}  // namespace

int EncLocalBegin(const ModelConfig& c, const TailDescriptor& d) {
  return std::max(0, d.num_tokens - c.sliding_window);
}
int DecLocalBegin(const ModelConfig& c, const TailDescriptor& d) {
  return std::max(d.replay_start, d.num_tokens - c.sliding_window);
}
size_t EncLocalBytes(const ModelConfig& c, const TailDescriptor& d) {
  if (c.sliding_window == 0) return 0;
  return static_cast<size_t>(c.num_encoder_layers) * 2 * (d.num_tokens - EncLocalBegin(c, d)) *
         RowBytes(c, d.format);
}
size_t DecLocalBytes(const ModelConfig& c, const TailDescriptor& d) {
  if (c.sliding_window == 0 || !d.replay_done || c.IsDecoderOnly()) return 0;
  return static_cast<size_t>(c.num_layers - c.num_encoder_layers) * 2 *
         (d.num_tokens - DecLocalBegin(c, d)) * RowBytes(c, d.format);
}
size_t HeBytes(const ModelConfig& c, const TailDescriptor& d) {
  if (d.replay_done || c.IsDecoderOnly()) return 0;
  return static_cast<size_t>(d.num_tokens - d.replay_start) * c.hidden_size * sizeof(float);
}

std::vector<uint8_t> EncodeTail(const SequenceTail& tail) {
  std::vector<uint8_t> out;
  out.reserve(kHeaderBytes + tail.enc_local.size() + tail.dec_local.size() +
              tail.h_e.size() * sizeof(float));
  Put32(&out, kTailMagic);
  Put32(&out, kTailVersion);
  Put32(&out, static_cast<uint32_t>(tail.desc.format));
  Put32(&out, tail.desc.replay_done ? 1 : 0);
  Put32(&out, static_cast<uint32_t>(tail.desc.num_tokens));
  Put32(&out, static_cast<uint32_t>(tail.desc.replay_start));
  Put32(&out, static_cast<uint32_t>(tail.desc.first_token));
  Put32(&out, static_cast<uint32_t>(tail.first_logprobs.size()));
  out.insert(out.end(), tail.enc_local.begin(), tail.enc_local.end());
  out.insert(out.end(), tail.dec_local.begin(), tail.dec_local.end());
  const auto* he = reinterpret_cast<const uint8_t*>(tail.h_e.data());
  out.insert(out.end(), he, he + tail.h_e.size() * sizeof(float));
  for (const auto& [token, logprob] : tail.first_logprobs) {
    uint32_t bits;
    std::memcpy(&bits, &logprob, sizeof(bits));
    Put32(&out, static_cast<uint32_t>(token));
    Put32(&out, bits);
  }
  return out;
}

absl::StatusOr<SequenceTail> DecodeTail(absl::Span<const uint8_t> bytes,
                                        const ModelConfig& config) {
  if (bytes.size() < kHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence tail: ", bytes.size(), " bytes is shorter than its header"));
  }
  const uint8_t* p = bytes.data();
  if (Get32(p) != kTailMagic) return absl::InvalidArgumentError("sequence tail: bad magic");
  if (Get32(p + 4) != kTailVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence tail: unsupported version ", Get32(p + 4)));
  }
  SequenceTail tail;
  const uint32_t format = Get32(p + 8);
  if (format >= static_cast<uint32_t>(kernels::kNumKvFormats)) {
    return absl::InvalidArgumentError(absl::StrCat("sequence tail: format ", format, " unknown"));
  }
  tail.desc.format = static_cast<KvFormat>(format);
  if (tail.desc.format != config.kv_cache_dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence tail: format ", std::string(kernels::KvFormatName(tail.desc.format)),
                     " does not match the cache format ",
                     std::string(kernels::KvFormatName(config.kv_cache_dtype))));
  }
  const uint32_t num_logprobs = Get32(p + 28);
  if (num_logprobs > static_cast<uint32_t>(kMaxTailLogprobs)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence tail: ", num_logprobs, " logprobs, at most ", kMaxTailLogprobs));
  }
  const uint32_t replay_done = Get32(p + 12);
  if (replay_done > 1) return absl::InvalidArgumentError("sequence tail: replay_done not 0/1");
  tail.desc.replay_done = replay_done == 1;
  tail.desc.num_tokens = static_cast<int32_t>(Get32(p + 16));
  tail.desc.replay_start = static_cast<int32_t>(Get32(p + 20));
  tail.desc.first_token = static_cast<int32_t>(Get32(p + 24));
  const auto& d = tail.desc;
  if (d.num_tokens <= 0 || d.num_tokens > config.max_position) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence tail: num_tokens ", d.num_tokens, " out of range"));
  }
  if (d.replay_start < 0 || d.replay_start >= d.num_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence tail: replay_start ", d.replay_start, " out of range"));
  }
  if (!d.replay_done && d.first_token != -1) {
    return absl::InvalidArgumentError("sequence tail: first_token set although the replay is pending");
  }
  if (d.replay_done && (d.first_token < 0 || d.first_token >= config.vocab_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence tail: first_token ", d.first_token, " out of range"));
  }
  if (!d.replay_done && num_logprobs != 0) {
    return absl::InvalidArgumentError("sequence tail: logprobs although the replay is pending");
  }
  const size_t enc = EncLocalBytes(config, d), dec = DecLocalBytes(config, d),
               he = HeBytes(config, d), lp = static_cast<size_t>(num_logprobs) * 8;
  if (bytes.size() != kHeaderBytes + enc + dec + he + lp) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence tail: ", bytes.size(), " bytes, expected ", kHeaderBytes + enc + dec + he + lp));
  }
  p += kHeaderBytes;
  tail.enc_local.assign(p, p + enc);
  p += enc;
  tail.dec_local.assign(p, p + dec);
  p += dec;
  tail.h_e.resize(he / sizeof(float));
  if (he > 0) std::memcpy(tail.h_e.data(), p, he);
  p += he;
  for (uint32_t i = 0; i < num_logprobs; ++i, p += 8) {
    const int32_t token = static_cast<int32_t>(Get32(p));
    const uint32_t bits = Get32(p + 4);
    float logprob;
    std::memcpy(&logprob, &bits, sizeof(logprob));
    if (token < 0 || token >= config.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence tail: logprobs[", i, "] token ", token, " out of range"));
    }
    if (!(logprob <= 0.0f && logprob >= -1e30f)) {
      return absl::InvalidArgumentError(absl::StrCat("sequence tail: logprobs[", i, "] = ", logprob,
                                                     " is not a log-probability"));
    }
    if (i == 0 && token != d.first_token) {
      return absl::InvalidArgumentError("sequence tail: logprobs[0] is not the first token's");
    }
    tail.first_logprobs.emplace_back(token, logprob);
  }
  return tail;
}

}  // namespace ced
