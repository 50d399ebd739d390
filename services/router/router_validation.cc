#include "services/router/router_validation.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/common/status.h"
#include "kernels/cpu/kv_codec.h"
#include "services/common/block_hash_wire.h"

namespace ced::router {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

absl::Status NonNegative(absl::string_view field, int64_t value) {
  if (value >= 0) return absl::OkStatus();
  return Invalid(field, absl::StrCat("must be >= 0, got ", value));
}

absl::StatusOr<std::vector<BlockKey>> ParseHashes(absl::string_view field, absl::string_view bytes,
                                                  size_t max_hashes) {
  if (bytes.size() % services::kBlockHashWireBytes != 0) {
    return Invalid(field,
                   absl::StrCat("must be whole 16-byte hashes, got ", bytes.size(), " bytes"));
  }
  const size_t n = bytes.size() / services::kBlockHashWireBytes;
  if (n > max_hashes) {
    return Invalid(field, absl::StrCat("at most ", max_hashes, " hashes, got ", n));
  }
  std::vector<BlockKey> keys(n);
  for (size_t i = 0; i < n; ++i) {
    services::ReadBlockHashWire(bytes.data() + i * services::kBlockHashWireBytes, &keys[i].hi,
                                &keys[i].lo);
  }
  return keys;
}

}  // namespace

absl::StatusOr<BlockKey> ParseRootHash(absl::string_view field, absl::string_view bytes) {
  if (bytes.size() != services::kBlockHashWireBytes) {
    return Invalid(field, absl::StrCat("must be 16 bytes, got ", bytes.size()));
  }
  BlockKey key;
  services::ReadBlockHashWire(bytes.data(), &key.hi, &key.lo);
  return key;
}

absl::StatusOr<BlockReport> ValidatePrefixReport(const ced::internal::PrefixCacheReport& report) {
  if (report.end_seq() < report.base_seq()) {
    return Invalid("prefix_cache.end_seq", absl::StrCat("must be >= base_seq (", report.base_seq(),
                                                        "), got ", report.end_seq()));
  }
  BlockReport out;
  out.base_seq = report.base_seq();
  out.end_seq = report.end_seq();
  out.full = report.full();
  ASSIGN_OR_RETURN(out.added,
                   ParseHashes("prefix_cache.added", report.added(), kMaxReportBlockHashes));
  ASSIGN_OR_RETURN(out.evicted,
                   ParseHashes("prefix_cache.evicted", report.evicted(), kMaxReportBlockHashes));
  return out;
}

absl::Status ValidateToken(absl::string_view field, absl::string_view value, size_t max_bytes) {
  if (value.empty()) return Invalid(field, "must not be empty");
  if (value.size() > max_bytes) {
    return Invalid(field,
                   absl::StrCat("must be at most ", max_bytes, " bytes, got ", value.size()));
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if (c <= 0x20 || c >= 0x7f) {
      return Invalid(field,
                     absl::StrCat("byte ", i, " (0x", absl::Hex(c), ") is not printable ASCII"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<WorkerInfo> ValidateWorkerInfo(const ced::internal::WorkerInfo& worker) {
  RETURN_IF_ERROR(ValidateToken("worker.worker_id", worker.worker_id(), kMaxIdBytes));
  RETURN_IF_ERROR(ValidateToken("worker.grpc_address", worker.grpc_address(), kMaxAddressBytes));
  RETURN_IF_ERROR(
      ValidateToken("worker.model_fingerprint", worker.model_fingerprint(), kMaxIdBytes));
  WorkerInfo info;
  info.id = worker.worker_id();
  switch (worker.role()) {
    case ced::internal::ROLE_PREFILL:
      info.role = Role::kPrefill;
      break;
    case ced::internal::ROLE_DECODE:
      info.role = Role::kDecode;
      break;
    default:
      return Invalid("worker.role",
                     absl::StrCat("must be ROLE_PREFILL or ROLE_DECODE, got ", worker.role()));
  }
  switch (worker.weights()) {
    case ced::internal::WEIGHTS_HELD_ENCODER_ONLY:
      info.weights = WeightsHeld::kEncoderOnly;
      break;
    case ced::internal::WEIGHTS_HELD_ENCODER_REPLAY:
      info.weights = WeightsHeld::kEncoderReplay;
      break;
    case ced::internal::WEIGHTS_HELD_FULL:
      info.weights = WeightsHeld::kFull;
      break;
    default:
      return Invalid(
          "worker.weights",
          absl::StrCat("must be ENCODER_ONLY, ENCODER_REPLAY or FULL, got ", worker.weights()));
  }
  RETURN_IF_ERROR(NonNegative("worker.total_kv_blocks", worker.total_kv_blocks()));
  RETURN_IF_ERROR(NonNegative("worker.block_size", worker.block_size()));
  info.total_kv_blocks = worker.total_kv_blocks();
  info.block_size = worker.block_size();
  if (!worker.kv_format().empty()) {
    kernels::KvFormat format;
    if (!kernels::ParseKvFormat(worker.kv_format(), &format)) {
      return Invalid("worker.kv_format",
                     absl::StrCat("must be f32, bf16, fp8_e4m3 or fp4_e2m1, got '",
                                  absl::CHexEscape(worker.kv_format()), "'"));
    }
  }
  if (!worker.prefix_root_hash().empty()) {
    RETURN_IF_ERROR(ParseRootHash("worker.prefix_root_hash", worker.prefix_root_hash()).status());
  }
  if (!worker.kv_transport().empty()) {
    RETURN_IF_ERROR(ValidateToken("worker.kv_transport", worker.kv_transport(), 32));
  }
  if (info.role == Role::kDecode) {
    if (info.weights != WeightsHeld::kFull) {
      return Invalid("worker.weights", "a decode worker must hold FULL weights");
    }
    RETURN_IF_ERROR(ValidateToken("worker.kv_address", worker.kv_address(), kMaxAddressBytes));
    if (info.block_size <= 0) {
      return Invalid("worker.block_size",
                     absl::StrCat("must be > 0 for a decode worker, got ", info.block_size));
    }
    if (info.total_kv_blocks <= 0) {
      return Invalid("worker.total_kv_blocks",
                     absl::StrCat("must be > 0 for a decode worker, got ", info.total_kv_blocks));
    }
    if (worker.kv_format().empty()) {
      return Invalid("worker.kv_format", "must be set for a decode worker");
    }
  } else if (!worker.kv_address().empty()) {
    RETURN_IF_ERROR(ValidateToken("worker.kv_address", worker.kv_address(), kMaxAddressBytes));
  }
  return info;
}

absl::StatusOr<WorkerLoad> ValidateLoadReport(const ced::internal::LoadReport& report,
                                              absl::Time now) {
  RETURN_IF_ERROR(ValidateToken("worker_id", report.worker_id(), kMaxIdBytes));
  RETURN_IF_ERROR(NonNegative("queued_prefill_tokens", report.queued_prefill_tokens()));
  RETURN_IF_ERROR(NonNegative("inflight_prefill_tokens", report.inflight_prefill_tokens()));
  RETURN_IF_ERROR(NonNegative("running_sequences", report.running_sequences()));
  RETURN_IF_ERROR(NonNegative("waiting_sequences", report.waiting_sequences()));
  RETURN_IF_ERROR(NonNegative("free_kv_blocks", report.free_kv_blocks()));
  RETURN_IF_ERROR(NonNegative("total_kv_blocks", report.total_kv_blocks()));
  if (report.total_kv_blocks() > 0 && report.free_kv_blocks() > report.total_kv_blocks()) {
    return Invalid("free_kv_blocks",
                   absl::StrCat("must be <= total_kv_blocks (", report.total_kv_blocks(), "), got ",
                                report.free_kv_blocks()));
  }
  WorkerLoad load;
  load.queued_prefill_tokens = report.queued_prefill_tokens();
  load.inflight_prefill_tokens = report.inflight_prefill_tokens();
  load.running_sequences = report.running_sequences();
  load.waiting_sequences = report.waiting_sequences();
  load.free_kv_blocks = report.free_kv_blocks();
  load.last_heartbeat = now;
  return load;
}

absl::StatusOr<RouteRequest> ValidateRouteRequest(const ced::internal::RouteRequest& request) {
  if (!request.request_id().empty()) {
    RETURN_IF_ERROR(ValidateToken("request_id", request.request_id(), kMaxIdBytes));
  }
  if (request.prompt_tokens() < 1) {
    return Invalid("prompt_tokens", absl::StrCat("must be >= 1, got ", request.prompt_tokens()));
  }
  if (request.max_tokens() < 1) {
    return Invalid("max_tokens", absl::StrCat("must be >= 1, got ", request.max_tokens()));
  }
  if (request.exclude_worker_ids_size() > kMaxExcludedWorkers) {
    return Invalid("exclude_worker_ids", absl::StrCat("at most ", kMaxExcludedWorkers, " ids, got ",
                                                      request.exclude_worker_ids_size()));
  }
  RouteRequest out;
  for (const std::string& id : request.exclude_worker_ids()) {
    RETURN_IF_ERROR(ValidateToken("exclude_worker_ids", id, kMaxIdBytes));
    out.exclude_ids.push_back(id);
  }
  out.prompt_tokens = request.prompt_tokens();
  out.max_tokens = request.max_tokens();
  if (!request.session_id().empty()) {
    RETURN_IF_ERROR(ValidateToken("session_id", request.session_id(), kMaxSessionIdBytes));
    out.session_id = request.session_id();
  }
  if (!request.prompt_block_hashes().empty()) {
    ASSIGN_OR_RETURN(
        out.block_hashes,
        ParseHashes("prompt_block_hashes", request.prompt_block_hashes(), kMaxRouteBlockHashes));
    ASSIGN_OR_RETURN(out.hash_root, ParseRootHash("prompt_root_hash", request.prompt_root_hash()));
    if (request.prompt_block_size() < 1 || request.prompt_block_size() > (1 << 20)) {
      return Invalid("prompt_block_size",
                     absl::StrCat("must be in [1, 2^20] with prompt_block_hashes, got ",
                                  request.prompt_block_size()));
    }
    out.hash_block_size = request.prompt_block_size();
    if (static_cast<int64_t>(out.block_hashes.size()) * out.hash_block_size >
        request.prompt_tokens()) {
      return Invalid("prompt_block_hashes",
                     absl::StrCat(out.block_hashes.size(), " blocks of ", out.hash_block_size,
                                  " tokens exceed prompt_tokens ", request.prompt_tokens()));
    }
  }
  switch (request.replay_on()) {
    case ced::internal::REPLAY_ON_UNSPECIFIED:
      out.replay_on = ReplayOnChoice::kUnspecified;
      break;
    case ced::internal::REPLAY_ON_PREFILL:
      out.replay_on = ReplayOnChoice::kPrefill;
      break;
    case ced::internal::REPLAY_ON_DECODE:
      out.replay_on = ReplayOnChoice::kDecode;
      break;
    case ced::internal::REPLAY_ON_AUTO:
      out.replay_on = ReplayOnChoice::kAuto;
      break;
    default:
      return Invalid("replay_on", absl::StrCat("unknown value ", request.replay_on()));
  }
  if (!ced::internal::ReplayMode_IsValid(request.replay_mode())) {
    return Invalid("replay_mode", absl::StrCat("unknown value ", request.replay_mode()));
  }
  return out;
}

std::string StatusCodeLabel(absl::StatusCode code) {
  return absl::AsciiStrToLower(absl::StatusCodeToString(code));
}

}  // namespace ced::router
