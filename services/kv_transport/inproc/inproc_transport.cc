#include "services/kv_transport/inproc/inproc_transport.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/common/status.h"
#include "services/kv_transport/checksum.h"
#include "services/kv_transport/payload.h"

namespace ced::kv_transport {

struct InprocTransport::Endpoint {
  absl::Mutex mu;  // serializes deliveries; held while the sink runs
  KvSink* sink ABSL_GUARDED_BY(mu) = nullptr;
  uint64_t max_payload_bytes = 0;
};

namespace {

struct Registry {
  absl::Mutex mu;
  std::map<std::string, std::shared_ptr<InprocTransport::Endpoint>> endpoints ABSL_GUARDED_BY(mu);
  uint64_t next_id ABSL_GUARDED_BY(mu) = 0;
};

Registry& GetRegistry() {
  static Registry* registry = new Registry;
  return *registry;
}

}  // namespace

absl::StatusOr<std::unique_ptr<KvTransport>> InprocTransport::Create(
    const TransportOptions& options) {
  return std::unique_ptr<KvTransport>(new InprocTransport(options));
}

InprocTransport::~InprocTransport() {
  if (endpoint_ == nullptr) return;
  Registry& registry = GetRegistry();
  {
    absl::MutexLock lock(&registry.mu);
    registry.endpoints.erase(address_);
  }
  absl::MutexLock lock(&endpoint_->mu);  // waits for a delivery in progress
  endpoint_->sink = nullptr;
}

absl::StatusOr<std::string> InprocTransport::Listen(const std::string& address, KvSink* sink) {
  if (sink == nullptr) return absl::InvalidArgumentError("inproc listen: null sink");
  if (address.empty()) return absl::InvalidArgumentError("inproc listen: empty address");
  Registry& registry = GetRegistry();
  absl::MutexLock lock(&registry.mu);
  if (endpoint_ != nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("inproc transport already listens on ", address_));
  }
  std::string bound = address;
  if (absl::EndsWith(address, ":0")) {
    bound = absl::StrCat(address.substr(0, address.size() - 1), "inproc", ++registry.next_id);
  }
  if (registry.endpoints.count(bound) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("inproc address ", bound, " is in use"));
  }
  auto endpoint = std::make_shared<Endpoint>();
  {
    absl::MutexLock endpoint_lock(&endpoint->mu);
    endpoint->sink = sink;
  }
  endpoint->max_payload_bytes = options_.max_payload_bytes;
  registry.endpoints[bound] = endpoint;
  endpoint_ = std::move(endpoint);
  address_ = bound;
  return bound;
}

absl::Status InprocTransport::Send(const std::string& peer, const KvMessageHeader& h,
                                   const std::vector<ConstSpan>& payload) {
  return SendMessage(peer, h, payload, /*checksum_given=*/false);
}

absl::Status InprocTransport::SendChecksummed(const std::string& peer, const KvMessageHeader& h,
                                              const std::vector<ConstSpan>& payload) {
  return SendMessage(peer, h, payload, /*checksum_given=*/true);
}

absl::Status InprocTransport::SendMessage(const std::string& peer, const KvMessageHeader& h,
                                          const std::vector<ConstSpan>& payload,
                                          bool checksum_given) {
  RETURN_IF_ERROR(ValidateHeader(h, options_.max_payload_bytes));
  RETURN_IF_ERROR(CheckSendSpans(payload, h.payload_bytes));
  KvMessageHeader sent = h;
  if (!checksum_given) sent.payload_checksum = ChecksumSpans(payload);
  if (options_.corrupt_payload_checksum_for_testing) sent.payload_checksum ^= 0xA5A5A5A5u;
  const KvHeaderBytes wire = EncodeHeader(sent);

  std::shared_ptr<Endpoint> endpoint;
  {
    Registry& registry = GetRegistry();
    absl::MutexLock lock(&registry.mu);
    auto it = registry.endpoints.find(peer);
    if (it != registry.endpoints.end()) endpoint = it->second;
  }
  if (endpoint == nullptr) {
    return absl::UnavailableError(absl::StrCat("inproc peer ", peer, " is not listening"));
  }
  absl::MutexLock lock(&endpoint->mu);
  if (endpoint->sink == nullptr) {
    return absl::UnavailableError(absl::StrCat("inproc peer ", peer, " went away"));
  }
  ASSIGN_OR_RETURN(const KvMessageHeader received,
                   DecodeHeader(absl::MakeConstSpan(wire), endpoint->max_payload_bytes));
  ASSIGN_OR_RETURN(const std::vector<MemSpan> spans, endpoint->sink->Accept(received));
  absl::Status status = CheckSinkSpans(spans, received.payload_bytes);
  if (status.ok()) {
    // Gather straight from the sender's spans into the sink's spans.
    size_t src_index = 0, src_offset = 0;
    for (const MemSpan& dst : spans) {
      size_t done = 0;
      while (done < dst.size) {
        const ConstSpan& src = payload[src_index];
        const size_t n = std::min(dst.size - done, src.size - src_offset);
        if (n > 0) std::memcpy(dst.data + done, src.data + src_offset, n);
        done += n;
        src_offset += n;
        if (src_offset == src.size) {
          ++src_index;
          src_offset = 0;
        }
      }
    }
    if (ChecksumSpans(spans) != received.payload_checksum) {
      status = absl::DataLossError(
          absl::StrCat("kv payload checksum mismatch for request ", received.request_id));
    }
  }
  endpoint->sink->Complete(received, status);
  return status;
}

}  // namespace ced::kv_transport
