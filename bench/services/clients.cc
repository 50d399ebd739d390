#include "bench/services/clients.h"

#include <httplib.h>

#include <chrono>
#include <memory>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace ced::bench {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

absl::Status FromGrpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

}  // namespace

std::vector<int32_t> MakePrompt(int n, uint64_t salt) {
  std::mt19937_64 rng(salt * 0x9E3779B97F4A7C15ull + 1);
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = 32 + static_cast<int32_t>(rng() % 95);
  if (n > 0) p[0] = 32 + static_cast<int32_t>(salt % 95);
  if (n > 1) p[1] = 32 + static_cast<int32_t>((salt / 95) % 95);
  return p;
}

StreamResult GatewayGenerate(ced::v1::Gateway::Stub* gateway, const GenerateArgs& args) {
  StreamResult r;
  ced::v1::GenerateRequest req;
  req.set_request_id(args.request_id);
  *req.mutable_prompt_token_ids() = {args.prompt.begin(), args.prompt.end()};
  req.set_max_tokens(args.max_tokens);
  req.set_replay_on(args.replay_on);
  req.set_ignore_eos(args.ignore_eos);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
  const auto t0 = Clock::now();
  auto reader = gateway->Generate(&ctx, req);
  ced::v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    const double now = MsSince(t0);
    for (int i = 0; i < resp.token_ids_size(); ++i) r.token_ms.push_back(now);
    if (resp.token_ids_size() > 0) ++r.messages;
    if (resp.finish_reason() != ced::v1::FINISH_REASON_UNSPECIFIED) {
      r.gateway_timings = resp.timings();
      r.placement = resp.placement();
      if (resp.finish_reason() == ced::v1::FINISH_REASON_ERROR) {
        r.status = absl::InternalError(absl::StrCat("gateway: ", resp.finish_detail()));
      }
    }
  }
  const grpc::Status s = reader->Finish();
  r.end_ms = MsSince(t0);
  if (r.status.ok()) r.status = FromGrpc(s, "gateway Generate");
  return r;
}

StreamResult OpenAiGenerate(const std::string& http_address, const std::string& model,
                            const GenerateArgs& args) {
  StreamResult r;
  const char* replay = args.replay_on == ced::v1::REPLAY_ON_PREFILL  ? "prefill"
                       : args.replay_on == ced::v1::REPLAY_ON_DECODE ? "decode"
                                                                     : "auto";
  const nlohmann::json body = {{"model", model},
                               {"prompt", args.prompt},
                               {"max_tokens", args.max_tokens},
                               {"temperature", 0},
                               {"stream", true},
                               {"stream_options", {{"include_usage", true}}},
                               {"add_bos", false},
                               {"ignore_eos", args.ignore_eos},
                               {"replay_on", replay},
                               {"request_id", args.request_id}};
  // One keep-alive connection per thread and gateway, as an OpenAI client
  // keeps its connection pool: sequential requests do not pay a TCP connect.
  thread_local std::string client_address;
  thread_local std::unique_ptr<httplib::Client> client_ptr;
  if (client_ptr == nullptr || client_address != http_address) {
    client_ptr = std::make_unique<httplib::Client>("http://" + http_address);
    client_ptr->set_read_timeout(300, 0);
    client_ptr->set_tcp_nodelay(true);
    client_ptr->set_keep_alive(true);
    client_address = http_address;
  }
  httplib::Client& client = *client_ptr;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string pending;  // bytes after the last complete event
  double first_ms = -1, last_ms = -1;
  int completion_tokens = -1;
  std::string error;
  const auto t0 = Clock::now();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const double now = MsSince(t0);
    pending.append(data, n);
    size_t end;
    while ((end = pending.find("\n\n")) != std::string::npos) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0 || event == "data: [DONE]") continue;
      const nlohmann::json j = nlohmann::json::parse(event.substr(6), nullptr, false);
      if (j.is_discarded()) {
        error = "an event that is not JSON: " + event.substr(0, 200);
        return false;
      }
      if (j.contains("error")) {
        error = j["error"].dump();
        return false;
      }
      if (j.contains("usage") && j["usage"].is_object()) {
        completion_tokens = j["usage"].value("completion_tokens", -1);
      }
      if (j.contains("choices") && !j["choices"].empty() &&
          !j["choices"][0].value("text", "").empty()) {
        ++r.messages;
        if (first_ms < 0) first_ms = now;
        last_ms = now;
      }
    }
    return true;
  };
  const httplib::Result res = client.send(req);
  r.end_ms = MsSince(t0);
  if (!error.empty()) {
    r.status = absl::InternalError(absl::StrCat("openai stream: ", error));
  } else if (!res) {
    r.status = absl::UnavailableError(absl::StrCat(
        "POST http://", http_address, "/v1/completions: ", httplib::to_string(res.error())));
  } else if (res->status != 200) {
    r.status = absl::InternalError(
        absl::StrCat("POST /v1/completions: status ", res->status, ": ", res->body.substr(0, 300)));
  } else if (completion_tokens < 0) {
    r.status = absl::InternalError("POST /v1/completions: the stream carried no usage");
  } else if (completion_tokens > 0 && first_ms < 0) {
    r.status = absl::InternalError("POST /v1/completions: tokens counted but no text streamed");
  }
  if (!r.status.ok() || completion_tokens <= 0) return r;
  r.token_ms.resize(completion_tokens);
  for (int i = 0; i < completion_tokens; ++i) {
    r.token_ms[i] = completion_tokens == 1
                        ? first_ms
                        : first_ms + (last_ms - first_ms) * i / (completion_tokens - 1);
  }
  return r;
}

StreamResult DirectGenerate(const DirectTarget& target, const GenerateArgs& args,
                            bool local_prefill) {
  StreamResult r;
  const auto t0 = Clock::now();
  ced::internal::ReserveRequest reserve;
  reserve.set_request_id(args.request_id);
  *reserve.mutable_prompt_token_ids() = {args.prompt.begin(), args.prompt.end()};
  reserve.mutable_sampling()->set_temperature(0);
  reserve.set_max_tokens(args.max_tokens);
  reserve.set_ignore_eos(args.ignore_eos);
  reserve.mutable_replay()->set_replay_on(
      local_prefill ? ced::internal::REPLAY_ON_DECODE
                    : static_cast<ced::internal::ReplayOn>(args.replay_on));
  reserve.mutable_replay()->set_mode(ced::internal::REPLAY_MODE_BOUNDED);
  reserve.set_local_prefill(local_prefill);
  if (!local_prefill) reserve.set_prefill_worker_id(target.prefill_worker_id);
  ced::internal::ReserveResponse reserved;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    r.status = FromGrpc(target.decode->Reserve(&ctx, reserve, &reserved), "decode Reserve");
    if (!r.status.ok()) return r;
  }
  // Tokens may come from both streams (the first one from the prefill worker
  // when it replays): keep the earliest arrival of every step.
  absl::Mutex mu;
  std::vector<double> step_ms;
  auto arrived = [&](int step, double ms) {
    absl::MutexLock lock(&mu);
    if (step >= static_cast<int>(step_ms.size())) step_ms.resize(step + 1, -1);
    if (step_ms[step] < 0 || ms < step_ms[step]) step_ms[step] = ms;
  };
  grpc::ClientContext stream_ctx;
  stream_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
  ced::internal::StreamRequest sreq;
  sreq.set_request_id(args.request_id);
  auto reader = target.decode->Stream(&stream_ctx, sreq);

  absl::Status prefill_status;
  std::thread prefill_thread;
  if (!local_prefill) {
    prefill_thread = std::thread([&] {
      ced::internal::PrefillRequest p;
      p.set_request_id(args.request_id);
      *p.mutable_token_ids() = reserve.prompt_token_ids();
      p.set_decode_worker_id(target.decode_worker_id);
      p.set_decode_kv_address(target.decode_kv_address);
      p.set_transfer_token(reserved.transfer_token());
      *p.mutable_replay() = reserve.replay();
      *p.mutable_sampling() = reserve.sampling();
      p.set_skip_prefix_tokens(reserved.cached_prefix_tokens());
      p.set_kv_format(reserved.kv_format());
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
      auto pr = target.prefill->Prefill(&ctx, p);
      ced::internal::PrefillResponse resp;
      while (pr->Read(&resp)) {
        if (resp.has_first_token()) arrived(0, MsSince(t0));
        if (resp.has_done()) r.prefill_done = resp.done();
      }
      prefill_status = FromGrpc(pr->Finish(), "prefill Prefill");
    });
  }
  ced::internal::TokenChunk chunk;
  while (reader->Read(&chunk)) {
    const double now = MsSince(t0);
    for (int i = 0; i < chunk.token_ids_size(); ++i) arrived(chunk.start_step() + i, now);
    if (chunk.token_ids_size() > 0) ++r.messages;
    if (chunk.finish_reason() != ced::internal::FINISH_REASON_UNSPECIFIED) {
      r.decode_timings = chunk.timings();
      if (chunk.finish_reason() == ced::internal::FINISH_REASON_ERROR) {
        r.status = absl::InternalError(absl::StrCat("decode: ", chunk.finish_detail()));
      }
    }
  }
  const grpc::Status s = reader->Finish();
  if (prefill_thread.joinable()) prefill_thread.join();
  r.end_ms = MsSince(t0);
  if (r.status.ok()) r.status = FromGrpc(s, "decode Stream");
  if (r.status.ok()) r.status = prefill_status;
  for (double ms : step_ms) {
    if (ms >= 0) r.token_ms.push_back(ms);
  }
  return r;
}

}  // namespace ced::bench
