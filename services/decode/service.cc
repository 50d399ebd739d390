// ced.internal.DecodeWorker over the gRPC callback API.
#include "absl/strings/str_cat.h"
#include "services/common/grpc_util.h"
#include "services/common/worker_util.h"
#include "services/decode/request.h"

namespace ced::services {

using ced::internal::TokenChunk;

namespace {

// Token chunks waiting behind a write that has not finished (the gateway
// reads slower than the batch steps): the next chunk's tokens join the
// waiting one's when they follow it; the last chunk's summary comes along.
bool MergeChunks(TokenChunk* waiting, TokenChunk* next) {
  if (waiting->finish_reason() != ced::internal::FINISH_REASON_UNSPECIFIED) return false;
  if (next->token_ids_size() > 0 &&
      next->start_step() != waiting->start_step() + waiting->token_ids_size()) {
    return false;
  }
  const int32_t start = waiting->start_step();
  waiting->MergeFrom(*next);  // appends the tokens, takes the summary fields
  waiting->set_start_step(start);
  return true;
}

// Batches waiting behind a write: the next joins the waiting one (a batch
// step's chunks travel together), up to a bound that keeps one message small.
bool MergeBatches(ced::internal::TokenBatch* waiting, ced::internal::TokenBatch* next) {
  if (waiting->chunks_size() + next->chunks_size() > 4096) return false;
  for (TokenChunk& c : *next->mutable_chunks()) *waiting->add_chunks() = std::move(c);
  return true;
}

// A request's own Stream call.
class StreamOut final : public ChunkOut {
 public:
  explicit StreamOut(std::shared_ptr<StreamWriter<TokenChunk>::Handle> out)
      : out_(std::move(out)) {}
  void Push(TokenChunk chunk) override { out_->Push(std::move(chunk)); }
  void Close(const grpc::Status& status) override { out_->Close(status); }

 private:
  const std::shared_ptr<StreamWriter<TokenChunk>::Handle> out_;
};

// A request on a Subscribe stream.
class SubscribedOut final : public ChunkOut {
 public:
  SubscribedOut(std::shared_ptr<StreamWriter<ced::internal::TokenBatch>::Handle> out,
                std::string request_id)
      : out_(std::move(out)), id_(std::move(request_id)) {}
  void Push(TokenChunk chunk) override {
    if (closed_) return;
    chunk.set_request_id(id_);
    ced::internal::TokenBatch batch;
    *batch.add_chunks() = std::move(chunk);
    out_->Push(std::move(batch));
  }
  void Close(const grpc::Status& status) override {
    if (closed_) return;
    closed_ = true;
    ced::internal::TokenBatch batch;
    TokenChunk* end = batch.add_chunks();
    end->set_request_id(id_);
    end->set_ended(true);
    end->set_status_code(static_cast<int32_t>(status.error_code()));
    end->set_status_message(status.error_message());
    out_->Push(std::move(batch));
  }

 private:
  const std::shared_ptr<StreamWriter<ced::internal::TokenBatch>::Handle> out_;
  const std::string id_;
  bool closed_ = false;  // under the worker's mu_, like every call
};

}  // namespace

std::shared_ptr<ChunkOut> MakeSubscribedOut(
    std::shared_ptr<StreamWriter<ced::internal::TokenBatch>::Handle> out, std::string request_id) {
  return std::make_shared<SubscribedOut>(std::move(out), std::move(request_id));
}

absl::Status ValidateReserve(const ced::internal::ReserveRequest& req, const ModelConfig& c) {
  if (req.request_id().empty() || req.request_id().size() > 256) {
    return absl::InvalidArgumentError("request_id: must be 1..256 bytes");
  }
  if (absl::Status s = ValidatePrompt(req.prompt_token_ids(), c, "prompt_token_ids"); !s.ok()) {
    return s;
  }
  if (req.max_tokens() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens: must be >= 1, got ", req.max_tokens()));
  }
  if (static_cast<int64_t>(req.prompt_token_ids_size()) + req.max_tokens() > c.max_position) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens: prompt (", req.prompt_token_ids_size(), ") + max_tokens (",
                     req.max_tokens(), ") exceeds max_position ", c.max_position));
  }
  for (int i = 0; i < req.stop_token_ids_size(); ++i) {
    if (req.stop_token_ids(i) < 0 || req.stop_token_ids(i) >= c.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop_token_ids[", i, "]: ", req.stop_token_ids(i), " out of range"));
    }
  }
  if (absl::Status s = ValidateSamplingParams(FromProto(req.sampling())); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.", s.message()));
  }
  for (const auto& [id, bias] : req.sampling().logit_bias()) {
    if (id >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sampling.logit_bias[", id, "]: outside the vocabulary [0, ", c.vocab_size, ")"));
    }
  }
  if (req.replay().replay_window() < 0 ||
      (req.replay().replay_window() > 0 &&
       req.replay().replay_window() < std::max(c.sliding_window, 1))) {
    return absl::InvalidArgumentError(
        absl::StrCat("replay.replay_window: must be 0 or >= ", std::max(c.sliding_window, 1)));
  }
  if (!ced::internal::ReplayMode_IsValid(req.replay().mode())) {
    return absl::InvalidArgumentError("replay.mode: unknown value");
  }
  if (!req.local_prefill() && req.prefill_worker_id().empty()) {
    return absl::InvalidArgumentError("prefill_worker_id: required unless local_prefill is set");
  }
  if (req.subscriber_id().size() > 128) {
    return absl::InvalidArgumentError("subscriber_id: must be at most 128 bytes");
  }
  return absl::OkStatus();
}

class DecodeWorker::Service final : public ced::internal::DecodeWorker::CallbackService {
 public:
  explicit Service(DecodeWorker* w) : w_(w) {}

  grpc::ServerUnaryReactor* Reserve(grpc::CallbackServerContext* ctx,
                                    const ced::internal::ReserveRequest* req,
                                    ced::internal::ReserveResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    auto r = w_->Reserve(*req);
    if (r.ok()) *resp = *std::move(r);
    reactor->Finish(ToGrpc(r.status()));
    return reactor;
  }

  grpc::ServerWriteReactor<TokenChunk>* Stream(grpc::CallbackServerContext* ctx,
                                               const ced::internal::StreamRequest* req) override {
    const std::string id = req->request_id();
    auto* writer = new StreamWriter<TokenChunk>(
        [w = w_, id] { w->Cancel(id, "the stream was cancelled"); }, MergeChunks);
    w_->AttachStream(id, std::make_shared<StreamOut>(writer->handle()));
    return writer;
  }

  grpc::ServerWriteReactor<ced::internal::TokenBatch>* Subscribe(
      grpc::CallbackServerContext* ctx, const ced::internal::SubscribeRequest* req) override {
    const std::string id = req->subscriber_id();
    auto* writer = new StreamWriter<ced::internal::TokenBatch>(
        [w = w_, id] { w->Unsubscribe(id); }, MergeBatches, [w = w_, id] { w->Unsubscribe(id); });
    const absl::Status opened = w_->Subscribe(id, writer->handle());
    if (!opened.ok()) {
      // Not registered: its end must not close the stream that holds the name.
      auto* refused = new StreamWriter<ced::internal::TokenBatch>();
      refused->handle()->Close(ToGrpc(opened));
      delete writer;
      return refused;
    }
    return writer;
  }

  grpc::ServerUnaryReactor* Cancel(grpc::CallbackServerContext* ctx,
                                   const ced::internal::CancelRequest* req,
                                   ced::internal::CancelResponse* resp) override {
    resp->set_found(w_->Cancel(req->request_id(), "cancelled by the gateway"));
    auto* reactor = ctx->DefaultReactor();
    // A worker past its drain is going away: UNAVAILABLE tells the gateway to
    // move the streams it just ended (request migration), not to fail them.
    reactor->Finish(w_->shutting_down_
                        ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "decode worker shutting down")
                        : grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* ctx,
                                  const ced::internal::DrainRequest* req,
                                  ced::internal::DrainResponse*) override {
    return AnswerDrain(ctx, "decode worker", req->reason());
  }

  grpc::ServerUnaryReactor* FlushCache(grpc::CallbackServerContext* ctx,
                                       const ced::internal::FlushCacheRequest* req,
                                       ced::internal::FlushCacheResponse* resp) override {
    return AnswerFlushCache(ctx, "decode worker", *w_->engine_, *req, resp);
  }

 private:
  DecodeWorker* w_;
};

std::unique_ptr<grpc::Service> MakeDecodeService(DecodeWorker* worker) {
  return std::make_unique<DecodeWorker::Service>(worker);
}

}  // namespace ced::services
