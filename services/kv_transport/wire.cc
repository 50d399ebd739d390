#include "services/kv_transport/wire.h"

#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "services/kv_transport/checksum.h"

namespace ced::kv_transport {
namespace {

constexpr uint8_t kMagic[4] = {'C', 'E', 'D', 'K'};
constexpr size_t kChecksummedBytes = 60;
constexpr size_t kReservedBegin = 52;

void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

absl::Status Invalid(const char* field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("kv header field '", field, "': ", why));
}

}  // namespace

bool operator==(const KvMessageHeader& a, const KvMessageHeader& b) {
  return a.kind == b.kind && a.flags == b.flags && a.request_id == b.request_id &&
         a.transfer_token == b.transfer_token && a.token_begin == b.token_begin &&
         a.token_end == b.token_end && a.layer == b.layer && a.format == b.format &&
         a.payload_bytes == b.payload_bytes && a.payload_checksum == b.payload_checksum;
}

absl::Status ValidateHeader(const KvMessageHeader& h, uint64_t max_payload_bytes) {
  const auto kind = static_cast<uint8_t>(h.kind);
  if (kind < static_cast<uint8_t>(KvMessageKind::kGlobalRange) ||
      kind > static_cast<uint8_t>(KvMessageKind::kAbort)) {
    return Invalid("kind", absl::StrCat("unknown value ", kind));
  }
  if ((h.flags & ~kKvKnownFlags) != 0) {
    return Invalid("flags", absl::StrCat("unknown bits 0x", absl::Hex(h.flags & ~kKvKnownFlags)));
  }
  if (static_cast<uint8_t>(h.format) >= kernels::kNumKvFormats) {
    return Invalid("format", absl::StrCat("unknown value ", static_cast<int>(h.format)));
  }
  if (h.token_begin > h.token_end) {
    return Invalid("token_begin",
                   absl::StrCat("range [", h.token_begin, ", ", h.token_end, ") is reversed"));
  }
  if (h.layer < -1) return Invalid("layer", absl::StrCat("negative value ", h.layer));
  if (h.payload_bytes > max_payload_bytes) {
    return Invalid("payload_bytes",
                   absl::StrCat(h.payload_bytes, " exceeds the limit of ", max_payload_bytes));
  }
  if (h.kind == KvMessageKind::kAbort && h.payload_bytes != 0) {
    return Invalid("payload_bytes", "an abort message carries no payload");
  }
  return absl::OkStatus();
}

KvHeaderBytes EncodeHeader(const KvMessageHeader& h) {
  KvHeaderBytes out{};
  uint8_t* p = out.data();
  for (int i = 0; i < 4; ++i) p[i] = kMagic[i];
  Put16(p + 4, kKvWireVersion);
  p[6] = static_cast<uint8_t>(h.kind);
  p[7] = static_cast<uint8_t>(h.format);
  Put32(p + 8, h.flags);
  Put32(p + 12, h.token_begin);
  Put32(p + 16, h.token_end);
  Put32(p + 20, static_cast<uint32_t>(h.layer));
  Put64(p + 24, h.request_id);
  Put64(p + 32, h.transfer_token);
  Put64(p + 40, h.payload_bytes);
  Put32(p + 48, h.payload_checksum);
  Put32(p + kChecksummedBytes, Crc32c(0, p, kChecksummedBytes));
  return out;
}

absl::StatusOr<KvMessageHeader> DecodeHeader(absl::Span<const uint8_t> bytes,
                                             uint64_t max_payload_bytes) {
  if (bytes.size() != kKvHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv header: ", bytes.size(), " bytes, expected ", kKvHeaderBytes));
  }
  const uint8_t* p = bytes.data();
  for (int i = 0; i < 4; ++i) {
    if (p[i] != kMagic[i]) return Invalid("magic", "not a ced KV message");
  }
  const uint16_t version = Get16(p + 4);
  if (version != kKvWireVersion) {
    return Invalid("version",
                   absl::StrCat("unsupported version ", version, ", expected ", kKvWireVersion));
  }
  if (Get32(p + kChecksummedBytes) != Crc32c(0, p, kChecksummedBytes)) {
    return absl::DataLossError("kv header field 'header_checksum': mismatch");
  }
  for (size_t i = kReservedBegin; i < kChecksummedBytes; ++i) {
    if (p[i] != 0) return Invalid("reserved", "must be zero");
  }
  KvMessageHeader h;
  h.kind = static_cast<KvMessageKind>(p[6]);
  h.format = static_cast<kernels::KvFormat>(p[7]);
  h.flags = Get32(p + 8);
  h.token_begin = Get32(p + 12);
  h.token_end = Get32(p + 16);
  h.layer = static_cast<int32_t>(Get32(p + 20));
  h.request_id = Get64(p + 24);
  h.transfer_token = Get64(p + 32);
  h.payload_bytes = Get64(p + 40);
  h.payload_checksum = Get32(p + 48);
  RETURN_IF_ERROR(ValidateHeader(h, max_payload_bytes));
  return h;
}

}  // namespace ced::kv_transport
