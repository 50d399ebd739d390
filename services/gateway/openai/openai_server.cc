#include "services/gateway/openai/openai_server.h"

#include <httplib.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <atomic>
#include <map>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engine/chat/chat_template.h"
#include "nlohmann/json.hpp"
#include "services/common/grpc_util.h"
#include "services/common/host_port.h"
#include "services/common/worker_util.h"
#include "services/gateway/call_threads.h"
#include "services/gateway/generate_call.h"
#include "services/gateway/openai/http_sink.h"
#include "services/gateway/openai/openai_protocol.h"
#include "services/gateway/openai/openai_stream.h"

namespace ced::gateway::openai {
namespace {

constexpr char kJson[] = "application/json";
// Pending connections the HTTP listener queues (the kernel caps it at
// net.core.somaxconn).
constexpr int kListenBacklog = 4096;

// The connections' threads: httplib serves each open connection on a thread
// of its task queue for the connection's life (a streamed response included).
// Its own ThreadPool starts all of them up front (the gateway's max_inflight
// + 8, 264 by default, in an idle gateway); these start on demand up to the
// same limit, and end after 30 s idle.
class ConnectionThreads : public httplib::TaskQueue {
 public:
  explicit ConnectionThreads(int max_threads) : threads_(absl::Seconds(30), max_threads) {}
  void enqueue(std::function<void()> fn) override { threads_.Run(std::move(fn)); }
  void shutdown() override { threads_.Shutdown(); }

 private:
  CallThreads threads_;
};

uint64_t RandomSeed() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

void SendError(httplib::Response& res, const absl::Status& status) {
  res.status = HttpStatusOf(status.code());
  // A busy gateway (429) or one without workers now (503, e.g. one being
  // restarted): clients that honour Retry-After (the openai SDKs do) come
  // back in a second instead of at once.
  if (res.status == 429 || res.status == 503) res.set_header("Retry-After", "1");
  res.set_content(ErrorJson(status), kJson);
}

// cert (+ chain), key and an optional client CA into `ctx`.
bool SetUpTls(const services::SecurityConfig& config, SSL_CTX& ctx) {
  SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
  BIO* cert_bio = BIO_new_mem_buf(config.server_cert_pem.data(),
                                  static_cast<int>(config.server_cert_pem.size()));
  bool ok = false;
  if (X509* cert = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr)) {
    ok = SSL_CTX_use_certificate(&ctx, cert) == 1;
    X509_free(cert);
    while (X509* extra = PEM_read_bio_X509(cert_bio, nullptr, nullptr, nullptr)) {
      if (SSL_CTX_add_extra_chain_cert(&ctx, extra) != 1) X509_free(extra);  // owned on success
    }
  }
  BIO_free(cert_bio);
  BIO* key_bio =
      BIO_new_mem_buf(config.server_key_pem.data(), static_cast<int>(config.server_key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio, nullptr, nullptr, nullptr);
  BIO_free(key_bio);
  ok = ok && key != nullptr && SSL_CTX_use_PrivateKey(&ctx, key) == 1 &&
       SSL_CTX_check_private_key(&ctx) == 1;
  EVP_PKEY_free(key);
  if (ok && !config.client_ca_pem.empty()) {
    X509_STORE* store = X509_STORE_new();
    BIO* ca_bio =
        BIO_new_mem_buf(config.client_ca_pem.data(), static_cast<int>(config.client_ca_pem.size()));
    int added = 0;
    while (X509* ca = PEM_read_bio_X509(ca_bio, nullptr, nullptr, nullptr)) {
      added += X509_STORE_add_cert(store, ca) == 1;
      X509_free(ca);
    }
    BIO_free(ca_bio);
    SSL_CTX_set_cert_store(&ctx, store);  // owns it
    SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    ok = added > 0;
  }
  ERR_clear_error();
  return ok;
}

}  // namespace

class OpenAiServer::Impl {
 public:
  Impl(const OpenAiServerOptions& options, GatewayCore* core, std::function<bool()> serving)
      : options_(options), core_(core), serving_(std::move(serving)) {}

  absl::Status Start();
  void StopAccepting() {
    if (server_ != nullptr) server_->stop();
  }
  void Shutdown(absl::Duration drain);
  const std::string& address() const { return address_; }

 private:
  // A request's call, registered while its connection serves it.
  struct Live {
    std::shared_ptr<GenerateCall> call;
  };
  void Route();
  bool Authorized(const httplib::Request& req, httplib::Response& res) const;
  void HandleGenerate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  // A request for n > 1 choices: n calls of the validated request, choice i
  // sampling with seed + i, answered together.
  void ServeChoices(const OpenAiRequest& parsed, const ValidatedRequest& valid,
                    const ResponseHeader& header, bool include_usage, absl::Time received,
                    const httplib::Request& req, httplib::Response& res);
  // What `parsed` asks of its response beyond the text, on `builder`:
  // logprobs, tool calls (the request offers tools; ids from `request_id`,
  // the call's or its choice's), echo.
  void Configure(const OpenAiRequest& parsed, const ValidatedRequest& valid,
                 const std::string& request_id, ResponseBuilder* builder) const;
  absl::Status PreparePrompt(OpenAiRequest* request) const;
  // `messages` through the chat template; InvalidArgument naming the
  // message or tool the template's error is about.
  absl::StatusOr<std::string> RenderChat(const std::vector<ChatMessage>& messages,
                                         const std::vector<std::string>& tools_json,
                                         bool add_generation_prompt) const;
  // vLLM's token-counting endpoints: a prompt or messages (through the chat
  // template, as a chat request has them) to token ids, and back.
  void HandleTokenize(const httplib::Request& req, httplib::Response& res) const;
  void HandleDetokenize(const httplib::Request& req, httplib::Response& res) const;
  // NotFound naming `model` when it is given and not this gateway's.
  absl::Status CheckModel(const std::string& model) const;
  uint64_t Register(std::shared_ptr<GenerateCall> call);
  void Unregister(uint64_t key);

  const OpenAiServerOptions options_;
  GatewayCore* const core_;
  const std::function<bool()> serving_;
  std::unique_ptr<ChatTemplate> chat_template_;
  ChatRenderOptions chat_options_;
  ToolCallFormat tool_format_ = ToolCallFormat::kNone;
  std::string fingerprint_;
  // /v1/models' "created": when this server started serving the model.
  const int64_t created_ = absl::ToUnixSeconds(absl::Now());
  std::unique_ptr<httplib::Server> server_;
  std::thread listen_thread_;
  std::string address_;
  int port_ = -1;  // the bound port, once listening

  absl::Mutex mu_;
  uint64_t next_key_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, std::shared_ptr<GenerateCall>> live_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

absl::Status OpenAiServer::Impl::Start() {
  auto chat = LoadChatTemplate(options_.model_dir, options_.chat_template_file, &chat_options_);
  if (!chat.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("chat template: ", chat.status().message()));
  }
  chat_template_ = *std::move(chat);
  if (options_.tool_call_parser == "auto") {
    tool_format_ = DetectToolCallFormat(*chat_template_, chat_options_);
  } else {
    absl::StatusOr<ToolCallFormat> format = ParseToolCallFormat(options_.tool_call_parser);
    if (!format.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tool-call-parser: must be auto, none, hermes or deepseek_v3, got \"",
                       options_.tool_call_parser, "\""));
    }
    tool_format_ = *format;
  }
  fingerprint_ = services::ModelFingerprint(core_->settings().model);
  if (options_.security.tls_server()) {
    const services::SecurityConfig security = options_.security;
    auto tls = std::make_unique<httplib::SSLServer>(
        [security](SSL_CTX& ctx) { return SetUpTls(security, ctx); });
    if (!tls->is_valid()) {
      return absl::InvalidArgumentError(
          "http: the TLS certificate, key or client CA cannot be used");
    }
    server_ = std::move(tls);
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  const int threads = std::max(4, options_.threads);
  server_->new_task_queue = [threads] { return new ConnectionThreads(threads); };
  server_->set_tcp_nodelay(true);
  server_->set_keep_alive_max_count(100000);
  server_->set_keep_alive_timeout(30);
  server_->set_payload_max_length(static_cast<size_t>(options_.max_request_bytes));
  server_->set_read_timeout(30, 0);
  server_->set_write_timeout(absl::ToInt64Seconds(options_.write_timeout), 0);
  Route();
  const absl::StatusOr<services::HostPort> hp = services::ParseHostPort(options_.listen_address);
  if (!hp.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("http: bad listen address '", options_.listen_address, "' (host:port)"));
  }
  const std::string& host = hp->host;
  int port = hp->port;
  if (host.find(':') != std::string::npos) server_->set_address_family(AF_INET6);
  // httplib's own options set SO_REUSEPORT, which lets a second server bind
  // the same port unnoticed: SO_REUSEADDR only (restarts over TIME_WAIT).
  // The library listens with a backlog of 5; the socket is kept to raise it.
  std::shared_ptr<int> listen_fd = std::make_shared<int>(-1);
  server_->set_socket_options([listen_fd](int fd) {
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    *listen_fd = fd;
  });
  if (port == 0) {
    port = server_->bind_to_any_port(host);
    if (port <= 0) port = -1;
  } else if (!server_->bind_to_port(host, port)) {
    port = -1;
  }
  if (port < 0) {
    return absl::UnavailableError(absl::StrCat("http: cannot listen on ", options_.listen_address));
  }
  // Clients that connect at once (a burst of streams) overflow a backlog of
  // 5: the kernel drops their handshakes and some see their connection reset.
  if (*listen_fd >= 0 && listen(*listen_fd, kListenBacklog) != 0) {
    return absl::UnavailableError(absl::StrCat("http: listen(", options_.listen_address,
                                               ", backlog ", kListenBacklog, ") failed"));
  }
  address_ = services::FormatHostPort(host, static_cast<uint16_t>(port));
  port_ = port;
  listen_thread_ = std::thread([this] { server_->listen_after_bind(); });
  return absl::OkStatus();
}

void OpenAiServer::Impl::Route() {
  httplib::Server& s = *server_;
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool ok = serving_ == nullptr || serving_();
    res.status = ok ? 200 : 503;
    res.set_content(ok ? R"({"status":"ok"})" : R"({"status":"no workers"})", kJson);
  });
  s.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res)) return;
    res.set_content(
        ModelsJson(core_->settings().model_name, created_, core_->settings().limits.max_position),
        kJson);
  });
  s.Get("/v1/models/(.+)", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res)) return;
    if (req.matches[1] != core_->settings().model_name) {
      SendError(res, WithField(absl::NotFoundError(absl::StrCat("model: '", req.matches[1].str(),
                                                                "' does not exist")),
                               "model"));
      return;
    }
    const std::string list =
        ModelsJson(core_->settings().model_name, created_, core_->settings().limits.max_position);
    const size_t open = list.find("[{") + 1;
    res.set_content(list.substr(open, list.rfind("}]") + 1 - open), kJson);
  });
  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGenerate(Endpoint::kCompletions, req, res);
  });
  s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGenerate(Endpoint::kChat, req, res);
  });
  s.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    if (Authorized(req, res)) HandleTokenize(req, res);
  });
  s.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    if (Authorized(req, res)) HandleDetokenize(req, res);
  });
  // Answers httplib produced itself (unknown path, body too large, a bad
  // request line) get OpenAI's error shape too.
  s.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message;
    if (res.status == 413) {
      message = absl::StrCat("request body larger than ", options_.max_request_bytes,
                             " bytes (--max-request-bytes)");
    } else if (res.status == 404) {
      // A known path asked with the wrong method: 405 with the one it takes.
      const bool post = req.path == "/v1/completions" || req.path == "/v1/chat/completions" ||
                        req.path == "/tokenize" || req.path == "/detokenize";
      const bool get = req.path == "/v1/models" || req.path == "/health" ||
                       absl::StartsWith(req.path, "/v1/models/");
      if (post || get) {
        res.status = 405;
        res.set_header("Allow", post ? "POST" : "GET");
        message = absl::StrCat(req.method, " ", req.path, ": method not allowed; use ",
                               post ? "POST" : "GET");
      } else {
        message = absl::StrCat("no such endpoint: ", req.method, " ", req.path);
      }
    } else {
      message = absl::StrCat("HTTP status ", res.status, " for ", req.method, " ", req.path);
    }
    res.set_content(ErrorJson(message, "invalid_request_error", "", ""), kJson);
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    res.status = 500;
    res.set_content(ErrorJson("internal error", "server_error", "", ""), kJson);
  });
}

bool OpenAiServer::Impl::Authorized(const httplib::Request& req, httplib::Response& res) const {
  const std::vector<std::string>& tokens = options_.security.bearer_tokens;
  if (tokens.empty()) return true;
  const std::string header = req.get_header_value("Authorization");
  const std::string bearer = "Bearer ";
  if (header.size() > bearer.size() && absl::StartsWith(header, bearer) &&
      services::TokenMatches(tokens, header.substr(bearer.size()))) {
    return true;
  }
  SendError(res, absl::UnauthenticatedError(
                     "missing or unknown bearer token (header Authorization: Bearer <token>)"));
  return false;
}

uint64_t OpenAiServer::Impl::Register(std::shared_ptr<GenerateCall> call) {
  absl::MutexLock lock(&mu_);
  const uint64_t key = next_key_++;
  live_.emplace(key, std::move(call));
  if (shut_down_) live_[key]->Cancel();
  return key;
}

void OpenAiServer::Impl::Unregister(uint64_t key) {
  absl::MutexLock lock(&mu_);
  live_.erase(key);
}

void OpenAiServer::Impl::Shutdown(absl::Duration drain) {
  StopAccepting();
  {
    absl::MutexLock lock(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return live_.empty(); };
    mu_.AwaitWithTimeout(absl::Condition(&idle), drain);
    shut_down_ = true;
    for (auto& [key, call] : live_) call->Cancel();
  }
  // Idle keep-alive connections would hold their threads (and this join)
  // until their timeout: end them now.
  if (port_ > 0) ShutdownAcceptedConnections(port_);
  if (listen_thread_.joinable()) listen_thread_.join();  // joins the connection threads
}

absl::StatusOr<std::string> OpenAiServer::Impl::RenderChat(
    const std::vector<ChatMessage>& messages, const std::vector<std::string>& tools_json,
    bool add_generation_prompt) const {
  ChatRenderOptions options = chat_options_;
  options.tools_json = tools_json;
  options.add_generation_prompt = add_generation_prompt;
  auto rendered = chat_template_->Render(messages, options);
  if (rendered.ok()) return rendered;
  // The renderer names the field first ("messages[2].role: ..."); an
  // error of the template itself (raise_exception) is about `messages`.
  const std::string message(rendered.status().message());
  std::string field = "messages";
  if (absl::StartsWith(message, "messages[") || absl::StartsWith(message, "tools[")) {
    field = message.substr(0, message.find(": "));
  }
  return WithField(absl::InvalidArgumentError(message), field);
}

absl::Status OpenAiServer::Impl::PreparePrompt(OpenAiRequest* request) const {
  ced::v1::GenerateRequest& g = request->generate;
  std::string text;
  bool add_bos = g.add_bos();
  if (request->endpoint == Endpoint::kChat) {
    ASSIGN_OR_RETURN(text, RenderChat(request->messages, request->tools_json,
                                      chat_options_.add_generation_prompt));
    add_bos = false;  // the template writes the BOS string when the model wants one
  } else if (g.prompt_token_ids_size() > 0) {
    text.clear();
  } else {
    text = g.prompt();
  }
  if (request->echo) {
    request->echo_text = g.prompt_token_ids_size() > 0
                             ? core_->tokenizer().Decode(std::vector<int>(
                                   g.prompt_token_ids().begin(), g.prompt_token_ids().end()))
                             : text;
  }
  if (g.prompt_token_ids_size() == 0) {
    if (text.empty() && !add_bos) {
      return InvalidField(request->endpoint == Endpoint::kChat ? "messages" : "prompt",
                          "renders to an empty prompt");
    }
    for (int id : core_->tokenizer().Encode(text, add_bos)) g.add_prompt_token_ids(id);
    g.clear_prompt();
  }
  if (g.max_tokens() == 0) {
    // OpenAI's defaults: 16 for completions, the rest of the context for chat.
    const int room = core_->settings().limits.max_position - g.prompt_token_ids_size();
    g.set_max_tokens(std::max(1, request->endpoint == Endpoint::kChat ? room : std::min(16, room)));
  }
  return absl::OkStatus();
}

absl::Status OpenAiServer::Impl::CheckModel(const std::string& model) const {
  if (model.empty() || model == core_->settings().model_name) return absl::OkStatus();
  return WithField(
      absl::NotFoundError(absl::StrCat("model: '", model, "' does not exist; this gateway serves '",
                                       core_->settings().model_name, "'")),
      "model");
}

void OpenAiServer::Impl::HandleTokenize(const httplib::Request& req, httplib::Response& res) const {
  absl::StatusOr<TokenizeBody> body = ParseTokenizeRequest(req.body);
  if (body.ok()) {
    if (absl::Status s = CheckModel(body->model); !s.ok()) body = s;
  }
  if (!body.ok()) {
    SendError(res, body.status());
    return;
  }
  // The ids a completion or chat request with these fields would get.
  std::vector<int> ids;
  if (body->chat) {
    absl::StatusOr<std::string> rendered =
        RenderChat(body->messages, body->tools_json, body->add_generation_prompt);
    if (!rendered.ok()) {
      SendError(res, rendered.status());
      return;
    }
    ids = core_->tokenizer().Encode(*rendered, /*add_bos=*/false);
  } else {
    ids = core_->tokenizer().Encode(body->prompt, body->add_special_tokens);
  }
  nlohmann::ordered_json j;
  j["count"] = ids.size();
  j["max_model_len"] = core_->settings().limits.max_position;
  j["tokens"] = ids;
  res.set_content(j.dump(), kJson);
}

void OpenAiServer::Impl::HandleDetokenize(const httplib::Request& req,
                                          httplib::Response& res) const {
  absl::StatusOr<DetokenizeBody> body = ParseDetokenizeRequest(req.body);
  if (body.ok()) {
    if (absl::Status s = CheckModel(body->model); !s.ok()) body = s;
  }
  if (body.ok()) {
    for (size_t i = 0; i < body->tokens.size(); ++i) {
      if (absl::Status s = CheckTokenId(absl::StrCat("tokens[", i, "]"), body->tokens[i],
                                        core_->settings().limits.vocab_size);
          !s.ok()) {
        body = s;
        break;
      }
    }
  }
  if (!body.ok()) {
    SendError(res, body.status());
    return;
  }
  const std::vector<int> ids(body->tokens.begin(), body->tokens.end());
  nlohmann::ordered_json j;
  j["prompt"] = core_->tokenizer().Decode(ids);
  res.set_content(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), kJson);
}

void OpenAiServer::Impl::HandleGenerate(Endpoint endpoint, const httplib::Request& req,
                                        httplib::Response& res) {
  const absl::Time received = absl::Now();
  if (!Authorized(req, res)) return;
  const GatewayMetrics& metrics = core_->metrics();
  const std::string client =
      services::FormatHostPort(req.remote_addr, static_cast<uint16_t>(req.remote_port));
  absl::StatusOr<OpenAiRequest> parsed = ParseRequest(endpoint, req.body);
  if (parsed.ok()) {
    // (The parser requires `model`: CheckModel's "not given" never applies.)
    if (absl::Status s = CheckModel(parsed->model); !s.ok()) parsed = s;
  }
  // The field the client wrote its prompt in, when the gateway tokenizes it
  // ("prompt" text, "messages"): the validation of the token ids it became
  // names that field, not prompt_token_ids, which the client never sent.
  std::string text_field;
  if (parsed.ok()) {
    if (endpoint == Endpoint::kChat) {
      text_field = "messages";
    } else if (parsed->generate.prompt_token_ids_size() == 0) {
      text_field = "prompt";
    }
    if (absl::Status s = PreparePrompt(&*parsed); !s.ok()) parsed = s;
  }
  // Without a seed OpenAI's API samples anew each time (a client's
  // "regenerate" gets another answer): a random one per request. (ced.v1
  // keeps seed 0: a gRPC request without one is reproducible.)
  if (parsed.ok() && !parsed->has_seed) parsed->generate.set_seed(RandomSeed());
  absl::StatusOr<ValidatedRequest> valid =
      parsed.ok()
          ? ValidateGenerateRequest(parsed->generate, core_->tokenizer(), core_->settings().limits)
          : absl::StatusOr<ValidatedRequest>(parsed.status());
  if (!valid.ok() && !text_field.empty() && FieldOf(valid.status()) == "prompt_token_ids") {
    std::string message(valid.status().message());
    constexpr absl::string_view kIds = "prompt_token_ids: ";
    if (absl::StartsWith(message, kIds)) {
      message = absl::StrCat(text_field, " (tokenized): ", message.substr(kIds.size()));
    }
    valid = WithField(absl::Status(valid.status().code(), message), text_field);
  }
  if (!valid.ok()) {
    const char* outcome =
        valid.status().code() == absl::StatusCode::kNotFound ? "not_found" : "invalid_argument";
    metrics.CountRequest(Api::kOpenAi, outcome);
    AccessRecord record =
        RefusedRecord(Api::kOpenAi, received, outcome, services::ToGrpc(valid.status()));
    record.client = client;
    if (parsed.ok()) record.request_id = parsed->generate.request_id();
    core_->LogAccess(record);
    SendError(res, valid.status());
    return;
  }
  if (valid->request_id.empty()) valid->request_id = core_->NewRequestId();
  valid->client = client;
  ResponseHeader header;
  header.endpoint = endpoint;
  header.id = absl::StrCat(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-", valid->request_id);
  header.created = absl::ToUnixSeconds(received);
  header.model = core_->settings().model_name;
  header.system_fingerprint = fingerprint_;
  const bool stream = parsed->stream;
  if (parsed->n > 1) {
    ServeChoices(*parsed, *valid, header, parsed->include_usage || options_.force_usage, received,
                 req, res);
    return;
  }
  auto builder = std::make_shared<ResponseBuilder>(
      std::move(header), stream && (parsed->include_usage || options_.force_usage));
  Configure(*parsed, *valid, valid->request_id, builder.get());

  auto sink = std::make_shared<HttpSink>();
  const auto deadline = absl::ToChronoTime(received + options_.request_timeout);
  std::shared_ptr<GenerateCall> call;
  const grpc::Status started =
      StartGenerate(core_, Api::kOpenAi, *std::move(valid), sink, deadline, received, &call);
  if (!started.ok()) {
    SendError(res, FromGrpcStatus(started));
    return;
  }
  const uint64_t key = Register(call);
  const int fd = req.ssl != nullptr ? SSL_get_fd(req.ssl)
                                    : FindConnectionSocket(req.local_addr, req.local_port,
                                                           req.remote_addr, req.remote_port);
  // The call ends by itself at its deadline; this bounds the wait for its close.
  const absl::Time give_up = received + options_.request_timeout + absl::Seconds(10);
  // Waits for the call's next messages; false once the client is gone (the
  // call is then cancelled and left to end on its own).
  auto next = [sink, call, fd, give_up](std::deque<ced::v1::GenerateResponse>* out) {
    const HttpSink::Wake wake = sink->Take(fd, give_up, out);
    if (wake == HttpSink::Wake::kReady) return true;
    call->Cancel();
    return false;
  };

  if (!stream) {
    std::deque<ced::v1::GenerateResponse> messages;
    bool connected = true;
    while (connected && !sink->closed().has_value()) {
      connected = next(&messages);
      for (const auto& m : messages) builder->Add(m);
      messages.clear();
    }
    Unregister(key);
    const std::optional<grpc::Status> status = sink->closed();
    if (!connected || !status.has_value()) return;  // nobody to answer
    if (!status->ok()) {
      SendError(res, FromGrpcStatus(*status));
      return;
    }
    res.set_content(builder->Body(), kJson);
    return;
  }

  // Streaming: errors before the request is placed (no worker, no room,
  // admission) are plain HTTP errors. Once a decode worker took it, the
  // headers go out while the prompt is computed, so that the first token
  // leaves from the thread that receives it (direct mode below) instead of
  // waking this one; a failure after that is an error event in the stream.
  auto first = std::make_shared<std::deque<ced::v1::GenerateResponse>>();
  while (first->empty() && !sink->closed().has_value() && !sink->started()) {
    if (!next(first.get())) {
      Unregister(key);
      return;
    }
  }
  if (first->empty() && !sink->started()) {
    Unregister(key);
    SendError(res, FromGrpcStatus(*sink->closed()));
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  // On plain TCP the tokens go straight from the call's thread to the
  // socket (HttpSink::StreamDirect); under TLS the socket
  // belongs to the TLS session, so this thread writes every event.
  const bool direct = req.ssl == nullptr && fd >= 0 && options_.direct_stream;
  const absl::Duration write_timeout = options_.write_timeout;
  res.set_chunked_content_provider(
      "text/event-stream",
      [builder, sink, call, first, next, direct, fd, give_up, write_timeout](
          size_t, httplib::DataSink& out) {
        if (direct) {
          std::string events;
          for (const auto& m : *first) builder->AppendEvents(m, &events);
          first->clear();
          if (!events.empty() && !out.write(events.data(), events.size())) {
            call->Cancel();
            return false;
          }
          const bool ended = sink->StreamDirect(
              fd, give_up, write_timeout,
              [builder](const ced::v1::GenerateResponse& m, std::string* to) {
                builder->AppendEvents(m, to);
              },
              [builder](const grpc::Status& status) { return builder->End(status); });
          if (!ended) {
            call->Cancel();  // the client is gone or unreachable
            return false;
          }
          out.done();
          return true;
        }
        std::deque<ced::v1::GenerateResponse> messages;
        messages.swap(*first);
        if (messages.empty() && !sink->closed().has_value() && !next(&messages)) return false;
        std::string events;
        for (const auto& m : messages) builder->AppendEvents(m, &events);
        const std::optional<grpc::Status> status = sink->closed();
        if (status.has_value()) events += builder->End(*status);
        if (!events.empty() && !out.write(events.data(), events.size())) {
          call->Cancel();  // the client is unreachable
          return false;
        }
        if (status.has_value()) out.done();
        return true;
      },
      [this, key](bool) { Unregister(key); });
}

namespace {

// The calls of one request's choices and what each has sent so far.
struct Choices {
  ResponseHeader header;
  std::vector<std::shared_ptr<GenerateCall>> calls;
  std::vector<std::shared_ptr<HttpSink>> sinks;
  std::vector<std::unique_ptr<ResponseBuilder>> builders;
  std::vector<uint64_t> keys;  // registered with the server
  bool cancelled = false;

  void CancelAll() {
    cancelled = true;
    for (const auto& call : calls) call->Cancel();
  }
  bool AllClosed() const {
    for (const auto& sink : sinks) {
      if (!sink->closed().has_value()) return false;
    }
    return true;
  }
  // Once one choice failed the others are cancelled: the request's status is
  // the first failure that is not such a cancellation (OK when none failed).
  // Only once AllClosed().
  grpc::Status Status() const {
    grpc::Status status = grpc::Status::OK;
    for (const auto& sink : sinks) {
      const grpc::Status s = *sink->closed();
      if (!s.ok() && (status.ok() || status.error_code() == grpc::StatusCode::CANCELLED)) {
        status = s;
      }
    }
    return status;
  }
  // A failed choice cancels the others.
  void CancelOnFailure() {
    if (cancelled) return;
    for (const auto& sink : sinks) {
      const std::optional<grpc::Status> s = sink->closed();
      if (s.has_value() && !s->ok()) {
        CancelAll();
        return;
      }
    }
  }
  // The prompt once (with what choice 0, the first to run, found cached),
  // every choice's completion tokens.
  UsageCounts Usage() const {
    UsageCounts usage = builders[0]->usage();
    for (size_t i = 1; i < builders.size(); ++i) {
      usage.completion_tokens += builders[i]->usage().completion_tokens;
    }
    return usage;
  }
  // Waits for the next messages of the choices still open; false once the
  // client is gone (every call is then cancelled).
  bool Next(int fd, absl::Time give_up, std::vector<std::deque<ced::v1::GenerateResponse>>* out) {
    out->assign(sinks.size(), {});
    std::vector<HttpSink*> open;
    std::vector<size_t> index;
    for (size_t i = 0; i < sinks.size(); ++i) {
      if (sinks[i]->closed().has_value()) continue;
      open.push_back(sinks[i].get());
      index.push_back(i);
    }
    if (open.empty()) return true;
    std::vector<std::deque<ced::v1::GenerateResponse>> got;
    if (HttpSink::TakeAny(open, fd, give_up, &got) != HttpSink::Wake::kReady) {
      CancelAll();
      return false;
    }
    for (size_t j = 0; j < open.size(); ++j) (*out)[index[j]] = std::move(got[j]);
    return true;
  }
};

}  // namespace

void OpenAiServer::Impl::Configure(const OpenAiRequest& parsed, const ValidatedRequest& valid,
                                   const std::string& request_id, ResponseBuilder* builder) const {
  if (valid.sampling.logprobs) builder->EnableLogprobs(&core_->tokenizer());
  if (parsed.endpoint == Endpoint::kChat && !parsed.tools_json.empty() &&
      !parsed.tool_choice_none && tool_format_ != ToolCallFormat::kNone) {
    builder->EnableToolCalls(tool_format_, request_id, parsed.parallel_tool_calls);
  }
  if (parsed.echo) builder->SetEcho(parsed.echo_text);
}

void OpenAiServer::Impl::ServeChoices(const OpenAiRequest& parsed, const ValidatedRequest& valid,
                                      const ResponseHeader& header, bool include_usage,
                                      absl::Time received, const httplib::Request& req,
                                      httplib::Response& res) {
  const int n = parsed.n;
  const bool stream = parsed.stream;
  auto st = std::make_shared<Choices>();
  st->header = header;
  auto unregister = [this, st] {
    for (uint64_t key : st->keys) Unregister(key);
    st->keys.clear();
  };
  const auto deadline = absl::ToChronoTime(received + options_.request_timeout);
  const int fd = req.ssl != nullptr ? SSL_get_fd(req.ssl)
                                    : FindConnectionSocket(req.local_addr, req.local_port,
                                                           req.remote_addr, req.remote_port);
  const absl::Time give_up = received + options_.request_timeout + absl::Seconds(10);
  std::deque<ced::v1::GenerateResponse> early;  // choice 0's, before the others started
  for (int i = 0; i < n; ++i) {
    if (i == 1) {
      // The other choices start once choice 0 has its second token (or has
      // ended): the decode worker then holds all of the prompt's K/V (the
      // first token may come from the prefill worker before it does), so
      // each of them finds the prompt in a prefix cache and computes only its
      // last partial block, not the whole prompt.
      int tokens = 0;
      while (tokens < 2 && !st->sinks[0]->closed().has_value()) {
        const size_t seen = early.size();
        if (st->sinks[0]->Take(fd, give_up, &early) != HttpSink::Wake::kReady) {
          st->CancelAll();  // the client is gone, or the call never ended
          unregister();
          return;
        }
        for (size_t k = seen; k < early.size(); ++k) tokens += early[k].token_ids_size();
      }
      const std::optional<grpc::Status> closed = st->sinks[0]->closed();
      if (early.empty() && closed.has_value() && !closed->ok()) {
        unregister();
        SendError(res, FromGrpcStatus(*closed));
        return;
      }
    }
    ValidatedRequest choice = valid;
    choice.request_id = absl::StrCat(valid.request_id, "-", i);
    const std::string choice_id = choice.request_id;  // choice is moved below
    choice.sampling.seed = valid.sampling.seed + static_cast<uint64_t>(i);
    auto sink = std::make_shared<HttpSink>();
    std::shared_ptr<GenerateCall> call;
    const grpc::Status started =
        StartGenerate(core_, Api::kOpenAi, std::move(choice), sink, deadline, received, &call);
    if (!started.ok()) {
      st->CancelAll();
      unregister();
      SendError(res, FromGrpcStatus(started));
      return;
    }
    st->keys.push_back(Register(call));
    st->calls.push_back(std::move(call));
    st->sinks.push_back(std::move(sink));
    st->builders.push_back(std::make_unique<ResponseBuilder>(header, stream && include_usage, i,
                                                             /*usage_chunk=*/false));
    Configure(parsed, valid, choice_id, st->builders.back().get());
  }
  std::vector<std::deque<ced::v1::GenerateResponse>> got;

  if (!stream) {
    for (const auto& m : early) st->builders[0]->Add(m);
    bool connected = true;
    while (connected && !st->AllClosed()) {
      connected = st->Next(fd, give_up, &got);
      for (int i = 0; i < n; ++i) {
        for (const auto& m : got[i]) st->builders[i]->Add(m);
      }
      st->CancelOnFailure();
    }
    unregister();
    if (!connected) return;  // nobody to answer
    if (const grpc::Status status = st->Status(); !status.ok()) {
      SendError(res, FromGrpcStatus(status));
      return;
    }
    std::vector<ChoiceResult> results;
    for (const auto& b : st->builders) results.push_back(b->result());
    res.set_content(CompletionJson(header, results, st->Usage()), kJson);
    return;
  }

  // Streaming: as for one choice, errors before every choice is placed are
  // plain HTTP errors; the headers go out once all are; the events of all
  // choices share the stream (each chunk names its choice's index), then one
  // usage chunk and one [DONE].
  auto first = std::make_shared<std::vector<std::deque<ced::v1::GenerateResponse>>>(n);
  (*first)[0] = std::move(early);
  while (true) {
    bool waiting = false;
    for (int i = 0; i < n; ++i) {
      if (st->sinks[i]->started() || !(*first)[i].empty()) continue;
      if (const std::optional<grpc::Status> closed = st->sinks[i]->closed()) {
        st->CancelAll();
        unregister();
        SendError(res, FromGrpcStatus(*closed));
        return;
      }
      waiting = true;
    }
    if (!waiting) break;
    if (!st->Next(fd, give_up, &got)) {
      unregister();
      return;
    }
    for (int i = 0; i < n; ++i) {
      for (auto& m : got[i]) (*first)[i].push_back(std::move(m));
    }
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st, first, fd, give_up, include_usage, n](size_t, httplib::DataSink& out) {
        std::vector<std::deque<ced::v1::GenerateResponse>> messages(n);
        messages.swap(*first);
        first->assign(n, {});
        bool any = false;
        for (const auto& m : messages) any = any || !m.empty();
        if (!any && !st->AllClosed() && !st->Next(fd, give_up, &messages)) return false;
        std::string events;
        for (int i = 0; i < n; ++i) {
          for (const auto& m : messages[i]) st->builders[i]->AppendEvents(m, &events);
        }
        st->CancelOnFailure();
        const bool done = st->AllClosed();
        if (done) {
          const grpc::Status status = st->Status();
          if (status.ok() && include_usage) {
            events += "data: " + UsageChunkJson(st->header, st->Usage()) + "\n\n";
          }
          events += st->builders[0]->End(status);
        }
        if (!events.empty() && !out.write(events.data(), events.size())) {
          st->CancelAll();  // the client is unreachable
          return false;
        }
        if (done) out.done();
        return true;
      },
      [unregister](bool) { unregister(); });
}

OpenAiServer::OpenAiServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OpenAiServer::~OpenAiServer() { Shutdown(absl::ZeroDuration()); }

absl::StatusOr<std::unique_ptr<OpenAiServer>> OpenAiServer::Start(
    const OpenAiServerOptions& options, GatewayCore* core, std::function<bool()> serving) {
  auto impl = std::make_unique<Impl>(options, core, std::move(serving));
  if (absl::Status s = impl->Start(); !s.ok()) return s;
  return std::unique_ptr<OpenAiServer>(new OpenAiServer(std::move(impl)));
}

const std::string& OpenAiServer::address() const { return impl_->address(); }
void OpenAiServer::StopAccepting() { impl_->StopAccepting(); }
void OpenAiServer::Shutdown(absl::Duration drain) { impl_->Shutdown(drain); }

}  // namespace ced::gateway::openai
