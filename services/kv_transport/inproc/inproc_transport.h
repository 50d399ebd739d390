// In-process KV transport for tests: addresses are names in a process-global table
// and Send delivers synchronously on the caller's thread. The header still goes
// through EncodeHeader/DecodeHeader and the payload through the checksum, so the
// receive path matches the UCX one. Thread-safe.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "services/kv_transport/transport.h"

namespace ced::kv_transport {

class InprocTransport final : public KvTransport {
 public:
  static absl::StatusOr<std::unique_ptr<KvTransport>> Create(const TransportOptions& options);
  ~InprocTransport() override;

  absl::StatusOr<std::string> Listen(const std::string& address, KvSink* sink) override;
  absl::Status Send(const std::string& peer, const KvMessageHeader& h,
                    const std::vector<ConstSpan>& payload) override;
  absl::Status SendChecksummed(const std::string& peer, const KvMessageHeader& h,
                               const std::vector<ConstSpan>& payload) override;
  std::string name() const override { return "inproc"; }

  struct Endpoint;  // a registered receiver

 private:
  explicit InprocTransport(const TransportOptions& options) : options_(options) {}
  absl::Status SendMessage(const std::string& peer, const KvMessageHeader& h,
                           const std::vector<ConstSpan>& payload, bool checksum_given);

  const TransportOptions options_;
  std::shared_ptr<Endpoint> endpoint_;  // set by Listen
  std::string address_;
};

}  // namespace ced::kv_transport
