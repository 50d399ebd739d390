// Validation and conversion of the router's wire messages. Pure functions;
// every error is INVALID_ARGUMENT and names the offending field.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ced/internal/router.pb.h"
#include "services/router_policy/block_index.h"
#include "services/router_policy/policy.h"
#include "services/router_policy/worker_table.h"

namespace ced::router {

inline constexpr size_t kMaxIdBytes = 128;
// RouteRequest.exclude_worker_ids: a gateway names at most the workers that
// failed under one request (its migration limit and one prefill retry).
inline constexpr int kMaxExcludedWorkers = 64;
inline constexpr size_t kMaxAddressBytes = 4096;
// GenerateRequest/RouteRequest.session_id.
inline constexpr size_t kMaxSessionIdBytes = 256;
// Hashes in one RouteRequest chain (2^16 blocks: 1M tokens at block size 16)
// and in one list of a prefix-cache report (a full report of a large cache).
inline constexpr size_t kMaxRouteBlockHashes = size_t{1} << 16;
inline constexpr size_t kMaxReportBlockHashes = size_t{1} << 18;

// OK when `value` is 1..max_bytes printable ASCII without spaces.
absl::Status ValidateToken(absl::string_view field, absl::string_view value, size_t max_bytes);

// Checks `worker` (role, weights, sizes, addresses, formats) and converts it.
// Decode workers need FULL weights, a kv_address, block_size > 0,
// total_kv_blocks > 0 and a kv_format.
absl::StatusOr<WorkerInfo> ValidateWorkerInfo(const ced::internal::WorkerInfo& worker);

// Checks a load report (non-empty worker_id, non-negative counts, free <= total)
// and converts it; `now` becomes its receipt time.
absl::StatusOr<WorkerLoad> ValidateLoadReport(const ced::internal::LoadReport& report,
                                              absl::Time now);

// Checks a worker's prefix-cache report (hash lists of whole 16-byte hashes,
// at most kMaxReportBlockHashes each, end_seq >= base_seq) and converts it.
absl::StatusOr<BlockReport> ValidatePrefixReport(const ced::internal::PrefixCacheReport& report);

// A 16-byte root hash (WorkerInfo.prefix_root_hash, RouteRequest.prompt_root_hash).
absl::StatusOr<BlockKey> ParseRootHash(absl::string_view field, absl::string_view bytes);

// Checks a route request (prompt_tokens and max_tokens >= 1, known enums,
// request_id printable and short, session_id printable and at most 256 bytes,
// a block chain of whole 16-byte hashes with a root and a block size) and
// converts it for the policy.
absl::StatusOr<RouteRequest> ValidateRouteRequest(const ced::internal::RouteRequest& request);

// "unavailable", "resource_exhausted", ...: a metric label for `code`.
std::string StatusCodeLabel(absl::StatusCode code);

}  // namespace ced::router
