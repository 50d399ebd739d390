#include "services/common/router_client.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <utility>

#include "services/common/block_hash_wire.h"
#include "services/common/grpc_util.h"

namespace ced::services {

RouterClient::RouterClient(Options options)
    : options_(std::move(options)), interval_ms_(options_.default_interval_ms) {
  stub_ = ced::internal::Router::NewStub(MakeChannel(options_.router_address));
  if (options_.engine != nullptr && options_.engine->prefix_cache_enabled()) {
    options_.engine->EnablePrefixCacheEventLog(options_.event_log_capacity);
    const BlockHash& root = options_.engine->prefix_root_hash();
    std::string bytes;
    AppendBlockHashWire(root.hi, root.lo, &bytes);
    options_.worker.set_prefix_root_hash(bytes);
  } else {
    options_.engine = nullptr;
  }
}

void RouterClient::FillPrefixReport(ced::internal::PrefixCacheReport* report) {
  const PrefixCacheEventLog log =
      options_.engine->PrefixCacheEventsSince(prefix_acked_, options_.max_delta_events);
  report->set_end_seq(log.end_seq);
  std::string* added = report->mutable_added();
  if (!log.complete) {
    report->set_full(true);
    const size_t n = std::min(log.published.size(), options_.max_full_report_hashes);
    added->reserve(n * kBlockHashWireBytes);
    for (size_t i = 0; i < n; ++i) {
      AppendBlockHashWire(log.published[i].hi, log.published[i].lo, added);
    }
    return;
  }
  report->set_base_seq(prefix_acked_);
  // The net effect: a hash's last event decides.
  std::set<std::pair<uint64_t, uint64_t>> seen;
  for (auto it = log.events.rbegin(); it != log.events.rend(); ++it) {
    if (!seen.insert({it->hash.hi, it->hash.lo}).second) continue;
    AppendBlockHashWire(it->hash.hi, it->hash.lo,
                        it->published ? added : report->mutable_evicted());
  }
}

RouterClient::~RouterClient() { Stop(); }

void RouterClient::Start() { thread_ = std::thread([this] { Loop(); }); }

void RouterClient::ReportSoon() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    report_now_ = true;
  }
  cv_.notify_all();
}

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
  prefix_acked_ = 0;  // the router starts from nothing: send everything
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
      if (options_.engine != nullptr) FillPrefixReport(report.mutable_prefix_cache());
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      ced::internal::HeartbeatResponse resp;
      grpc::Status s = stub_->Heartbeat(&ctx, report, &resp);
      if (!s.ok() || resp.reregister()) registered_ = false;
      // The router's view: where the next delta starts (0: send a full list).
      if (s.ok() && !resp.reregister()) prefix_acked_ = resp.prefix_cache_seq();
      if (s.ok() && resp.report_freed_room() && options_.on_report_freed_room) {
        options_.on_report_freed_room();
      }
    }
    const int wait_ms = registered_ ? interval_ms_ : backoff_ms;
    if (!registered_) backoff_ms = std::min(backoff_ms * 2, 1000);
    const auto sent = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    // A report asked for early (ReportSoon) goes at most every 10 ms.
    cv_.wait_until(lock, sent + std::chrono::milliseconds(std::min(wait_ms, 10)),
                   [this] { return stop_; });
    cv_.wait_until(lock, sent + std::chrono::milliseconds(wait_ms),
                   [this] { return stop_ || (report_now_ && registered_); });
    report_now_ = false;
  }
}

}  // namespace ced::services
