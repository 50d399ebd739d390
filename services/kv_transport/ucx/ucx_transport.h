// KV transport over UCX (UCP active messages).
//
// One UCP context + worker per transport, driven by a single progress thread that
// owns every UCP object; public methods post commands to it. Peers find each
// other by exchanging UCP worker addresses over a small TCP handshake on the
// listener's public port (ucx_exchange.h); both sides then create endpoints from
// the other's worker address, so UCX picks every lane UCX_TLS allows (shared
// memory and CMA between workers on one host, tcp across hosts). A message is
// one active message: the AM header carries the 64-byte KvMessageHeader, a send
// id and the connection's id and secret (granted by the listener), the payload
// is sent as contiguous or IOV data. The receiver checks the connection,
// validates the header, asks the sink for destination spans, lands eager data by
// copy and rendezvous data by ucp_am_recv_data_nbx straight into the spans,
// verifies the checksum, calls Complete, and replies on its own endpoint to the
// sender with a small acknowledgement AM carrying its verdict. Where the
// rendezvous runs over active-message lanes (UCX copies each fragment out of
// its own buffers), the payload is received through a generic datatype whose
// unpack copies and checksums each fragment in one pass; on RMA lanes UCX lands
// it zero-copy and it is verified afterwards, on the progress thread or, with 4
// CPUs or more, on a verifier thread (in arrival order). The sender computes its
// checksum on the calling thread unless the producer gave it. Many Sends (each
// waiting for its own verdict) may be in flight on one connection.
//
// A Send that times out force-closes its connection (other Sends on it fail with
// UNAVAILABLE) so that the payload is never referenced after Send returns.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "services/kv_transport/transport.h"
#include "services/kv_transport/ucx/ucx_exchange.h"
#include "services/kv_transport/ucx/ucx_util.h"

namespace ced::kv_transport::ucx {

class UcxTransport final : public KvTransport {
 public:
  static absl::StatusOr<std::unique_ptr<KvTransport>> Create(const TransportOptions& options);
  ~UcxTransport() override;

  absl::StatusOr<std::string> Listen(const std::string& address, KvSink* sink) override;
  absl::Status Send(const std::string& peer, const KvMessageHeader& h,
                    const std::vector<ConstSpan>& payload) override;
  absl::Status SendChecksummed(const std::string& peer, const KvMessageHeader& h,
                               const std::vector<ConstSpan>& payload) override;
  void SendAsync(const std::string& peer, const KvMessageHeader& h,
                 const std::vector<ConstSpan>& payload, bool checksum_given,
                 SendDone done) override;
  std::string name() const override { return "ucx"; }

 private:
  struct SendOp;
  struct RecvOp;
  struct EpContext;

  explicit UcxTransport(const TransportOptions& options);
  absl::Status SendMessage(const std::string& peer, const KvMessageHeader& h,
                           const std::vector<ConstSpan>& payload, bool checksum_given);
  // The operation of one Send / SendAsync, checked and ready to post.
  absl::StatusOr<std::shared_ptr<SendOp>> PrepareSend(const std::string& peer,
                                                      const KvMessageHeader& h,
                                                      const std::vector<ConstSpan>& payload,
                                                      bool checksum_given);
  absl::Status Init();
  absl::StatusOr<SockAddr> ResolvePeer(const std::string& peer);

  // Queues `fn` for the progress thread (thread-safe).
  void Post(std::function<void()> fn);
  // Runs on the progress thread only (everything below).
  void ProgressLoop();
  bool DrainCommands();
  void Shutdown();

  // Endpoints (ucx_send.cc).
  // The connection to op's peer, or a new one whose address exchange presents
  // op's header.
  EpContext* GetOrConnect(const SendOp& op);
  // The client's address exchange finished (posted by its thread).
  void OnExchanged(EpContext* ctx, absl::StatusOr<ExchangeResult> result);
  // The listener's side of an exchange: an endpoint to the client and its grant.
  absl::StatusOr<ConnectionGrant> AcceptConnection(const KvMessageHeader& first,
                                                   const std::string& client_address);
  // Creates ctx->ep toward a UCP worker address, with peer error handling.
  ucs_status_t CreateEp(EpContext* ctx, const std::string& worker_address);
  // Fails the Sends queued on a connection that never got an endpoint.
  void FailWaiting(EpContext* ctx, const absl::Status& status);
  // Fails the connection's Sends and forgets it (FailEp also closes its endpoint,
  // forcibly; RetireEp leaves the endpoint to UCX's own failure report, or closes
  // it after kRetireGrace).
  void MarkFailed(EpContext* ctx, const absl::Status& status);
  void FailEp(EpContext* ctx, const absl::Status& status);
  void RetireEp(EpContext* ctx, const absl::Status& status);
  void CloseRetiredEps();
  void CloseFailedEps();

  // Sending (ucx_transport.cc).
  void OnConnected(EpContext* ctx, ucs_status_t status);
  void StartSend(const std::shared_ptr<SendOp>& op);
  void IssueSend(SendOp* op);
  void AbortSend(const std::shared_ptr<SendOp>& op);
  void MarkSent(SendOp* op, ucs_status_t status);
  void Settle(SendOp* op, absl::Status verdict);
  // Once an op is done: forgets it and runs its SendAsync callback.
  void Finish(SendOp* op);
  // SendAsync deadlines that have passed: abort those sends.
  void ExpireSends();

  // Receiving (ucx_receive.cc).
  ucs_status_t OnData(const void* header, size_t header_length, void* data, size_t length,
                      const ucp_am_recv_param_t* param);
  ucs_status_t OnAck(const void* header, size_t header_length, const void* data, size_t length,
                     const ucp_am_recv_param_t* param);
  ucs_status_t OnBye(const void* header, size_t header_length);
  // Tells every accepted connection's sender that this transport shuts down.
  void SayGoodbye();
  // Logs a connection's lanes once, if TransportOptions::log_connections.
  void Describe(EpContext* ctx);
  void FinishRecv(RecvOp* op, ucs_status_t status);
  // Whether payloads arriving on `ctx` are received through fused_dt_
  // (TransportOptions::fused_receive; decided once per connection).
  bool FusedReceive(EpContext* ctx);
  // The generic datatype's callbacks: `state` is the RecvOp.
  static void* FusedStartUnpack(void* context, void* buffer, size_t count);
  static size_t FusedPackedSize(void* state);
  static ucs_status_t FusedUnpack(void* state, size_t offset, const void* src, size_t length);
  static void FusedFinish(void* state);
  // The checksum of a fused receive's landed pieces, or DATA_LOSS if they do not
  // cover the payload exactly.
  static absl::StatusOr<uint32_t> FusedChecksum(RecvOp* op);
  // Hands `op`'s checksum to the verifier thread, which posts OnVerified back.
  void QueueVerify(RecvOp* op);
  void OnVerified(RecvOp* op, uint32_t checksum);
  // Completes `op` with `status` (sink Complete + acknowledgement) and frees it.
  void ConcludeRecv(RecvOp* op, const absl::Status& status);
  // The verifier thread (started by Listen) and its stop, which joins it; jobs it
  // had not started are left to the caller.
  void VerifierLoop();
  bool UseVerifierThread() const;  // TransportOptions::verifier_threads
  void StopVerifier();
  // Acknowledges a data message on `ep` (AckHeader's send id and connection
  // fields from `ack`; code and message from `status`): deferred until the
  // current progress call returns, and dropped if the endpoint failed meanwhile.
  void SendAck(ucp_ep_h ep, AckHeader ack, const absl::Status& status);
  // Sends an acknowledgement now. Only for an endpoint this transport does not
  // own (a message's reply endpoint, valid during its callback).
  void SendAckNow(ucp_ep_h ep, AckHeader ack, const absl::Status& status);
  // Runs what UCX callbacks deferred (UCX must not be re-entered with a send
  // from inside some of its callbacks, e.g. a flush completing from its pending
  // queue). Returns whether anything ran.
  bool RunDeferred();

  // UCX C callbacks.
  static void EpErrorCb(void* arg, ucp_ep_h ep, ucs_status_t status);
  static void FlushCb(void* request, ucs_status_t status, void* user_data);
  static void SendCb(void* request, ucs_status_t status, void* user_data);
  static void AckSentCb(void* request, ucs_status_t status, void* user_data);
  static void RecvCb(void* request, ucs_status_t status, size_t length, void* user_data);
  static ucs_status_t DataCb(void* arg, const void* header, size_t header_length, void* data,
                             size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t ByeCb(void* arg, const void* header, size_t header_length, void* data,
                            size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t AckCb(void* arg, const void* header, size_t header_length, void* data,
                            size_t length, const ucp_am_recv_param_t* param);

  const TransportOptions options_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int ucx_efd_ = -1;
  int wake_fd_ = -1;         // eventfd: wakes the progress thread for posted commands
  std::string own_address_;  // this worker's UCP address (constant after Init)
  // Set when shutdown begins: address exchanges in progress give up.
  std::atomic<bool> exchange_stop_{false};
  std::thread thread_;
  std::atomic<uint64_t> next_send_id_{1};

  absl::Mutex queue_mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(queue_mu_);
  // Wakeups without a system call per command while the progress thread runs:
  // Post counts its command, then writes wake_fd_ only if the thread may be
  // asleep; the thread says it is going to sleep, then looks at the count once
  // more before it polls (both sequentially consistent, so one of the two sees
  // the other).
  std::atomic<uint64_t> posted_{0};  // commands in queue_ (changed under queue_mu_)
  std::atomic<bool> may_sleep_{false};
  std::deque<std::function<void()>> drained_;  // progress thread: the batch being run
  bool listening_ ABSL_GUARDED_BY(queue_mu_) = false;

  absl::Mutex resolve_mu_;
  std::map<std::string, SockAddr> resolved_ ABSL_GUARDED_BY(resolve_mu_);

  // Progress-thread state.
  bool stop_ = false;
  bool shutting_down_ = false;
  std::vector<std::function<void()>> deferred_;  // see RunDeferred
  KvSink* sink_ = nullptr;
  // Owns the public listening port (ucx_exchange.h).
  std::unique_ptr<AddressExchangeServer> exchange_;
  std::unordered_map<ucp_ep_h, std::unique_ptr<EpContext>> eps_;
  // Client connections whose address exchange is still running (no endpoint yet).
  std::unordered_map<EpContext*, std::unique_ptr<EpContext>> exchanging_;
  std::unordered_map<std::string, EpContext*> peers_;  // usable client connections
  std::unordered_map<uint64_t, EpContext*> accepted_;  // accepted connections by id
  uint64_t next_conn_id_ = 1;
  std::vector<EpContext*> to_close_;
  std::vector<std::pair<absl::Time, EpContext*>> retiring_;      // RetireEp: close by then
  std::vector<std::pair<void*, EpContext*>> closing_;            // close requests in flight
  std::unordered_map<uint64_t, std::shared_ptr<SendOp>> sends_;  // by send id
  std::multimap<absl::Time, uint64_t> deadlines_;                // SendAsync ops, by send id
  std::unordered_map<RecvOp*, std::unique_ptr<RecvOp>> recvs_;   // landing or being verified
  std::vector<std::shared_ptr<SendOp>> abandoned_sends_;         // kept until the worker dies
  size_t verifying_ = 0;         // received payloads handed to the verifier, not back yet
  ucp_datatype_t fused_dt_ = 0;  // generic datatype: copy + checksum per fragment
  bool have_fused_dt_ = false;

  // The verifier thread's queue (RecvOps stay owned by recvs_ meanwhile).
  std::thread verifier_;
  absl::Mutex verify_mu_;
  std::deque<RecvOp*> verify_queue_ ABSL_GUARDED_BY(verify_mu_);
  bool verify_stop_ ABSL_GUARDED_BY(verify_mu_) = false;
};

}  // namespace ced::kv_transport::ucx
