#include "services/gateway/gateway_core.h"

#include <random>

#include "absl/strings/str_format.h"
#include "services/common/grpc_util.h"

namespace ced::gateway {

GatewayCore::GatewayCore(GatewaySettings settings, std::unique_ptr<Tokenizer> tokenizer,
                         GatewayMetrics metrics)
    : settings_(std::move(settings)),
      tokenizer_(std::move(tokenizer)),
      metrics_(metrics),
      router_(ced::internal::Router::NewStub(
          settings_.router_channel != nullptr ? settings_.router_channel
                                              : services::MakeChannel(settings_.router_address))),
      kv_waiters_([gauge = metrics_.kv_waiting](int n) {
        if (gauge != nullptr) gauge->Set(n);
      }) {
  std::random_device device;
  id_state_ = (static_cast<uint64_t>(device()) << 32) ^ device();
}

void GatewayCore::RouteAsync(grpc::ClientContext* context,
                             const ced::internal::RouteRequest* request,
                             ced::internal::RouteResponse* response,
                             std::function<void(grpc::Status)> done) {
  if (settings_.local_route) {
    done(services::ToGrpc(settings_.local_route(*request, response)));
    return;
  }
  router_->async()->Route(context, request, response, std::move(done));
}

std::shared_ptr<grpc::Channel> GatewayCore::Channel(const std::string& address) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<grpc::Channel>& channel = channels_[address];
  if (channel == nullptr) channel = services::MakeChannel(address);
  return channel;
}

std::string GatewayCore::TryAdmit(int64_t tokens) {
  absl::MutexLock lock(&mu_);
  std::string why;
  if (tokens > settings_.max_inflight_tokens) {
    why = absl::StrFormat(
        "gateway: the request needs %d tokens (prompt + max_tokens), more than the whole "
        "admission budget of %d (--max-inflight-tokens)",
        tokens, settings_.max_inflight_tokens);
    metrics_.rejected->WithLabelValues({"tokens"}).Increment();
  } else if (inflight_ >= settings_.max_inflight) {
    why = absl::StrFormat("gateway: %d requests in flight (--max-inflight); retry later",
                          settings_.max_inflight);
    metrics_.rejected->WithLabelValues({"requests"}).Increment();
  } else if (inflight_tokens_ + tokens > settings_.max_inflight_tokens) {
    why = absl::StrFormat(
        "gateway: %d tokens in flight, %d more would exceed %d (--max-inflight-tokens); retry "
        "later",
        inflight_tokens_, tokens, settings_.max_inflight_tokens);
    metrics_.rejected->WithLabelValues({"tokens"}).Increment();
  } else {
    ++inflight_;
    inflight_tokens_ += tokens;
  }
  metrics_.inflight_requests->Set(inflight_);
  metrics_.inflight_tokens->Set(static_cast<double>(inflight_tokens_));
  return why;
}

void GatewayCore::Release(int64_t tokens) {
  absl::MutexLock lock(&mu_);
  --inflight_;
  inflight_tokens_ -= tokens;
  metrics_.inflight_requests->Set(inflight_);
  metrics_.inflight_tokens->Set(static_cast<double>(inflight_tokens_));
}

int GatewayCore::inflight_requests() const {
  absl::MutexLock lock(&mu_);
  return inflight_;
}

int64_t GatewayCore::inflight_tokens() const {
  absl::MutexLock lock(&mu_);
  return inflight_tokens_;
}

void GatewayCore::CallStarted() {
  absl::MutexLock lock(&mu_);
  ++running_calls_;
}

void GatewayCore::CallEnded() {
  absl::MutexLock lock(&mu_);
  --running_calls_;
}

void GatewayCore::WaitForCalls() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* running) { return *running == 0; }, &running_calls_));
}

bool GatewayCore::ClaimRequestId(const std::string& id) {
  absl::MutexLock lock(&mu_);
  return inflight_ids_.insert(id).second;
}

void GatewayCore::ReleaseRequestId(const std::string& id) {
  absl::MutexLock lock(&mu_);
  inflight_ids_.erase(id);
}

std::string GatewayCore::NewRequestId() {
  absl::MutexLock lock(&mu_);
  // splitmix64: distinct ids without a shared generator's locking subtleties.
  uint64_t z = (id_state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return absl::StrFormat("gw-%016x", z ^ (z >> 31));
}

}  // namespace ced::gateway
