// Decode-instance admission, as the decode worker does it (services/decode:
// Reserve): a request is admitted only when global-pool blocks for
// prompt + max_tokens are free, and they stay reserved until it finishes.
// The decode worker's Reserve is bound to its gRPC types, so this is the one
// place the simulator states that rule; keep the two in step.
#pragma once

#include <cstdint>

namespace ced::sim {

// ceil((prompt + max_tokens) / block_size) blocks, the router's figure too.
int64_t BlocksForRequest(int64_t prompt_tokens, int64_t max_tokens, int block_size);

// Reserves the request's blocks out of `*free_blocks` and returns true, or
// leaves it unchanged and returns false when they do not fit.
bool TryAdmit(int64_t prompt_tokens, int64_t max_tokens, int block_size, int64_t* free_blocks);

}  // namespace ced::sim
