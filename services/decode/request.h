// Per-request state of the decode worker (private to services/decode).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "services/common/prefix_metrics.h"
#include "services/common/worker_util.h"
#include "services/decode/decode_worker.h"

namespace ced::services {

using Clock = std::chrono::steady_clock;

// The protocol and transfer state of one reservation; its scheduling state
// (queued, ready, running, timeouts) is the worker's Scheduler's.
struct DecodeWorker::Request {
  std::string id;
  uint64_t id_hash = 0;
  uint64_t transfer_token = 0;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  StopConditions stop;
  ReplayMode replay_mode = ReplayMode::kBounded;
  int replay_window = 0;
  bool local_prefill = false;
  std::string prefill_worker_id;  // who sends the K/V (empty with local prefill)
  SeqId seq = 0;
  int cached_tokens = 0;  // prompt tokens whose K/V this worker's prefix cache held
  // Start work charged to the scheduler's step budget: a local prefill's
  // tokens, or the replay a landed request may need (0 for decoder-only).
  int64_t prefill_work_tokens = 0, replay_work_tokens = 0;

  // Guarded by DecodeWorker::mu_.
  std::vector<char> received;  // per prompt token: global K/V landed
  int received_tokens = 0;
  bool tail_received = false;
  bool kv_landed = false;  // all global K/V and the tail: no more K/V accepted
  std::vector<uint8_t> tail_bytes;
  int inflight_messages = 0;   // accepted by the sink, not yet completed
  bool cancelled = false;
  std::shared_ptr<ChunkOut> stream;
  std::string subscriber_id;  // its tokens go to this Subscribe stream
  std::vector<ced::internal::TokenChunk> pending;  // produced before Stream attached
  std::optional<grpc::Status> final_status;        // finished before Stream attached
  bool finished = false;
  bool finished_ok = false;  // its sequence may be held (Engine::HoldSequence)

  // Scheduler thread only.
  int generated = 0;
  int32_t last_token = -1;
  // What the logit adjustments (penalties) need of its prompt and output.
  SamplingHistory history;
  bool replayed_here = false;
  Clock::time_point t_reserve, t_ready, t_first, t_last;
  double prefill_ms = 0, replay_ms = 0;
};

// Labels of ced_kv_rejected_messages_total: why the sink refused a K/V
// message. unknown_token: no live reservation holds the transfer token;
// request_mismatch: the token belongs to another request; inactive: the
// request finished or was cancelled; unexpected: the request does not take
// K/V now (local prefill, or already complete); format: not the cache
// format; range: tokens outside the reserved prompt (or per-layer; an empty
// range with no payload is a prefill worker's progress notice); length:
// payload size does not match the range; duplicate: tokens or tail already
// landed; kind: unknown message kind.
inline constexpr const char* kKvRejectReasons[] = {
    "unknown_token", "request_mismatch", "inactive", "unexpected", "format",
    "range",         "length",           "duplicate", "kind",   "connection"};

absl::Status ValidateReserve(const ced::internal::ReserveRequest& req, const ModelConfig& c);
std::unique_ptr<kv_transport::KvSink> MakeDecodeSink(DecodeWorker* worker);
std::unique_ptr<grpc::Service> MakeDecodeService(DecodeWorker* worker);
// The ChunkOut of a request on a Subscribe stream: its chunks carry its id,
// its end is an `ended` chunk with the status.
std::shared_ptr<ChunkOut> MakeSubscribedOut(
    std::shared_ptr<StreamWriter<ced::internal::TokenBatch>::Handle> out, std::string request_id);

struct DecodeWorker::Metrics {
  PrefixCacheMetrics prefix;
  metrics::Gauge *running, *waiting, *subscribers, *kv_used, *kv_free, *weights_bytes;
  metrics::Counter *steps, *generated, *transfer_bytes;
  metrics::Family<metrics::Counter>* replays;
  metrics::Family<metrics::Counter>* requests;
  // Reserve refused: reason = queue_requests | queue_tokens | kv_blocks.
  metrics::Family<metrics::Counter>* admission_rejected;
  // K/V messages the sink refused before a byte landed, by reason.
  metrics::Family<metrics::Counter>* kv_rejected;
  metrics::Histogram *step_seconds, *transfer_seconds, *ttft_seconds, *itl_seconds, *batch_size;
};

}  // namespace ced::services
