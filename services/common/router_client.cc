#include "services/common/router_client.h"

#include <chrono>
#include <cstdio>

#include "services/common/grpc_util.h"

namespace ced::services {

RouterClient::RouterClient(Options options)
    : options_(std::move(options)), interval_ms_(options_.default_interval_ms) {
  stub_ = ced::internal::Router::NewStub(MakeChannel(options_.router_address));
}

RouterClient::~RouterClient() { Stop(); }

void RouterClient::Start() { thread_ = std::thread([this] { Loop(); }); }

void RouterClient::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (registered_) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    ced::internal::DeregisterRequest req;
    req.set_worker_id(options_.worker.worker_id());
    ced::internal::DeregisterResponse resp;
    (void)stub_->Deregister(&ctx, req, &resp);
    registered_ = false;
  }
}

bool RouterClient::Register() {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  ced::internal::RegisterRequest req;
  *req.mutable_worker() = options_.worker;
  ced::internal::RegisterResponse resp;
  grpc::Status s = stub_->Register(&ctx, req, &resp);
  if (!s.ok()) {
    if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
        s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
      std::fprintf(stderr, "router rejected registration of %s: %s\n",
                   options_.worker.worker_id().c_str(), s.error_message().c_str());
    }
    return false;
  }
  if (resp.heartbeat_interval_ms() > 0) interval_ms_ = static_cast<int>(resp.heartbeat_interval_ms());
  registered_ = true;
  return true;
}

void RouterClient::Loop() {
  int backoff_ms = 100;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_) return;
    }
    bool ok = registered_ || Register();
    if (ok) {
      backoff_ms = 100;
      ced::internal::LoadReport report;
      if (options_.load) options_.load(&report);
      report.set_worker_id(options_.worker.worker_id());
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      ced::internal::HeartbeatResponse resp;
      grpc::Status s = stub_->Heartbeat(&ctx, report, &resp);
      if (!s.ok() || resp.reregister()) registered_ = false;
    }
    const int wait_ms = registered_ ? interval_ms_ : backoff_ms;
    if (!registered_) backoff_ms = std::min(backoff_ms * 2, 1000);
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(wait_ms), [this] { return stop_; });
  }
}

}  // namespace ced::services
