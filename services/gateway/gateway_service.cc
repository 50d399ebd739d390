#include "services/gateway/gateway_service.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/accounting/accounting.h"
#include "services/common/grpc_util.h"
#include "services/common/stream_writer.h"
#include "services/common/worker_util.h"
#include "services/gateway/generate_call.h"
#include "services/gateway/request_parsing.h"

namespace ced::gateway {

bool GrpcSink::Merge(grpc::ByteBuffer* waiting, grpc::ByteBuffer* next) {
  ced::v1::GenerateResponse a, b;
  if (!ParseRequest(*waiting, &a).ok() || !ParseRequest(*next, &b).ok()) return false;
  if (a.finish_reason() != ced::v1::FINISH_REASON_UNSPECIFIED) return false;
  std::string text = a.text() + b.text();
  a.MergeFrom(b);  // appends the tokens, takes the final message's fields
  a.set_text(std::move(text));
  return SerializeMessage(a, waiting).ok();
}

void GrpcSink::Push(ced::v1::GenerateResponse response) {
  grpc::ByteBuffer buffer;
  if (SerializeMessage(response, &buffer).ok()) out_->Push(std::move(buffer));
}

namespace {
// gRPC's peer string ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000") as host:port.
std::string ClientAddress(const std::string& peer) {
  for (const char* scheme : {"ipv4:", "ipv6:"}) {
    if (peer.rfind(scheme, 0) == 0) return peer.substr(std::strlen(scheme));
  }
  return peer;
}
}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* GatewayService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* raw) {
  const absl::Time received = absl::Now();
  // Cancel() reaches the call through this slot, filled before the reactor is returned.
  auto slot = std::make_shared<std::weak_ptr<GenerateCall>>();
  auto* writer = new GrpcSink::Writer(
      [slot] {
        if (std::shared_ptr<GenerateCall> call = slot->lock()) call->Cancel();
      },
      GrpcSink::Merge);
  ced::v1::GenerateRequest request;
  absl::Status status = ParseRequest(*raw, &request);
  absl::StatusOr<ValidatedRequest> valid =
      status.ok() ? ValidateGenerateRequest(request, core_->tokenizer(), core_->settings().limits)
                  : absl::StatusOr<ValidatedRequest>(status);
  if (!valid.ok()) {
    core_->metrics().CountRequest(Api::kGrpc, "invalid_argument");
    AccessRecord record =
        RefusedRecord(Api::kGrpc, received, "invalid_argument", services::ToGrpc(valid.status()));
    record.client = ClientAddress(context->peer());
    record.request_id = request.request_id();
    record.session_id = request.session_id();
    core_->LogAccess(record);
    writer->handle()->Close(services::ToGrpc(valid.status()));
    return writer;
  }
  valid->client = ClientAddress(context->peer());
  std::shared_ptr<GenerateCall> call;
  const grpc::Status started = StartGenerate(core_, Api::kGrpc, *std::move(valid),
                                             std::make_shared<GrpcSink>(writer->handle()),
                                             context->deadline(), received, &call);
  if (!started.ok()) {
    writer->handle()->Close(started);
    return writer;
  }
  *slot = call;
  return writer;
}

grpc::ServerUnaryReactor* GatewayService::Tokenize(grpc::CallbackServerContext* context,
                                                   const grpc::ByteBuffer* raw,
                                                   grpc::ByteBuffer* raw_response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  ced::v1::TokenizeRequest request;
  absl::Status status = ParseRequest(*raw, &request);
  if (status.ok()) {
    ced::v1::TokenizeResponse response;
    for (int id : core_->tokenizer().Encode(request.text(), request.add_bos())) {
      response.add_token_ids(id);
    }
    status = SerializeMessage(response, raw_response);
  }
  reactor->Finish(services::ToGrpc(status));
  return reactor;
}

namespace {

// One ModelInfo call waiting for the router's worker list.
struct ModelInfoCall {
  grpc::ClientContext context;
  ced::internal::ListWorkersRequest request;
  ced::internal::ListWorkersResponse workers;
};

void AddWorkerFacts(const ced::internal::ListWorkersResponse& workers, const ModelConfig& model,
                    ced::v1::ModelInfoResponse* response) {
  int prefill = 0, decode = 0;
  for (const ced::internal::WorkerStatus& w : workers.workers()) {
    if (!w.live()) continue;
    // The fleet's own fingerprint (the router keeps it consistent) wins
    // over the one computed from the gateway's config.json.
    response->set_model_fingerprint(w.info().model_fingerprint());
    if (w.info().role() == ced::internal::ROLE_PREFILL) {
      ++prefill;
      continue;
    }
    ++decode;
    response->set_kv_block_size(w.info().block_size());
    KvFormat format;
    if (kernels::ParseKvFormat(w.info().kv_format(), &format)) {
      response->set_kv_cache_dtype(std::string(kernels::KvFormatName(format)));
      response->set_kv_bytes_per_token(GlobalKvBytesPerToken(model, format));
      response->set_local_kv_bytes_per_sequence(LocalKvBytesPerSequence(model, format));
    }
  }
  response->set_num_prefill_workers(prefill);
  response->set_num_decode_workers(decode);
}

}  // namespace

void FillModelInfo(const GatewaySettings& settings, const Tokenizer& tokenizer,
                   ced::v1::ModelInfoResponse* response) {
  const ModelConfig& c = settings.model;
  response->set_model_name(settings.model_name);
  response->set_model_fingerprint(services::ModelFingerprint(c));
  response->set_vocab_size(c.vocab_size);
  response->set_hidden_size(c.hidden_size);
  response->set_num_layers(c.num_layers);
  response->set_num_heads(c.num_heads);
  response->set_num_kv_heads(c.num_kv_heads);
  response->set_head_dim(c.head_dim);
  response->set_intermediate_size(c.intermediate_size);
  response->set_num_encoder_layers(c.num_encoder_layers);
  response->set_sliding_window(c.sliding_window);
  response->set_replay_window(c.replay_window);
  response->set_exact_replay_window(c.ExactReplayWindow());
  for (int source : c.global_kv_source) response->add_global_kv_source(source);
  response->set_rope_theta(c.rope_theta);
  response->set_rms_norm_eps(c.rms_norm_eps);
  response->set_max_position(c.max_position);
  response->set_kv_cache_dtype(std::string(kernels::KvFormatName(c.kv_cache_dtype)));
  response->set_decoder_only(c.IsDecoderOnly());
  const Accounting accounting = ComputeAccounting(c);
  response->set_params_per_prompt_token(accounting.params_per_prompt_token);
  response->set_params_per_generated_token(accounting.params_per_generated_token);
  response->set_prompt_to_generated_ratio(accounting.prompt_to_generated_ratio);
  response->set_kv_bytes_per_token(GlobalKvBytesPerToken(c, c.kv_cache_dtype));
  response->set_local_kv_bytes_per_sequence(LocalKvBytesPerSequence(c, c.kv_cache_dtype));
  response->set_bos_token_id(tokenizer.bos_id());
  response->set_eos_token_id(tokenizer.eos_id());
  response->set_default_replay_on(static_cast<ced::v1::ReplayOn>(settings.default_replay_on));
  response->set_default_replay_mode(static_cast<ced::v1::ReplayMode>(settings.default_replay_mode));
}

grpc::ServerUnaryReactor* GatewayService::ModelInfo(grpc::CallbackServerContext* context,
                                                    const ced::v1::ModelInfoRequest*,
                                                    ced::v1::ModelInfoResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  FillModelInfo(core_->settings(), core_->tokenizer(), response);
  // The live worker counts (and the fleet's fingerprint and cache format)
  // come from the router; without an answer they stay 0.
  auto* call = new ModelInfoCall;
  call->context.set_deadline(std::min(
      context->deadline(), absl::ToChronoTime(absl::Now() + core_->settings().route_timeout)));
  const ModelConfig* model = &core_->settings().model;
  core_->router()->async()->ListWorkers(&call->context, &call->request, &call->workers,
                                        [call, reactor, response, model](grpc::Status status) {
                                          if (status.ok())
                                            AddWorkerFacts(call->workers, *model, response);
                                          delete call;
                                          reactor->Finish(grpc::Status::OK);
                                        });
  return reactor;
}

}  // namespace ced::gateway
