// Wire form of prefix-cache block hashes in the router protocol
// (ced.internal.PrefixCacheReport, RouteRequest.prompt_block_hashes): 16 bytes
// per hash, hi then lo, each big-endian, concatenated.
#pragma once

#include <cstdint>
#include <string>

namespace ced::services {

inline constexpr size_t kBlockHashWireBytes = 16;

inline void AppendBlockHashWire(uint64_t hi, uint64_t lo, std::string* out) {
  for (uint64_t v : {hi, lo}) {
    for (int i = 7; i >= 0; --i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
}

// Reads the hash at data[0, 16).
inline void ReadBlockHashWire(const char* data, uint64_t* hi, uint64_t* lo) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(data);
  *hi = *lo = 0;
  for (int i = 0; i < 8; ++i) {
    *hi = (*hi << 8) | p[i];
    *lo = (*lo << 8) | p[8 + i];
  }
}

}  // namespace ced::services
