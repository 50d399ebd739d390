#include "services/gateway/token_mux.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ced::gateway {

struct TokenMux::Entry {
  struct Event {
    bool end = false;
    ced::internal::TokenChunk chunk;
    grpc::Status status;
  };
  absl::Mutex mu;
  Receiver* receiver ABSL_GUARDED_BY(mu) = nullptr;
  void* key ABSL_GUARDED_BY(mu) = nullptr;
  std::deque<Event> kept ABSL_GUARDED_BY(mu);  // before Attach
  bool detached ABSL_GUARDED_BY(mu) = false;
  bool ended ABSL_GUARDED_BY(mu) = false;
};

TokenMux::TokenMux(std::string address, std::shared_ptr<grpc::Channel> channel,
                   std::string subscriber_id)
    : address_(std::move(address)),
      subscriber_id_(std::move(subscriber_id)),
      stub_(ced::internal::DecodeWorker::NewStub(channel)) {
  reader_ = std::thread([this] { ReadLoop(); });
}

TokenMux::~TokenMux() {
  ctx_.TryCancel();
  if (reader_.joinable()) reader_.join();
}

grpc::Status TokenMux::WaitOpen(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithDeadline(absl::Condition(
                            +[](State* s) { return *s != State::kOpening; }, &state_),
                        deadline);
  switch (state_) {
    case State::kOpen:
      return grpc::Status::OK;
    case State::kEnded:
      return end_status_;
    case State::kOpening:
      break;
  }
  return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                      absl::StrCat("the token stream of decode worker ", address_,
                                   " did not open in time"));
}

bool TokenMux::broken() const {
  absl::MutexLock lock(&mu_);
  return state_ == State::kEnded;
}

bool TokenMux::open() const {
  absl::MutexLock lock(&mu_);
  return state_ == State::kOpen;
}

std::shared_ptr<TokenMux::Entry> TokenMux::Register(const std::string& request_id) {
  absl::MutexLock lock(&mu_);
  if (state_ == State::kEnded) return nullptr;
  auto entry = std::make_shared<Entry>();
  if (!entries_.emplace(request_id, entry).second) return nullptr;
  return entry;
}

void TokenMux::Attach(Entry* entry, Receiver* receiver, void* key) {
  absl::MutexLock lock(&entry->mu);
  if (entry->detached) return;
  entry->receiver = receiver;
  entry->key = key;
  while (!entry->kept.empty()) {
    Entry::Event e = std::move(entry->kept.front());
    entry->kept.pop_front();
    if (e.end) {
      receiver->OnMuxEnd(key, e.status);
    } else {
      receiver->OnMuxChunk(key, &e.chunk);
    }
  }
}

void TokenMux::Detach(Entry* entry) {
  {
    absl::MutexLock lock(&entry->mu);
    if (entry->detached) return;
    entry->detached = true;
    entry->receiver = nullptr;
    entry->kept.clear();
  }
  absl::MutexLock lock(&mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->second.get() == entry) {
      entries_.erase(it);
      break;
    }
  }
}

void TokenMux::Deliver(const std::shared_ptr<Entry>& entry, ced::internal::TokenChunk* chunk,
                       const grpc::Status* end) {
  absl::MutexLock lock(&entry->mu);
  if (entry->detached || entry->ended) return;
  if (end != nullptr) entry->ended = true;
  if (entry->receiver == nullptr) {
    Entry::Event e;
    e.end = end != nullptr;
    if (end != nullptr) {
      e.status = *end;
    } else {
      e.chunk = std::move(*chunk);
    }
    entry->kept.push_back(std::move(e));
    return;
  }
  if (end != nullptr) {
    entry->receiver->OnMuxEnd(entry->key, *end);
  } else {
    entry->receiver->OnMuxChunk(entry->key, chunk);
  }
}

void TokenMux::ReadLoop() {
  ced::internal::SubscribeRequest request;
  request.set_subscriber_id(subscriber_id_);
  std::unique_ptr<grpc::ClientReader<ced::internal::TokenBatch>> reader =
      stub_->Subscribe(&ctx_, request);
  ced::internal::TokenBatch batch;
  bool opened = false;
  while (reader->Read(&batch)) {
    if (!opened) {
      opened = true;
      absl::MutexLock lock(&mu_);
      state_ = State::kOpen;
    }
    for (ced::internal::TokenChunk& chunk : *batch.mutable_chunks()) {
      std::shared_ptr<Entry> entry;
      {
        absl::MutexLock lock(&mu_);
        auto it = entries_.find(chunk.request_id());
        if (it == entries_.end()) continue;  // detached, or not this gateway's
        entry = it->second;
        if (chunk.ended()) entries_.erase(it);
      }
      if (chunk.ended()) {
        const grpc::Status status(static_cast<grpc::StatusCode>(chunk.status_code()),
                                  chunk.status_message());
        Deliver(entry, nullptr, &status);
      } else {
        Deliver(entry, &chunk, nullptr);
      }
    }
    batch.Clear();
  }
  const grpc::Status finished = reader->Finish();
  std::map<std::string, std::shared_ptr<Entry>> orphans;
  {
    absl::MutexLock lock(&mu_);
    state_ = State::kEnded;
    end_status_ = opened ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                        absl::StrCat("token stream ended: ",
                                                     finished.error_message()))
                         : finished;
    orphans.swap(entries_);
  }
  // Every request still on it is cut off: UNAVAILABLE (the call's migration
  // asks the worker whether it is gone).
  const grpc::Status lost(grpc::StatusCode::UNAVAILABLE,
                          absl::StrCat("token stream lost (", finished.error_message(), ")"));
  for (auto& [id, entry] : orphans) Deliver(entry, nullptr, &lost);
}

TokenMuxPool::~TokenMuxPool() {
  std::map<std::string, std::shared_ptr<TokenMux>> muxes;
  {
    absl::MutexLock lock(&mu_);
    muxes.swap(muxes_);
  }
  muxes.clear();  // cancels and joins each
}

bool TokenMuxPool::UnsupportedLocked(const std::string& address) {
  auto u = unsupported_.find(address);
  if (u == unsupported_.end()) return false;
  if (absl::Now() < u->second) return true;
  unsupported_.erase(u);
  return false;
}

std::shared_ptr<TokenMux> TokenMuxPool::GetOpen(const std::string& address, bool* must_open) {
  absl::MutexLock lock(&mu_);
  if (UnsupportedLocked(address)) {
    *must_open = false;
    return nullptr;
  }
  auto it = muxes_.find(address);
  if (it != muxes_.end() && it->second->open()) return it->second;
  *must_open = true;
  return nullptr;
}

std::shared_ptr<TokenMux> TokenMuxPool::Get(const std::string& address,
                                            const std::shared_ptr<grpc::Channel>& channel,
                                            const std::string& new_id, absl::Time deadline) {
  std::shared_ptr<TokenMux> mux, replaced;
  {
    absl::MutexLock lock(&mu_);
    if (UnsupportedLocked(address)) return nullptr;
    auto it = muxes_.find(address);
    if (it != muxes_.end() && !it->second->broken()) {
      mux = it->second;
    } else {
      if (it != muxes_.end()) replaced = std::move(it->second);
      mux = std::make_shared<TokenMux>(address, channel, new_id);
      muxes_[address] = mux;
    }
  }
  replaced.reset();  // its reader has ended: joins at once (unless a call still holds it)
  const grpc::Status open = mux->WaitOpen(deadline);
  if (open.ok()) return mux;
  absl::MutexLock lock(&mu_);
  if (open.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    // An older worker: per-request Streams; ask again in a while.
    unsupported_[address] = absl::Now() + absl::Minutes(1);
  }
  return nullptr;
}

}  // namespace ced::gateway
