// The prefill worker (DESIGN.md §2): holds the encoder and the decoder's
// global-K/V projections (plus the decoder when it may replay), runs chunked
// prefill one prompt at a time, and streams each finished chunk's global K/V
// to the decode worker while the next chunk computes.
//
// Threads: gRPC threads enqueue jobs; one compute thread runs the engine; one
// sender thread per decode worker (a send lane) moves K/V over the transport.
// They are pipelined: once a prompt's compute ends (its last messages
// queued), the compute thread takes the next prompt while the lane drains the
// previous one's K/V. A job's
// cache stays allocated until its last message is acknowledged; whichever
// thread sees the job's compute and sends both done answers the Prefill RPC
// (`done` or the error), and the compute thread releases the cache (the
// engine is driven from that thread only) before its next prompt, or when a
// new prompt finds no room.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ced/internal/prefill_worker.grpc.pb.h"
#include "engine/runtime/engine.h"
#include "services/common/grpc_util.h"
#include "services/common/router_client.h"
#include "services/common/stream_writer.h"
#include "services/kv_transport/transport.h"
#include "services/metrics/registry.h"
#include "services/prefill/fault_injection.h"

namespace ced::services {

struct PrefillWorkerOptions {
  std::string worker_id = "prefill-0";
  EngineOptions engine;  // weights: kEncoderOnly, or kEncoderReplay to replay here
  std::string grpc_address = "127.0.0.1:0";
  std::string metrics_address = "127.0.0.1:0";
  std::string kv_transport = "ucx";
  std::string router_address;     // empty: do not register
  std::string advertise_address;  // registered gRPC address (default: bound one)
  int default_chunk_tokens = 256;
  // Engine::WarmUp (one chunk, the replay when held) before serving.
  bool warm_up = true;
  int max_queued_requests = 256;
  // Prompt tokens of queued (not yet computing) requests; beyond it Prefill
  // answers RESOURCE_EXHAUSTED at once.
  int64_t max_queued_tokens = int64_t{1} << 20;
  int drain_timeout_ms = 30000;
  // Progress notices (K/V messages for no tokens) tell each decode worker that
  // its request's prefill is on its way, so that its reservation timeout (an
  // inactivity timeout) follows progress: one when a request's compute starts,
  // and, while a prompt computes, one per chunk to each queued request, at
  // most once per this interval.
  int progress_notice_interval_ms = 1000;
  PrefillFaults faults;  // test only (fault_injection.h); none by default
};

class PrefillWorker {
 public:
  static absl::StatusOr<std::unique_ptr<PrefillWorker>> Start(const PrefillWorkerOptions& options);
  ~PrefillWorker();
  const std::string& grpc_address() const { return server_->grpc_address(); }
  const std::string& metrics_address() const { return server_->metrics_address(); }
  void Drain();
  void Shutdown();

  struct Job;
  struct SendLane;
  class Service;

 private:
  explicit PrefillWorker(const PrefillWorkerOptions& o);
  absl::Status Init();
  absl::Status Enqueue(std::shared_ptr<Job> job);
  bool Cancel(const std::string& request_id);
  void ComputeLoop();
  void SenderLoop(SendLane* lane);
  void RunJob(const std::shared_ptr<Job>& job);
  // The job's compute and every message are done: answers the RPC and hands
  // its sequence to the compute thread for release. Called without mu_.
  void Complete(const std::shared_ptr<Job>& job);
  void Fail(Job& job, const absl::Status& status);
  // Compute thread: releases the sequences of completed jobs.
  void ReleaseCompleted();
  // Compute thread: waits until a job in transfer completes and releases its
  // sequence; false when none is in transfer (no room will come back).
  bool WaitForRelease();
  // Queues one message for the sender; the job's completion waits for it.
  // `checksum_given`: h.payload_checksum already holds the payload's CRC32C.
  void QueueSend(const std::shared_ptr<Job>& job, kv_transport::KvMessageHeader h,
                 std::vector<kv_transport::ConstSpan> payload, bool checksum_given = false);
  // Sends a progress notice for `job` without waiting for it (mu_ NOT held);
  // an unreachable decode worker sets the job's send error.
  void SendNotice(const std::shared_ptr<Job>& job);
  // Compute thread: progress notices for queued jobs not told for an interval.
  void NotifyQueued();
  void FillLoad(ced::internal::LoadReport* report);

  PrefillWorkerOptions options_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<kv_transport::KvTransport> transport_;
  // Test only: sends with a wrong checksum (faults.corrupt_checksum).
  std::unique_ptr<kv_transport::KvTransport> corrupt_transport_;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<RunningServer> server_;
  std::unique_ptr<RouterClient> router_;
  metrics::Registry registry_;
  struct Metrics;
  std::unique_ptr<Metrics> m_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::shared_ptr<Job> current_;
  int64_t current_remaining_tokens_ = 0;
  // Computed jobs whose messages are still in flight (cancellable).
  std::vector<std::shared_ptr<Job>> in_transfer_;
  // Completed jobs' sequences, for the compute thread: held (a succeeded
  // prompt, for a next turn that extends it) or released.
  std::vector<std::pair<SeqId, bool>> release_;
  struct SendTask;
  // One send lane per decode worker (by KV address), each with its own
  // thread, so that a decode worker that stops answering holds up only the
  // K/V bound for it (each of its messages for at most the transport's send
  // timeout), never another decode worker's.
  std::map<std::string, std::unique_ptr<SendLane>> lanes_;
  bool stop_ = false;
  std::atomic<bool> draining_{false};
  std::thread compute_;
};

}  // namespace ced::services
