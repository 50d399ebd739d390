// Small helpers shared by the prefill and decode workers.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "ced/internal/common.pb.h"
#include "ced/internal/router.pb.h"
#include "engine/model/config.h"
#include "engine/runtime/engine.h"
#include "engine/sampling/sampler.h"

namespace ced::services {

// 64-bit FNV-1a of a request id: the numeric request id on the KV wire.
uint64_t RequestIdHash(const std::string& request_id);
// A stable digest of every config key: workers of one cluster must agree.
std::string ModelFingerprint(const ModelConfig& config);

// A worker that registers with a router must register an address its peers can
// reach: when `bound` listens on a wildcard host (0.0.0.0, ::) and `advertised`
// is empty, this is an InvalidArgument naming `flag`; otherwise OK.
absl::Status CheckAdvertisable(const std::string& bound, const std::string& advertised,
                               const std::string& flag);
// The memory this process may use, MiB: the machine's physical memory, or a
// smaller limit of its control group (a container's: cgroup v2 memory.max or
// v1 memory.limit_in_bytes). 0 when not known.
int64_t MemoryLimitMiB();
SamplingParams FromProto(const ced::internal::SamplingParams& p);
void ToProto(const SamplingParams& p, ced::internal::SamplingParams* out);

// A step's log-probabilities on the wire, and as a sequence tail carries
// them (the token's pair first, then the top ones).
void ToProto(const StepLogprobs& l, ced::internal::StepLogprobs* out);
std::vector<std::pair<int32_t, float>> ToPairs(const StepLogprobs& l);
StepLogprobs FromPairs(const std::vector<std::pair<int32_t, float>>& pairs);
// The registration every worker sends the router: id, role, gRPC address,
// KV pool shape, model fingerprint, cache format and transport name.
ced::internal::WorkerInfo MakeWorkerInfo(const Engine& engine, const std::string& worker_id,
                                         ced::internal::Role role,
                                         const std::string& grpc_address,
                                         const std::string& kv_transport);

// The FlushCache admin call of both workers: logs who asked (`who`: "decode
// worker", "prefill worker"), evicts every cached block of `engine` nobody
// holds (Engine::FlushPrefixCache: none of their spills is dropped), waits for
// the tiers' writes when asked, and answers with the counts. The work runs on
// a thread of its own, not on the gRPC callback thread; `engine` must outlive
// the server (whose shutdown waits for the answer).
grpc::ServerUnaryReactor* AnswerFlushCache(grpc::CallbackServerContext* ctx, const char* who,
                                           Engine& engine,
                                           const ced::internal::FlushCacheRequest& request,
                                           ced::internal::FlushCacheResponse* response);

// Validates a prompt of token ids (non-empty, in vocabulary); errors name `field`.
absl::Status ValidatePrompt(const google::protobuf::RepeatedField<int32_t>& ids,
                            const ModelConfig& config, const std::string& field);

}  // namespace ced::services
