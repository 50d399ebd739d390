#include "services/common/worker_util.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "services/common/host_port.h"

namespace ced::services {

int64_t MemoryLimitMiB() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  int64_t bytes = pages > 0 && page > 0 ? int64_t{pages} * page : 0;
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    int64_t limit = 0;
    // "max" (v2) or a number near 2^63 (v1) mean no limit.
    if (in >> limit && limit > 0 && (bytes == 0 || limit < bytes)) bytes = limit;
  }
  return bytes >> 20;
}

absl::Status CheckAdvertisable(const std::string& bound, const std::string& advertised,
                               const std::string& flag) {
  if (!advertised.empty()) return absl::OkStatus();
  absl::StatusOr<HostPort> hp = ParseHostPort(bound);
  const std::string host = hp.ok() ? hp->host : bound;
  if (host == "0.0.0.0" || host == "::" || host.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " is required when listening on the wildcard address '", bound,
                     "': the router would hand that address to peers, which cannot reach it"));
  }
  return absl::OkStatus();
}

uint64_t RequestIdHash(const std::string& request_id) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : request_id) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h == 0 ? 1 : h;
}

std::string ModelFingerprint(const ModelConfig& config) {
  return absl::StrFormat("%016x", RequestIdHash(ConfigToJson(config)));
}

SamplingParams FromProto(const ced::internal::SamplingParams& p) {
  SamplingParams s;
  s.temperature = p.temperature();
  s.top_k = p.top_k();
  s.top_p = p.top_p() == 0.0f ? 1.0f : p.top_p();
  s.seed = p.seed();
  s.step_offset = p.step_offset();
  s.presence_penalty = p.presence_penalty();
  s.frequency_penalty = p.frequency_penalty();
  s.repetition_penalty = p.repetition_penalty() == 0.0f ? 1.0f : p.repetition_penalty();
  s.logit_bias.assign(p.logit_bias().begin(), p.logit_bias().end());
  std::sort(s.logit_bias.begin(), s.logit_bias.end());  // a map's order is unspecified
  s.logprobs = p.logprobs();
  s.top_logprobs = p.top_logprobs();
  return s;
}

void ToProto(const SamplingParams& p, ced::internal::SamplingParams* out) {
  out->set_temperature(p.temperature);
  out->set_top_k(p.top_k);
  out->set_top_p(p.top_p);
  out->set_seed(p.seed);
  out->set_step_offset(p.step_offset);
  out->set_presence_penalty(p.presence_penalty);
  out->set_frequency_penalty(p.frequency_penalty);
  out->set_repetition_penalty(p.repetition_penalty);
  out->mutable_logit_bias()->clear();
  for (const auto& [token, bias] : p.logit_bias) (*out->mutable_logit_bias())[token] = bias;
  out->set_logprobs(p.logprobs);
  out->set_top_logprobs(p.top_logprobs);
}

void ToProto(const StepLogprobs& l, ced::internal::StepLogprobs* out) {
  out->mutable_token()->set_token_id(l.token.token);
  out->mutable_token()->set_logprob(l.token.logprob);
  for (const TokenLogprob& t : l.top) {
    auto* top = out->add_top();
    top->set_token_id(t.token);
    top->set_logprob(t.logprob);
  }
}

std::vector<std::pair<int32_t, float>> ToPairs(const StepLogprobs& l) {
  std::vector<std::pair<int32_t, float>> pairs{{l.token.token, l.token.logprob}};
  for (const TokenLogprob& t : l.top) pairs.emplace_back(t.token, t.logprob);
  return pairs;
}

StepLogprobs FromPairs(const std::vector<std::pair<int32_t, float>>& pairs) {
  StepLogprobs l;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const TokenLogprob t{pairs[i].first, pairs[i].second};
    if (i == 0) {
      l.token = t;
    } else {
      l.top.push_back(t);
    }
  }
  return l;
}

ced::internal::WorkerInfo MakeWorkerInfo(const Engine& engine, const std::string& worker_id,
                                         ced::internal::Role role, const std::string& grpc_address,
                                         const std::string& kv_transport) {
  ced::internal::WorkerInfo info;
  const CacheStats cs = engine.cache_stats();
  info.set_worker_id(worker_id);
  info.set_role(role);
  info.set_grpc_address(grpc_address);
  info.set_total_kv_blocks(cs.global_blocks_total);
  info.set_block_size(cs.block_size);
  info.set_model_fingerprint(ModelFingerprint(engine.config()));
  info.set_kv_format(std::string(kernels::KvFormatName(engine.kv_format())));
  info.set_kv_transport(kv_transport);
  return info;
}

absl::Status ValidatePrompt(const google::protobuf::RepeatedField<int32_t>& ids,
                            const ModelConfig& config, const std::string& field) {
  if (ids.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": must not be empty"));
  for (int i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= config.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(field, "[", i, "]: token id ", ids[i],
                                                     " is outside [0, ", config.vocab_size, ")"));
    }
  }
  if (ids.size() > config.max_position) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", ids.size(), " tokens exceed max_position ", config.max_position));
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AnswerFlushCache(grpc::CallbackServerContext* ctx, const char* who,
                                           Engine& engine,
                                           const ced::internal::FlushCacheRequest& request,
                                           ced::internal::FlushCacheResponse* response) {
  // The flush waits for the tiers' writes (seconds for a large cache): off
  // the gRPC callback thread, since callback handlers must not block (they
  // run on the library's few threads that serve every RPC of the process:
  // Reserve, Prefill, the token streams). The server's shutdown waits for
  // Finish, and the engine outlives the server; the thread touches nothing
  // after Finish.
  auto* reactor = ctx->DefaultReactor();
  std::thread([reactor, who, &engine, &request, response, peer = ctx->peer()]() {
    const int evicted = engine.FlushPrefixCache();
    if (request.wait_for_tiers()) engine.FlushKvTiers();
    const CacheStats cs = engine.cache_stats();
    response->set_evicted_blocks(evicted);
    response->set_cached_blocks(cs.cached_blocks);
    response->set_referenced_blocks(cs.cached_blocks - cs.evictable_blocks);
    std::fprintf(stderr,
                 "%s: prefix cache flushed by %s%s%s: %d blocks evicted, %d held by running "
                 "requests\n",
                 who, peer.c_str(), request.reason().empty() ? "" : ": ", request.reason().c_str(),
                 evicted, cs.cached_blocks - cs.evictable_blocks);
    reactor->Finish(grpc::Status::OK);
  }).detach();
  return reactor;
}

}  // namespace ced::services
