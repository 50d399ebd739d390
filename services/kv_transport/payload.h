// Helpers shared by the transport implementations: span arithmetic, gather/scatter
// and checksums over span lists. Thread-compatible pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "services/kv_transport/transport.h"

namespace ced::kv_transport {

uint64_t TotalBytes(const std::vector<MemSpan>& spans);
uint64_t TotalBytes(const std::vector<ConstSpan>& spans);
uint32_t ChecksumSpans(const std::vector<MemSpan>& spans);
uint32_t ChecksumSpans(const std::vector<ConstSpan>& spans);

// Checks that spans a sink returned can hold exactly `payload_bytes` (no null span
// with a non-zero size). INTERNAL otherwise: the sink broke its contract.
absl::Status CheckSinkSpans(const std::vector<MemSpan>& spans, uint64_t payload_bytes);
// Checks that a sender's spans sum to `payload_bytes`. INVALID_ARGUMENT otherwise.
absl::Status CheckSendSpans(const std::vector<ConstSpan>& spans, uint64_t payload_bytes);

// Copies `size` bytes to payload offset `offset` of `spans` (the payload laid
// out over the spans in order; the caller keeps offset + size within them) and
// returns `crc` extended over those bytes: CopyCrc32c over each piece.
uint32_t CopyToSpansChecksummed(const std::vector<MemSpan>& spans, uint64_t offset,
                                const uint8_t* src, uint64_t size, uint32_t crc);

}  // namespace ced::kv_transport
