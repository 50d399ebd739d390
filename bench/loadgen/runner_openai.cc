// ced-loadgen --api openai: each request is a streamed POST /v1/completions
// on the gateway's OpenAI-compatible HTTP API (cpp-httplib client, one thread
// per request in flight). TTFT is the first chunk with text; the token count
// comes from the usage chunk that ends the stream.
#include <httplib.h>

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "bench/loadgen/runner.h"
#include "nlohmann/json.hpp"

namespace ced::loadgen {
namespace {

using Json = nlohmann::json;

std::unique_ptr<httplib::Client> HttpClient(const std::string& target, double timeout_s) {
  auto client = std::make_unique<httplib::Client>("http://" + target);
  const auto us = static_cast<int64_t>(timeout_s * 1e6);
  client->set_connection_timeout(us / 1000000, us % 1000000);
  client->set_read_timeout(us / 1000000, us % 1000000);
  client->set_tcp_nodelay(true);
  return client;
}

// error.<key> of an OpenAI error object when it is a string, else `otherwise`
// (whatever the server sent: never an exception).
std::string ErrorField(const Json& doc, const char* key, const char* otherwise) {
  if (!doc.is_object()) return otherwise;
  const auto error = doc.find("error");
  if (error == doc.end() || !error->is_object()) return otherwise;
  const auto value = error->find(key);
  return value != error->end() && value->is_string() ? value->get<std::string>() : otherwise;
}

// OpenAI error codes back to the gRPC names the report uses.
std::string OutcomeOfHttp(int status) {
  switch (status) {
    case 400:
      return OutcomeName(grpc::StatusCode::INVALID_ARGUMENT);
    case 401:
      return OutcomeName(grpc::StatusCode::UNAUTHENTICATED);
    case 404:
      return OutcomeName(grpc::StatusCode::NOT_FOUND);
    case 429:
      return OutcomeName(grpc::StatusCode::RESOURCE_EXHAUSTED);
    case 503:
      return OutcomeName(grpc::StatusCode::UNAVAILABLE);
    case 504:
      return OutcomeName(grpc::StatusCode::DEADLINE_EXCEEDED);
    default:
      return absl::StrCat("HTTP_", status);
  }
}

}  // namespace

std::string MakeOpenAiBody(const PlannedRequest& planned, const RunOptions& options) {
  const ced::v1::GenerateRequest g = MakeGenerateRequest(planned, options);
  Json body;
  body["model"] = options.model;
  if (g.prompt_token_ids_size() > 0) {
    body["prompt"] = std::vector<int32_t>(g.prompt_token_ids().begin(), g.prompt_token_ids().end());
  } else {
    body["prompt"] = g.prompt();
  }
  body["max_tokens"] = g.max_tokens();
  body["ignore_eos"] = true;
  body["temperature"] = g.temperature();
  body["seed"] = g.seed();
  body["request_id"] = g.request_id();
  if (g.replay_on() == ced::v1::REPLAY_ON_PREFILL) body["replay_on"] = "prefill";
  if (g.replay_on() == ced::v1::REPLAY_ON_DECODE) body["replay_on"] = "decode";
  if (g.replay_on() == ced::v1::REPLAY_ON_AUTO) body["replay_on"] = "auto";
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  return body.dump();
}

absl::StatusOr<ced::v1::ModelInfoResponse> FetchOpenAiModel(const std::string& target,
                                                            double timeout_s) {
  auto result = HttpClient(target, timeout_s)->Get("/v1/models");
  if (!result || result->status != 200) {
    return absl::UnavailableError(
        absl::StrCat("gateway ", target, ": GET /v1/models failed",
                     result ? absl::StrCat(" (HTTP ", result->status, "): ", result->body) : ""));
  }
  const Json j = Json::parse(result->body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || j["data"].empty()) {
    return absl::UnavailableError(absl::StrCat("gateway ", target, ": /v1/models lists no model"));
  }
  ced::v1::ModelInfoResponse info;
  info.set_model_name(j["data"][0].value("id", ""));
  return info;
}

class LoadRunner::HttpCall final : public LoadRunner::Call {
 public:
  HttpCall(LoadRunner* owner, const PlannedRequest& planned)
      : owner_(owner), body_(MakeOpenAiBody(planned, owner->options_)) {
    record_.index = planned.index;
    record_.prompt_tokens = planned.prompt_tokens;
    record_.max_tokens = planned.output_tokens;
    if (owner->options_.concurrency == 0) record_.planned_s = planned.arrival_s;
  }

  void Start() override {
    std::thread([this] {
      Run();
      // Free this call first: the runner may go as soon as Finished() returns.
      LoadRunner* owner = owner_;
      Call* key = this;
      RequestRecord record = std::move(record_);
      delete this;
      owner->Finished(key, std::move(record));
    }).detach();
  }
  void Cancel() override { cancelled_.store(true); }

 private:
  void Run() {
    auto client = HttpClient(owner_->options_.target, owner_->options_.request_timeout_s);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body_;
    req.set_header("Content-Type", "application/json");
    std::string buffer;
    bool done = false;
    std::string error;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      if (cancelled_.load()) return false;
      buffer.append(data, n);
      for (size_t end; (end = buffer.find("\n\n")) != std::string::npos;) {
        const std::string event = buffer.substr(0, end);
        buffer.erase(0, end + 2);
        if (event.rfind("data: ", 0) != 0) continue;
        if (event == "data: [DONE]") {
          done = true;
          continue;
        }
        const Json j = Json::parse(event.substr(6), nullptr, false);
        if (!j.is_object()) continue;
        if (j.contains("error")) {
          error = ErrorField(j, "code", "ERROR");
          record_.error_message = ErrorField(j, "message", "");
          continue;
        }
        // Fields of other types than OpenAI's are the server's defect: the
        // stream fails as malformed, the load generator goes on.
        try {
          if (j.contains("usage") && j["usage"].is_object()) {
            record_.output_tokens = j["usage"].value("completion_tokens", 0);
            owner_->AddOutputTokens(record_.output_tokens);
          }
          if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty() &&
              record_.first_token_s < 0 && !j["choices"][0].value("text", "").empty()) {
            record_.first_token_s = owner_->Now();
          }
        } catch (const Json::exception& e) {
          error = "MALFORMED_EVENT";
          record_.error_message = e.what();
          return false;
        }
      }
      return true;
    };
    record_.sent_s = owner_->Now();
    auto result = client->send(req);
    record_.end_s = owner_->Now();
    if (cancelled_.load()) {
      record_.outcome = OutcomeName(grpc::StatusCode::CANCELLED);
    } else if (error == "MALFORMED_EVENT") {  // the receiver stopped the transfer
      record_.outcome = error;
    } else if (!result) {
      record_.outcome = absl::StrCat("HTTP_", httplib::to_string(result.error()));
    } else if (result->status != 200) {
      record_.outcome = OutcomeOfHttp(result->status);
      // The OpenAI error body, whichever way it came in.
      const Json body = Json::parse(result->body.empty() ? buffer : result->body, nullptr, false);
      record_.error_message = ErrorField(body, "message", "");
    } else if (!error.empty()) {
      record_.outcome = error;
    } else if (!done) {
      record_.outcome = "HTTP_TRUNCATED";
    }
  }

  LoadRunner* const owner_;
  const std::string body_;
  RequestRecord record_;
  std::atomic<bool> cancelled_{false};
};

LoadRunner::Call* LoadRunner::NewHttpCall(const PlannedRequest& planned) {
  return new HttpCall(this, planned);
}

}  // namespace ced::loadgen
