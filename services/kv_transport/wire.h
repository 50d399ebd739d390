// The KV data plane's wire header (DESIGN.md §2 "KV data plane").
//
// Every KV message is one fixed-size, little-endian header followed by
// `payload_bytes` of raw K/V rows. The header names the request, the one-time
// transfer token issued by the decode worker, the token range, the layer, the
// storage format and the payload length; receivers check all of it against their
// reservation before a byte lands. Nothing self-describing or executable is ever
// parsed from the wire: the header is a fixed layout of integers.
//
// Layout (kKvHeaderBytes = 64, all integers little-endian):
//   0  magic "CEDK"       4  version u16         6  kind u8        7  format u8
//   8  flags u32          12 token_begin u32     16 token_end u32  20 layer i32
//   24 request_id u64     32 transfer_token u64  40 payload_bytes u64
//   48 payload_checksum u32 (CRC32C of the payload)
//   52 reserved (8 bytes, zero)
//   60 header_checksum u32 (CRC32C of bytes [0, 60))
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/cpu/kv_codec.h"

namespace ced::kv_transport {

inline constexpr size_t kKvHeaderBytes = 64;
inline constexpr uint16_t kKvWireVersion = 1;

enum class KvMessageKind : uint8_t {
  kGlobalRange = 1,  // global-layer K/V rows for tokens [token_begin, token_end)
  kTail = 2,         // final state: local K/V windows, first token or encoder output h_E
  kAbort = 3,        // the sender gives up on this transfer; payload_bytes must be 0
};

// Flag bits. Unknown bits are rejected by DecodeHeader.
inline constexpr uint32_t kKvFlagFinal = 1u << 0;  // no further message for this token follows
inline constexpr uint32_t kKvKnownFlags = kKvFlagFinal;

// The decoded header. header_checksum is not stored: EncodeHeader computes it and
// DecodeHeader verifies it.
struct KvMessageHeader {
  KvMessageKind kind = KvMessageKind::kGlobalRange;
  uint32_t flags = 0;
  uint64_t request_id = 0;
  uint64_t transfer_token = 0;
  uint32_t token_begin = 0;  // half-open range [token_begin, token_end)
  uint32_t token_end = 0;
  int32_t layer = -1;  // -1 = all layers
  kernels::KvFormat format = kernels::KvFormat::kF32;
  uint64_t payload_bytes = 0;
  uint32_t payload_checksum = 0;  // CRC32C of the payload bytes

  friend bool operator==(const KvMessageHeader& a, const KvMessageHeader& b);
  friend bool operator!=(const KvMessageHeader& a, const KvMessageHeader& b) { return !(a == b); }
};

using KvHeaderBytes = std::array<uint8_t, kKvHeaderBytes>;

// Checks the semantic rules DecodeHeader applies (kind, flags, format, token range,
// layer, payload size <= max_payload_bytes, abort has no payload). INVALID_ARGUMENT
// naming the offending field otherwise.
absl::Status ValidateHeader(const KvMessageHeader& h, uint64_t max_payload_bytes);

// Serializes `h` (fields are written as given; run ValidateHeader first to send only
// headers a receiver accepts) and fills in the header checksum.
KvHeaderBytes EncodeHeader(const KvMessageHeader& h);

// Parses exactly kKvHeaderBytes bytes. Rejects (INVALID_ARGUMENT, or DATA_LOSS for a
// header checksum mismatch) a wrong size, bad magic, unsupported version, non-zero
// reserved bytes, and everything ValidateHeader rejects. Total on any input.
absl::StatusOr<KvMessageHeader> DecodeHeader(absl::Span<const uint8_t> bytes,
                                             uint64_t max_payload_bytes);

}  // namespace ced::kv_transport
