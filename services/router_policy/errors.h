// Error texts the router's placement returns that its callers act on (a
// header of constants: the gateway includes it without linking the policy).
#pragma once

namespace ced::router {

// RESOURCE_EXHAUSTED for a request (prompt + max_tokens) that no decode
// worker's whole K/V cache can hold: waiting for room cannot help, unlike
// the "no decode worker has KV room" refusal of a cache that is full now.
inline constexpr char kLargerThanEveryCache[] =
    "larger than the whole K/V cache of every decode worker";

}  // namespace ced::router
