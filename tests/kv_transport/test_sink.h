// A KvSink for transport tests: one reservation (request id + transfer token) whose
// destination buffer is split into spans of the given sizes.
#pragma once

#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "services/kv_transport/transport.h"

namespace ced::kv_transport::testing {

class TestSink final : public KvSink {
 public:
  struct Completion {
    KvMessageHeader header;
    absl::Status status;
  };

  // Expects request `request_id` with `token`; lands payloads in spans of `span_sizes`.
  void Reserve(uint64_t request_id, uint64_t token, std::vector<size_t> span_sizes) {
    absl::MutexLock lock(&mu_);
    request_id_ = request_id;
    token_ = token;
    const size_t total = std::accumulate(span_sizes.begin(), span_sizes.end(), size_t{0});
    buffer_.assign(total + 1, 0xEE);  // +1 guard byte must stay untouched
    span_sizes_ = std::move(span_sizes);
  }
  // Test only: Accept returns spans this many bytes short.
  void ShortChangeSpans(size_t bytes) {
    absl::MutexLock lock(&mu_);
    short_change_ = bytes;
  }

  // Peers connect only to send for the reserved request.
  absl::Status Admit(const KvMessageHeader& h) override {
    absl::MutexLock lock(&mu_);
    if (h.request_id != request_id_ || h.transfer_token != token_) {
      return absl::PermissionDeniedError("no such reservation");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<MemSpan>> Accept(const KvMessageHeader& h) override {
    absl::MutexLock lock(&mu_);
    ++accepts_;
    if (h.request_id != request_id_) return absl::NotFoundError("unknown request");
    if (h.transfer_token != token_) {
      return absl::FailedPreconditionError("transfer token mismatch");
    }
    if (h.payload_bytes != buffer_.size() - 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("payload of ", h.payload_bytes, " bytes does not fit the reservation"));
    }
    std::vector<MemSpan> spans;
    size_t offset = 0;
    for (size_t size : span_sizes_) {
      spans.push_back({buffer_.data() + offset, size});
      offset += size;
    }
    if (short_change_ > 0 && !spans.empty()) spans.back().size -= short_change_;
    return spans;
  }

  void Complete(const KvMessageHeader& h, absl::Status status) override {
    absl::MutexLock lock(&mu_);
    completions_.push_back({h, std::move(status)});
  }

  // Waits (bounded) until `n` completions were recorded; returns them.
  std::vector<Completion> WaitForCompletions(size_t n, absl::Duration timeout = absl::Seconds(10)) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return completions_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
    return completions_;
  }
  // Waits (bounded) until Accept was called `n` times; returns whether it was.
  bool WaitForAccepts(int n, absl::Duration timeout = absl::Seconds(10)) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return accepts_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }
  std::vector<Completion> completions() {
    absl::MutexLock lock(&mu_);
    return completions_;
  }
  int accepts() {
    absl::MutexLock lock(&mu_);
    return accepts_;
  }
  // The landed bytes (without the guard byte) and the guard byte.
  std::vector<uint8_t> landed() {
    absl::MutexLock lock(&mu_);
    return std::vector<uint8_t>(buffer_.begin(), buffer_.end() - 1);
  }
  uint8_t guard() {
    absl::MutexLock lock(&mu_);
    return buffer_.back();
  }

 private:
  absl::Mutex mu_;
  uint64_t request_id_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t token_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint8_t> buffer_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> span_sizes_ ABSL_GUARDED_BY(mu_);
  size_t short_change_ ABSL_GUARDED_BY(mu_) = 0;
  int accepts_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Completion> completions_ ABSL_GUARDED_BY(mu_);
};

inline std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

// Splits `data` into consecutive ConstSpans of the given sizes (the rest goes last).
inline std::vector<ConstSpan> SplitInto(const std::vector<uint8_t>& data,
                                        const std::vector<size_t>& sizes) {
  std::vector<ConstSpan> spans;
  size_t offset = 0;
  for (size_t size : sizes) {
    spans.push_back({data.data() + offset, size});
    offset += size;
  }
  if (offset < data.size()) spans.push_back({data.data() + offset, data.size() - offset});
  return spans;
}

inline KvMessageHeader MakeHeader(uint64_t request_id, uint64_t token, uint64_t payload_bytes) {
  KvMessageHeader h;
  h.kind = KvMessageKind::kGlobalRange;
  h.request_id = request_id;
  h.transfer_token = token;
  h.token_begin = 0;
  h.token_end = 16;
  h.layer = 3;
  h.format = kernels::KvFormat::kBF16;
  h.payload_bytes = payload_bytes;
  return h;
}

}  // namespace ced::kv_transport::testing
