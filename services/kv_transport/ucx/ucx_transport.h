// KV transport over UCX (UCP active messages).
//
// One UCP context + worker per transport, driven by a single progress thread that
// owns every UCP object; public methods post commands to it. Connections are
// established through sockaddr (client-server). A message is one active message:
// the AM header carries the 64-byte KvMessageHeader plus a send id, the payload is
// sent as contiguous or IOV data. The receiver validates the header, asks the sink
// for destination spans, lands eager data by copy and rendezvous data by
// ucp_am_recv_data_nbx straight into the spans, verifies the checksum, calls
// Complete, and replies with a small acknowledgement AM carrying its verdict.
// Checksums of large payloads are verified on a separate verifier thread, in
// arrival order, so that the progress thread keeps moving the next payloads
// meanwhile; the sender computes its checksum on the calling thread. Many Sends
// (each waiting for its own verdict) may be in flight on one connection.
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
#include "services/kv_transport/ucx/ucx_guard.h"
#include "services/kv_transport/ucx/ucx_util.h"

namespace ced::kv_transport::ucx {

class UcxTransport final : public KvTransport {
 public:
  static absl::StatusOr<std::unique_ptr<KvTransport>> Create(const TransportOptions& options);
  ~UcxTransport() override;

  absl::StatusOr<std::string> Listen(const std::string& address, KvSink* sink) override;
  absl::Status Send(const std::string& peer, const KvMessageHeader& h,
                    const std::vector<ConstSpan>& payload) override;
  std::string name() const override { return "ucx"; }

 private:
  struct SendOp;
  struct RecvOp;
  struct EpContext;

  explicit UcxTransport(const TransportOptions& options);
  absl::Status Init();
  absl::StatusOr<SockAddr> ResolvePeer(const std::string& peer);

  // Queues `fn` for the progress thread (thread-safe).
  void Post(std::function<void()> fn);
  // Runs on the progress thread only (everything below).
  void ProgressLoop();
  bool DrainCommands();
  void Shutdown();

  // Endpoints (ucx_transport.cc).
  EpContext* GetOrConnect(const std::string& peer, const SockAddr& addr, absl::Status* error);
  void OnConnRequest(ucp_conn_request_h request);
  void FailEp(EpContext* ctx, const absl::Status& status);
  void CloseFailedEps();
  bool EpUsable(ucp_ep_h ep) const;

  // Sending (ucx_transport.cc).
  void OnConnected(EpContext* ctx, ucs_status_t status);
  void StartSend(const std::shared_ptr<SendOp>& op);
  void IssueSend(SendOp* op);
  void AbortSend(const std::shared_ptr<SendOp>& op);
  void MarkSent(SendOp* op, ucs_status_t status);
  void Settle(SendOp* op, absl::Status verdict);

  // Receiving (ucx_receive.cc).
  ucs_status_t OnData(const void* header, size_t header_length, void* data, size_t length,
                      const ucp_am_recv_param_t* param);
  ucs_status_t OnAck(const void* header, size_t header_length, const void* data, size_t length,
                     const ucp_am_recv_param_t* param);
  void FinishRecv(RecvOp* op, ucs_status_t status);
  // Hands `op`'s checksum to the verifier thread, which posts OnVerified back.
  void QueueVerify(RecvOp* op);
  void OnVerified(RecvOp* op, uint32_t checksum);
  // Completes `op` with `status` (sink Complete + acknowledgement) and frees it.
  void ConcludeRecv(RecvOp* op, const absl::Status& status);
  // The verifier thread (started by Listen) and its stop, which joins it; jobs it
  // had not started are left to the caller.
  void VerifierLoop();
  void StopVerifier();
  void SendAck(ucp_ep_h ep, uint64_t send_id, const absl::Status& status);

  // UCX C callbacks.
  static void ConnHandlerCb(ucp_conn_request_h request, void* arg);
  static void EpErrorCb(void* arg, ucp_ep_h ep, ucs_status_t status);
  static void FlushCb(void* request, ucs_status_t status, void* user_data);
  static void SendCb(void* request, ucs_status_t status, void* user_data);
  static void AckSentCb(void* request, ucs_status_t status, void* user_data);
  static void RecvCb(void* request, ucs_status_t status, size_t length, void* user_data);
  static ucs_status_t DataCb(void* arg, const void* header, size_t header_length, void* data,
                             size_t length, const ucp_am_recv_param_t* param);
  static ucs_status_t AckCb(void* arg, const void* header, size_t header_length, void* data,
                            size_t length, const ucp_am_recv_param_t* param);

  const TransportOptions options_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int ucx_efd_ = -1;
  int wake_fd_ = -1;  // eventfd: wakes the progress thread for posted commands
  std::thread thread_;
  std::atomic<uint64_t> next_send_id_{1};

  absl::Mutex queue_mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool listening_ ABSL_GUARDED_BY(queue_mu_) = false;

  absl::Mutex resolve_mu_;
  std::map<std::string, SockAddr> resolved_ ABSL_GUARDED_BY(resolve_mu_);

  // Progress-thread state.
  bool stop_ = false;
  bool shutting_down_ = false;
  KvSink* sink_ = nullptr;
  ucp_listener_h listener_ = nullptr;
  // Owns the public listening port; UCX's listener sits behind it (ucx_guard.h).
  std::unique_ptr<HandshakeGuard> guard_;
  std::unordered_map<ucp_ep_h, std::unique_ptr<EpContext>> eps_;
  std::unordered_map<std::string, EpContext*> peers_;  // usable client endpoints
  std::vector<EpContext*> to_close_;
  std::vector<std::pair<void*, EpContext*>> closing_;            // close requests in flight
  std::unordered_map<uint64_t, std::shared_ptr<SendOp>> sends_;  // by send id
  std::unordered_map<RecvOp*, std::unique_ptr<RecvOp>> recvs_;   // landing or being verified
  std::vector<std::shared_ptr<SendOp>> abandoned_sends_;         // kept until the worker dies
  size_t verifying_ = 0;  // received payloads handed to the verifier, not back yet

  // The verifier thread's queue (RecvOps stay owned by recvs_ meanwhile).
  std::thread verifier_;
  absl::Mutex verify_mu_;
  std::deque<RecvOp*> verify_queue_ ABSL_GUARDED_BY(verify_mu_);
  bool verify_stop_ ABSL_GUARDED_BY(verify_mu_) = false;
};

}  // namespace ced::kv_transport::ucx
