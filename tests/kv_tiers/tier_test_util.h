// Helpers for the KV tier tests: a block layout, payloads, hash chains.
#pragma once

#include <string>
#include <vector>

#include "engine/kv/block_store.h"

namespace ced::testing {

inline KvBlockLayout TestLayout(size_t payload_bytes = 1000, const std::string& model = "m") {
  KvBlockLayout l;
  l.root = RootBlockHash(model, 16);
  l.format = KvFormat::kBF16;
  l.block_size = 16;
  l.payload_bytes = payload_bytes;
  return l;
}

inline std::string Payload(size_t n, int salt) {
  std::string p(n, '\0');
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<char>((i * 131 + salt * 7) & 0xff);
  return p;
}

// h_1 .. h_n of a chain of n blocks whose tokens depend on `salt`.
inline std::vector<BlockHash> Chain(const KvBlockLayout& l, int n, int salt) {
  std::vector<int32_t> tokens(n * l.block_size);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 7 + salt);
  return ChainBlockHashes(l.root, l.block_size, tokens);
}

inline KvStoredBlock Stored(const KvBlockLayout& l, const BlockHash& h, int salt) {
  const std::string p = Payload(l.payload_bytes, salt);
  return {h, std::make_shared<const std::string>(
                 EncodeKvBlock(l, h, reinterpret_cast<const uint8_t*>(p.data())))};
}

}  // namespace ced::testing
