#include "services/kv_transport/payload.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "services/kv_transport/checksum.h"

namespace ced::kv_transport {
namespace {

template <typename Span>
uint64_t Total(const std::vector<Span>& spans) {
  uint64_t total = 0;
  for (const Span& s : spans) total += s.size;
  return total;
}

template <typename Span>
uint32_t Checksum(const std::vector<Span>& spans) {
  uint32_t crc = 0;
  for (const Span& s : spans) crc = Crc32c(crc, s.data, s.size);
  return crc;
}

template <typename Span>
bool HasNullData(const std::vector<Span>& spans) {
  for (const Span& s : spans) {
    if (s.data == nullptr && s.size != 0) return true;
  }
  return false;
}

}  // namespace

uint64_t TotalBytes(const std::vector<MemSpan>& spans) { return Total(spans); }
uint64_t TotalBytes(const std::vector<ConstSpan>& spans) { return Total(spans); }
uint32_t ChecksumSpans(const std::vector<MemSpan>& spans) { return Checksum(spans); }
uint32_t ChecksumSpans(const std::vector<ConstSpan>& spans) { return Checksum(spans); }

absl::Status CheckSinkSpans(const std::vector<MemSpan>& spans, uint64_t payload_bytes) {
  if (HasNullData(spans)) return absl::InternalError("kv sink returned a null span");
  const uint64_t total = Total(spans);
  if (total != payload_bytes) {
    return absl::InternalError(absl::StrCat("kv sink returned spans of ", total,
                                            " bytes for a payload of ", payload_bytes));
  }
  return absl::OkStatus();
}

absl::Status CheckSendSpans(const std::vector<ConstSpan>& spans, uint64_t payload_bytes) {
  if (HasNullData(spans)) return absl::InvalidArgumentError("kv send: null payload span");
  const uint64_t total = Total(spans);
  if (total != payload_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("kv send: payload spans hold ", total,
                                                   " bytes, header field 'payload_bytes' says ",
                                                   payload_bytes));
  }
  return absl::OkStatus();
}

uint32_t CopyToSpansChecksummed(const std::vector<MemSpan>& spans, uint64_t offset,
                                const uint8_t* src, uint64_t size, uint32_t crc) {
  for (const MemSpan& s : spans) {
    if (size == 0) break;
    if (offset >= s.size) {
      offset -= s.size;
      continue;
    }
    const uint64_t n = std::min<uint64_t>(s.size - offset, size);
    crc = CopyCrc32c(crc, s.data + offset, src, n);
    offset = 0;
    src += n;
    size -= n;
  }
  return crc;
}

}  // namespace ced::kv_transport
