#include "bench/sim/admission.h"

namespace ced::sim {

int64_t BlocksForRequest(int64_t prompt_tokens, int64_t max_tokens, int block_size) {
  return (prompt_tokens + max_tokens + block_size - 1) / block_size;
}

bool TryAdmit(int64_t prompt_tokens, int64_t max_tokens, int block_size, int64_t* free_blocks) {
  const int64_t need = BlocksForRequest(prompt_tokens, max_tokens, block_size);
  if (need > *free_blocks) return false;
  *free_blocks -= need;
  return true;
}

}  // namespace ced::sim
