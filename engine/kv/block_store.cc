#include "engine/kv/block_store.h"

#include <algorithm>
#include <cstring>

#include "engine/kv/crc32c.h"

namespace ced {
namespace {

constexpr char kMagic[8] = {'C', 'E', 'D', 'K', 'V', 'B', 'L', 'K'};
constexpr size_t kCrcOffset = 56;

void PutLe(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t GetLe(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
void PutHash(uint8_t* p, const BlockHash& h) {
  PutLe(p, h.hi, 8);
  PutLe(p + 8, h.lo, 8);
}
BlockHash GetHash(const uint8_t* p) { return BlockHash{GetLe(p, 8), GetLe(p + 8, 8)}; }

}  // namespace

const char* KvBlockRejectName(KvBlockReject reason) {
  switch (reason) {
    case KvBlockReject::kNone: return "none";
    case KvBlockReject::kMagic: return "magic";
    case KvBlockReject::kModel: return "model";
    case KvBlockReject::kFormat: return "format";
    case KvBlockReject::kLength: return "length";
    case KvBlockReject::kKey: return "key";
    case KvBlockReject::kChecksum: return "checksum";
  }
  return "unknown";
}

void SealKvBlock(const KvBlockLayout& layout, const BlockHash& hash, uint8_t* block) {
  uint8_t* h = block;
  std::memset(h, 0, kKvBlockHeaderBytes);
  std::memcpy(h, kMagic, 8);
  PutLe(h + 8, kKvBlockVersion, 2);
  h[10] = static_cast<uint8_t>(layout.format);
  PutLe(h + 12, static_cast<uint32_t>(layout.block_size), 4);
  PutLe(h + 16, layout.payload_bytes, 8);
  PutHash(h + 24, layout.root);
  PutHash(h + 40, hash);
  uint32_t crc = KvCrc32c(0, h, kCrcOffset);
  crc = KvCrc32c(crc, h + kKvBlockHeaderBytes, layout.payload_bytes);
  PutLe(h + kCrcOffset, crc, 4);
}

std::string EncodeKvBlock(const KvBlockLayout& layout, const BlockHash& hash,
                          const uint8_t* payload) {
  std::string out(kKvBlockHeaderBytes + layout.payload_bytes, '\0');
  auto* h = reinterpret_cast<uint8_t*>(out.data());
  if (layout.payload_bytes > 0) std::memcpy(h + kKvBlockHeaderBytes, payload, layout.payload_bytes);
  SealKvBlock(layout, hash, h);
  return out;
}

KvBlockReject CheckKvBlock(const KvBlockLayout& layout, const BlockHash& hash,
                           std::string_view stored) {
  if (stored.size() < kKvBlockHeaderBytes) return KvBlockReject::kLength;
  const auto* h = reinterpret_cast<const uint8_t*>(stored.data());
  if (std::memcmp(h, kMagic, 8) != 0 || GetLe(h + 8, 2) != kKvBlockVersion || h[11] != 0 ||
      GetLe(h + 60, 4) != 0) {
    return KvBlockReject::kMagic;
  }
  if (GetHash(h + 24) != layout.root) return KvBlockReject::kModel;
  if (h[10] != static_cast<uint8_t>(layout.format) ||
      GetLe(h + 12, 4) != static_cast<uint32_t>(layout.block_size)) {
    return KvBlockReject::kFormat;
  }
  if (GetLe(h + 16, 8) != layout.payload_bytes ||
      stored.size() != kKvBlockHeaderBytes + layout.payload_bytes) {
    return KvBlockReject::kLength;
  }
  if (GetHash(h + 40) != hash) return KvBlockReject::kKey;
  uint32_t crc = KvCrc32c(0, h, kCrcOffset);
  crc = KvCrc32c(crc, h + kKvBlockHeaderBytes, layout.payload_bytes);
  if (crc != static_cast<uint32_t>(GetLe(h + kCrcOffset, 4))) return KvBlockReject::kChecksum;
  return KvBlockReject::kNone;
}

void KvTierLatency::Observe(std::chrono::nanoseconds took) {
  const double seconds = std::chrono::duration<double>(took).count();
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(kKvTierLatencyBounds.begin(), kKvTierLatencyBounds.end(), seconds) -
      kKvTierLatencyBounds.begin());
  sum_ns.fetch_add(std::max<int64_t>(0, took.count()));
  count[bucket].fetch_add(1);
}

namespace {

KvTierLatencyStats Copy(const KvTierLatency& l) {
  KvTierLatencyStats s;
  for (size_t i = 0; i < kKvTierLatencyBuckets; ++i) s.count[i] = l.count[i].load();
  s.sum_ns = l.sum_ns.load();
  return s;
}

}  // namespace

KvTierStats KvBlockStore::stats() const {
  KvTierStats s;
  s.tier = std::string(name());
  const KvTierCounters& c = counters_;
  s.hit_blocks = c.hit_blocks.load();
  s.miss_blocks = c.miss_blocks.load();
  s.read_bytes = c.read_bytes.load();
  s.written_bytes = c.written_bytes.load();
  s.written_blocks = c.written_blocks.load();
  s.errors = c.errors.load();
  s.dropped_writes = c.dropped_writes.load();
  for (int r = 1; r < kKvBlockRejectReasons; ++r) {
    s.rejected[KvBlockRejectName(static_cast<KvBlockReject>(r))] = c.rejected[r].load();
  }
  s.read_latency = Copy(c.read_latency);
  s.write_latency = Copy(c.write_latency);
  s.resident_blocks = resident_blocks();
  s.resident_bytes = resident_bytes();
  return s;
}

size_t KvBlockStore::VisitPrefix(const BlockHash& root, absl::Span<const BlockHash> hashes,
                                 const BlockVisitor& take) {
  const std::vector<std::string> got = GetPrefix(root, hashes);
  size_t i = 0;
  while (i < got.size() && take(i, got[i])) ++i;
  return i;
}

}  // namespace ced
