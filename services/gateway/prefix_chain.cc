#include "services/gateway/prefix_chain.h"

#include <algorithm>

#include "engine/kv/prefix_cache.h"
#include "services/common/block_hash_wire.h"

namespace ced::gateway {
namespace {

// The router takes at most 2^16 hashes (router_validation.h).
constexpr size_t kMaxHashes = size_t{1} << 16;

}  // namespace

void PrefixChain::Learn(const ced::internal::RouteResponse& response) {
  if (response.prefix_root_hash().size() != services::kBlockHashWireBytes ||
      response.prefix_block_size() <= 0) {
    return;
  }
  absl::MutexLock lock(&mu_);
  root_ = response.prefix_root_hash();
  block_size_ = response.prefix_block_size();
}

void PrefixChain::Fill(absl::Span<const int32_t> prompt,
                       ced::internal::RouteRequest* request) const {
  std::string root;
  int block_size = 0;
  {
    absl::MutexLock lock(&mu_);
    root = root_;
    block_size = block_size_;
  }
  if (root.empty()) return;
  const size_t blocks = std::min(prompt.size() / static_cast<size_t>(block_size), kMaxHashes);
  if (blocks == 0) return;
  BlockHash h;
  services::ReadBlockHashWire(root.data(), &h.hi, &h.lo);
  std::string* out = request->mutable_prompt_block_hashes();
  out->reserve(blocks * services::kBlockHashWireBytes);
  for (size_t b = 0; b < blocks; ++b) {
    h = ChainBlockHash(h, prompt.subspan(b * block_size, block_size));
    services::AppendBlockHashWire(h.hi, h.lo, out);
  }
  request->set_prompt_root_hash(root);
  request->set_prompt_block_size(block_size);
}

}  // namespace ced::gateway
