// A server-streaming reactor fed from any thread: producers Push messages and
// Close with a status; the reactor writes them in order, one at a time.
//
// Coalescing: with a `merge` function, a message pushed while another waits
// behind the one being written is merged into the waiting one when `merge`
// agrees (e.g. two token deltas become one): a client that reads slower
// than tokens come gets fewer, larger messages instead of a growing queue.
//
// Lifetime: gRPC owns the reactor until OnDone, which deletes it. Producers
// hold a std::shared_ptr<StreamWriter<T>::Handle>; pushes after the stream is
// done are dropped, so a producer never touches a deleted reactor.
#pragma once

#include <grpcpp/grpcpp.h>

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

namespace ced::services {

template <typename T>
class StreamWriter final : public grpc::ServerWriteReactor<T> {
 public:
  // The producer side; safe to use from any thread, before or after OnDone.
  class Handle {
   public:
    void Push(T message) {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      if (writer_ != nullptr) writer_->PushLocked(std::move(message));
    }
    void Close(const grpc::Status& status) {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      if (writer_ != nullptr) writer_->CloseLocked(status);
    }
    bool done() const {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      return writer_ == nullptr;
    }

   private:
    friend class StreamWriter;
    mutable std::recursive_mutex mu_;  // recursive: a reaction may run inline
    StreamWriter* writer_ = nullptr;
  };

  // `on_cancel` runs (once, on a gRPC thread) when the client cancels or the
  // deadline expires. `merge(waiting, next)` folds `next` into `waiting` and
  // returns true, or returns false (and leaves both) when they must stay
  // separate messages; it runs under the writer's lock.
  using Merge = std::function<bool(T* waiting, T* next)>;
  // `on_done` runs once when gRPC is done with the stream (whatever ended
  // it), after the handle stopped taking pushes.
  explicit StreamWriter(std::function<void()> on_cancel = nullptr, Merge merge = nullptr,
                        std::function<void()> on_done = nullptr)
      : handle_(std::make_shared<Handle>()),
        on_cancel_(std::move(on_cancel)),
        merge_(std::move(merge)),
        on_done_(std::move(on_done)) {
    handle_->writer_ = this;
  }
  std::shared_ptr<Handle> handle() const { return handle_; }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::recursive_mutex> lock(handle_->mu_);
    writing_ = false;
    if (!ok) {
      queue_.clear();
      if (!finished_) {
        finished_ = true;
        this->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "stream write failed"));
      }
      return;
    }
    queue_.pop_front();
    PumpLocked();
  }
  void OnCancel() override {
    if (on_cancel_) on_cancel_();
  }
  void OnDone() override {
    {
      std::lock_guard<std::recursive_mutex> lock(handle_->mu_);
      handle_->writer_ = nullptr;
    }
    if (on_done_) on_done_();
    delete this;
  }

 private:
  void PushLocked(T message) {
    if (closing_.has_value() || finished_) return;
    // queue_.front() is being written while writing_; a later one waits.
    if (merge_ && writing_ && queue_.size() >= 2 && merge_(&queue_.back(), &message)) {
      return;
    }
    queue_.push_back(std::move(message));
    PumpLocked();
  }
  void CloseLocked(const grpc::Status& status) {
    if (closing_.has_value() || finished_) return;
    closing_ = status;
    PumpLocked();
  }
  void PumpLocked() {
    if (writing_ || finished_) return;
    if (!queue_.empty()) {
      writing_ = true;
      this->StartWrite(&queue_.front());
      return;
    }
    if (closing_.has_value()) {
      finished_ = true;
      this->Finish(*closing_);
    }
  }

  std::shared_ptr<Handle> handle_;
  std::function<void()> on_cancel_;
  Merge merge_;
  std::function<void()> on_done_;
  std::deque<T> queue_;  // front is being written while writing_
  bool writing_ = false;
  bool finished_ = false;
  std::optional<grpc::Status> closing_;
};

}  // namespace ced::services
