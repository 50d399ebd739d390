#include "tests/e2e/e2e_util.h"

#include <grpcpp/generic/generic_stub.h>

#include <future>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "ced/internal/router.grpc.pb.h"
#include "engine/model/presets.h"
#include "gtest/gtest.h"
#include "tests/e2e/http_get.h"

namespace ced::testing {

GenResult Generate(const std::string& gateway, const ced::v1::GenerateRequest& req,
                   const GenerateOptions& options) {
  auto stub =
      ced::v1::Gateway::NewStub(grpc::CreateChannel(gateway, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + options.deadline);
  auto reader = stub->Generate(&ctx, req);
  GenResult r;
  ced::v1::GenerateResponse resp;
  bool cancelled = false;
  while (reader->Read(&resp)) {
    r.tokens.insert(r.tokens.end(), resp.token_ids().begin(), resp.token_ids().end());
    r.logprobs.insert(r.logprobs.end(), resp.logprobs().begin(), resp.logprobs().end());
    r.text += resp.text();
    r.last = resp;
    ++r.messages;
    if (!cancelled && options.cancel_after_tokens >= 0 &&
        static_cast<int>(r.tokens.size()) >= options.cancel_after_tokens) {
      ctx.TryCancel();
      cancelled = true;
    }
  }
  r.status = reader->Finish();
  return r;
}

std::vector<GenResult> GenerateConcurrently(const std::string& gateway,
                                            const std::vector<ced::v1::GenerateRequest>& reqs) {
  std::vector<GenResult> got(reqs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < reqs.size(); ++i) {
    threads.emplace_back([&, i] { got[i] = Generate(gateway, reqs[i]); });
  }
  for (auto& t : threads) t.join();
  return got;
}

ColocatedEngine::ColocatedEngine(const std::string& model_dir, std::optional<KvFormat> kv_format) {
  EngineOptions o;
  o.model_dir = model_dir;
  o.kv_format = kv_format;
  auto engine = Engine::Create(o);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (engine.ok()) engine_ = *std::move(engine);
}

std::vector<int32_t> ColocatedEngine::Run(const std::vector<int32_t>& prompt, int max_tokens,
                                          ReplayMode mode, const SamplingParams& sampling,
                                          std::vector<std::vector<float>>* raw_logits) {
  std::vector<int32_t> out;
  if (engine_ == nullptr) return out;
  auto seq = engine_->CreateSequence(static_cast<int>(prompt.size()) + max_tokens);
  EXPECT_TRUE(seq.ok()) << seq.status();
  if (!seq.ok()) return out;
  PrefillOptions po;
  po.replay = mode;
  auto pre = engine_->Prefill(*seq, prompt, po);
  EXPECT_TRUE(pre.ok()) << pre.status();
  if (pre.ok()) {
    std::vector<float> logits = pre->logits;
    const int vocab = engine_->config().vocab_size;
    for (int step = 0; step < max_tokens; ++step) {
      if (raw_logits != nullptr) raw_logits->push_back(logits);
      // The logit adjustments as their definitions say, computed here from
      // the prompt and the tokens generated so far (not with the sampler's
      // SamplingHistory): bias, repetition penalty, OpenAI's penalties.
      for (const auto& [t, bias] : sampling.logit_bias) logits[t] += bias;
      if (sampling.repetition_penalty != 1.0f) {
        std::set<int32_t> seen(prompt.begin(), prompt.end());
        seen.insert(out.begin(), out.end());
        for (int32_t t : seen) {
          logits[t] = logits[t] > 0 ? logits[t] / sampling.repetition_penalty
                                    : logits[t] * sampling.repetition_penalty;
        }
      }
      if (sampling.presence_penalty != 0 || sampling.frequency_penalty != 0) {
        std::map<int32_t, int> seen;
        for (int32_t t : out) ++seen[t];
        for (const auto& [t, c] : seen) {
          logits[t] -=
              static_cast<float>(c) * sampling.frequency_penalty + sampling.presence_penalty;
        }
      }
      out.push_back(SampleToken(logits.data(), vocab, sampling, static_cast<uint64_t>(step)));
      if (step + 1 == max_tokens) break;
      DecodeInput in{*seq, out.back()};
      auto next = engine_->Decode(absl::MakeConstSpan(&in, 1));
      EXPECT_TRUE(next.ok()) << next.status();
      if (!next.ok()) break;
      logits = *std::move(next);
    }
  }
  EXPECT_TRUE(engine_->ReleaseSequence(*seq).ok());
  return out;
}

std::string MakeModelDir(const std::string& preset) {
  const std::string dir = ::testing::TempDir() + "/ced_e2e_" + preset;
  MakeModelOptions mo;
  mo.preset = preset;
  mo.seed = 3;
  mo.out_dir = dir;
  const absl::Status s = MakeModel(mo);
  EXPECT_TRUE(s.ok()) << s;
  return dir;
}

std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 37 + salt * 11) % 256);
  return p;
}

ced::v1::GenerateRequest Request(const std::vector<int32_t>& prompt, int max_tokens,
                                 ced::v1::ReplayOn on) {
  ced::v1::GenerateRequest req;
  for (int32_t t : prompt) req.add_prompt_token_ids(t);
  req.set_max_tokens(max_tokens);
  req.set_ignore_eos(true);
  req.set_replay_on(on);
  return req;
}

std::optional<double> MetricValue(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 &&
        line[series.size()] == ' ') {
      try {
        return std::stod(line.substr(series.size() + 1));
      } catch (const std::exception&) {
        return std::nullopt;
      }
    }
  }
  return std::nullopt;
}

std::optional<double> ScrapeMetric(const std::string& metrics_address, const std::string& series) {
  int status = 0;
  const std::string text = HttpGet(metrics_address, "/metrics", &status);
  if (status != 200) return std::nullopt;
  return MetricValue(text, series);
}

bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout,
               std::chrono::milliseconds poll) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(poll);
  }
}

int HealthStatus(const std::string& address, const std::string& service) {
  grpc::GenericStub stub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  // HealthCheckRequest{service = 1}: tag 0x0a, length, bytes (names < 128 bytes).
  std::string bytes;
  if (!service.empty())
    bytes = std::string("\x0a", 1) + static_cast<char>(service.size()) + service;
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  if (!done.get_future().get().ok()) return -1;
  std::vector<grpc::Slice> slices;
  std::string out;
  if (response.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices)
      out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  // HealthCheckResponse{status = 1}: "" (UNKNOWN) or 08 <enum>.
  if (out.empty()) return 0;
  if (out.size() == 2 && out[0] == '\x08') return out[1];
  return -1;
}

std::optional<ced::internal::ListWorkersResponse> ListWorkers(const std::string& router) {
  auto stub = ced::internal::Router::NewStub(
      grpc::CreateChannel(router, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  ced::internal::ListWorkersResponse resp;
  if (!stub->ListWorkers(&ctx, {}, &resp).ok()) return std::nullopt;
  return resp;
}

bool AllWorkersIdle(const ced::internal::ListWorkersResponse& workers, std::string* why) {
  if (workers.workers_size() == 0) {
    if (why != nullptr) *why = "the router lists no workers";
    return false;
  }
  for (const ced::internal::WorkerStatus& w : workers.workers()) {
    const ced::internal::LoadReport& l = w.load();
    const bool idle = l.free_kv_blocks() == l.total_kv_blocks() && l.running_sequences() == 0 &&
                      l.waiting_sequences() == 0 && l.queued_prefill_tokens() == 0 &&
                      l.inflight_prefill_tokens() == 0 && w.pending_prefill_tokens() == 0 &&
                      w.pending_kv_blocks() == 0 && w.pending_sequences() == 0;
    if (!idle) {
      if (why != nullptr) *why = w.DebugString();
      return false;
    }
  }
  return true;
}

}  // namespace ced::testing
