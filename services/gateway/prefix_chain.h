// The prompt's prefix-cache block chain for cache-aware routing (DESIGN.md
// 1.6). The gateway hashes prompts (so the router does not have to): the
// chain h_0 = the workers' root, h_i = H(h_{i-1}, block i) of the engine's
// prefix cache, sent as RouteRequest.prompt_block_hashes. The root and the
// block size are the router's (RouteResponse.prefix_root_hash /
// prefix_block_size): learned from the first answer, so a gateway's very
// first request routes without a chain.
#pragma once

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "ced/internal/router.pb.h"

namespace ced::gateway {

// Thread-safe.
class PrefixChain {
 public:
  // Remembers the chain a route response names (no-op when it names none).
  void Learn(const ced::internal::RouteResponse& response);
  // Sets request's prompt_block_hashes, prompt_root_hash and
  // prompt_block_size for `prompt` (its full blocks) once a chain is known.
  void Fill(absl::Span<const int32_t> prompt, ced::internal::RouteRequest* request) const;

 private:
  mutable absl::Mutex mu_;
  std::string root_ ABSL_GUARDED_BY(mu_);  // 16 bytes; empty: not learned yet
  int block_size_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ced::gateway
