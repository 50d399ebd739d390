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
      router_(ced::internal::Router::NewStub(services::MakeChannel(settings_.router_address))) {
  std::random_device device;
  id_state_ = (static_cast<uint64_t>(device()) << 32) ^ device();
}

std::shared_ptr<grpc::Channel> GatewayCore::Channel(const std::string& address) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<grpc::Channel>& channel = channels_[address];
  if (channel == nullptr) channel = services::MakeChannel(address);
  return channel;
}

bool GatewayCore::TryAdmit() {
  absl::MutexLock lock(&mu_);
  if (inflight_ >= settings_.max_inflight) return false;
  ++inflight_;
  metrics_.inflight_requests->Set(inflight_);
  return true;
}

void GatewayCore::Release() {
  absl::MutexLock lock(&mu_);
  --inflight_;
  metrics_.inflight_requests->Set(inflight_);
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

std::string GatewayCore::NewRequestId() {
  absl::MutexLock lock(&mu_);
  // splitmix64: distinct ids without a shared generator's locking subtleties.
  uint64_t z = (id_state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return absl::StrFormat("gw-%016x", z ^ (z >> 31));
}

}  // namespace ced::gateway
