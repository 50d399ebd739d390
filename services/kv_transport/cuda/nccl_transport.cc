#include "services/kv_transport/cuda/nccl_transport.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "services/kv_transport/cuda/device_payload.h"
#include "services/kv_transport/cuda/tcp.h"
#include "services/kv_transport/payload.h"
#include "services/kv_transport/wire.h"

namespace ced::kv_transport::cuda {
namespace {

constexpr uint32_t kHelloMagic = 0x4E444543u;  // "CEDN"
constexpr uint32_t kProtocolVersion = 1;
constexpr uint32_t kMaxSpans = 1u << 20;
constexpr uint32_t kMaxMessage = 4096;

struct Hello {
  uint32_t magic = kHelloMagic;
  uint32_t version = kProtocolVersion;
  ncclUniqueId id{};
};

absl::Status NcclStatus(ncclResult_t r, const char* what) {
  if (r == ncclSuccess || r == ncclInProgress) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("nccl ", what, ": ", ncclGetErrorString(r)));
}

// Polls until the communicator's pending call (init, or enqueueing a group:
// the communicator is non-blocking) finished.
absl::Status WaitComm(ncclComm_t comm, absl::Time deadline, const std::atomic<bool>& stop) {
  while (true) {
    ncclResult_t r = ncclSuccess;
    ncclCommGetAsyncError(comm, &r);
    if (r == ncclSuccess) return absl::OkStatus();
    if (r != ncclInProgress) return NcclStatus(r, "communicator");
    if (stop.load()) return absl::CancelledError("transport shutting down");
    if (absl::Now() >= deadline) return absl::DeadlineExceededError("nccl communicator timed out");
    absl::SleepFor(absl::Microseconds(200));
  }
}

// Polls until `stream` drained, the communicator failed, or the deadline.
absl::Status WaitStream(ncclComm_t comm, cudaStream_t stream, absl::Time deadline,
                        const std::atomic<bool>& stop) {
  if (absl::Status s = WaitComm(comm, deadline, stop); !s.ok()) return s;
  while (true) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return absl::OkStatus();
    if (q != cudaErrorNotReady) return CudaStatus(q, "nccl transfer");
    ncclResult_t r = ncclSuccess;
    ncclCommGetAsyncError(comm, &r);
    if (r != ncclSuccess && r != ncclInProgress) return NcclStatus(r, "transfer");
    if (stop.load()) return absl::CancelledError("transport shutting down");
    if (absl::Now() >= deadline) return absl::DeadlineExceededError("nccl transfer timed out");
    absl::SleepFor(absl::Microseconds(20));
  }
}

absl::Status WriteStatus(int fd, const absl::Status& s, absl::Time deadline) {
  const std::string msg(s.message().substr(0, kMaxMessage));
  const uint32_t head[2] = {static_cast<uint32_t>(s.code()), static_cast<uint32_t>(msg.size())};
  if (auto w = WriteFull(fd, head, sizeof(head), deadline); !w.ok()) return w;
  return WriteFull(fd, msg.data(), msg.size(), deadline);
}

// Reads a status written by WriteStatus into *out; the return value is the
// connection's health.
absl::Status ReadStatus(int fd, absl::Time deadline, absl::Status* out) {
  uint32_t head[2];
  if (auto r = ReadFull(fd, head, sizeof(head), deadline); !r.ok()) return r;
  if (head[0] > static_cast<uint32_t>(absl::StatusCode::kUnauthenticated) ||
      head[1] > kMaxMessage) {
    return absl::UnavailableError("nccl transport: malformed verdict from the peer");
  }
  std::string msg(head[1], '\0');
  if (auto r = ReadFull(fd, msg.data(), msg.size(), deadline); !r.ok()) return r;
  *out = absl::Status(static_cast<absl::StatusCode>(head[0]), msg);
  return absl::OkStatus();
}

// A span list mapped onto device memory: host spans are replaced by ranges of a
// device staging buffer at the same payload offsets.
struct DeviceLayout {
  std::vector<uint64_t> offsets;  // payload offset of each span
  std::vector<uint64_t> sizes;
  std::vector<uint8_t*> device;  // device address of each span's first byte
  std::vector<bool> staged;      // host span (through staging)
  bool any_staged = false;
};

template <typename Span>
absl::StatusOr<DeviceLayout> MapSpans(const std::vector<Span>& spans, DeviceScratch* scratch) {
  DeviceLayout l;
  uint64_t off = 0, total = 0;
  for (const auto& s : spans) total += s.size;
  for (const auto& s : spans) {
    if (s.size == 0) continue;
    const bool host = !IsDeviceMemory(s.data);
    l.offsets.push_back(off);
    l.sizes.push_back(s.size);
    l.staged.push_back(host);
    l.device.push_back(host ? nullptr : const_cast<uint8_t*>(s.data));
    l.any_staged |= host;
    off += s.size;
  }
  if (l.any_staged) {
    auto buf = scratch->Get(total);
    if (!buf.ok()) return buf.status();
    for (size_t i = 0; i < l.device.size(); ++i) {
      if (l.staged[i]) l.device[i] = *buf + l.offsets[i];
    }
  }
  return l;
}

// Payload cut at every span boundary of both sides.
std::vector<uint64_t> Cuts(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b,
                           uint64_t total) {
  std::vector<uint64_t> cuts;
  uint64_t x = 0;
  for (uint64_t s : a) cuts.push_back(x += s);
  x = 0;
  for (uint64_t s : b) cuts.push_back(x += s);
  cuts.push_back(total);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  cuts.erase(std::remove(cuts.begin(), cuts.end(), uint64_t{0}), cuts.end());
  return cuts;
}

// Issues one ncclSend/ncclRecv per segment (a group), on `stream`.
absl::Status PostSegments(const DeviceLayout& l, const std::vector<uint64_t>& cuts, bool send,
                          ncclComm_t comm, cudaStream_t stream) {
  if (auto s = NcclStatus(ncclGroupStart(), "group start"); !s.ok()) return s;
  uint64_t begin = 0;
  size_t span = 0;
  absl::Status status;
  for (uint64_t end : cuts) {
    while (span < l.offsets.size() && l.offsets[span] + l.sizes[span] <= begin) ++span;
    uint8_t* ptr = l.device[span] + (begin - l.offsets[span]);
    const size_t n = static_cast<size_t>(end - begin);
    status = send ? NcclStatus(ncclSend(ptr, n, ncclUint8, 1, comm, stream), "send")
                  : NcclStatus(ncclRecv(ptr, n, ncclUint8, 0, comm, stream), "recv");
    if (!status.ok()) break;
    begin = end;
  }
  const absl::Status end = NcclStatus(ncclGroupEnd(), "group end");
  return status.ok() ? end : status;
}

class NcclTransport final : public KvTransport {
 public:
  explicit NcclTransport(const TransportOptions& options, int device)
      : options_(options), device_(device) {}
  ~NcclTransport() override;

  absl::StatusOr<std::string> Listen(const std::string& address, KvSink* sink) override;
  absl::Status Send(const std::string& peer, const KvMessageHeader& h,
                    const std::vector<ConstSpan>& payload) override;
  std::string name() const override { return "nccl"; }

 private:
  // One end of a control connection plus its communicator and stream.
  struct Conn {
    int fd = -1;
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    DeviceScratch scratch;
    std::unique_ptr<PayloadChecksummer> crc;
    std::mutex mu;  // serializes messages on the connection (sender side)
    std::atomic<bool> broken{false};
    ~Conn();
  };

  absl::StatusOr<std::shared_ptr<Conn>> Connect(const std::string& peer, absl::Time deadline);
  absl::Status SendOn(Conn* c, const KvMessageHeader& h, const std::vector<ConstSpan>& payload,
                      absl::Time deadline);
  void AcceptLoop();
  void ServeConnection(std::shared_ptr<Conn> c);
  // Receives one message; false when the connection must close.
  bool ServeMessage(Conn* c);
  absl::Status InitComm(Conn* c, const ncclUniqueId& id, int rank, absl::Time deadline);

  const TransportOptions options_;
  const int device_;
  std::atomic<bool> stop_{false};

  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Conn>> peers_ ABSL_GUARDED_BY(mu_);
  std::list<std::shared_ptr<Conn>> served_ ABSL_GUARDED_BY(mu_);
  std::list<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  bool listening_ ABSL_GUARDED_BY(mu_) = false;

  KvSink* sink_ = nullptr;
  std::mutex sink_mu_;  // calls into the sink are serialized
  int listen_fd_ = -1;
  std::thread accept_thread_;
};

NcclTransport::Conn::~Conn() {
  if (comm != nullptr) {
    if (broken) {
      ncclCommAbort(comm);
    } else {
      ncclCommDestroy(comm);
    }
  }
  crc.reset();
  if (stream != nullptr) cudaStreamDestroy(stream);
  if (fd >= 0) close(fd);
}

NcclTransport::~NcclTransport() {
  stop_.store(true);
  if (listen_fd_ >= 0) shutdown(listen_fd_, SHUT_RDWR);
  if (accept_thread_.joinable()) accept_thread_.join();
  std::list<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    for (auto& c : served_) shutdown(c->fd, SHUT_RDWR);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
  absl::MutexLock lock(&mu_);
  for (auto& [peer, c] : peers_) c->broken = true;  // abort: never wait on a dead peer
  peers_.clear();
  served_.clear();
  if (listen_fd_ >= 0) close(listen_fd_);
}

absl::Status NcclTransport::InitComm(Conn* c, const ncclUniqueId& id, int rank,
                                     absl::Time deadline) {
  if (auto s = CudaStatus(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return s;
  if (auto s =
          CudaStatus(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "stream create");
      !s.ok()) {
    return s;
  }
  c->crc = std::make_unique<PayloadChecksummer>(c->stream);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  if (auto s = NcclStatus(ncclCommInitRankConfig(&c->comm, 2, id, rank, &config), "init");
      !s.ok()) {
    c->comm = nullptr;
    return s;
  }
  absl::Status s = WaitComm(c->comm, deadline, stop_);
  if (!s.ok()) c->broken = true;
  return s;
}

absl::StatusOr<std::shared_ptr<NcclTransport::Conn>> NcclTransport::Connect(const std::string& peer,
                                                                            absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    auto it = peers_.find(peer);
    if (it != peers_.end() && !it->second->broken) return it->second;
    if (it != peers_.end()) peers_.erase(it);
  }
  auto c = std::make_shared<Conn>();
  auto fd = TcpConnect(peer, deadline - absl::Now());
  if (!fd.ok()) return fd.status();
  c->fd = *fd;
  Hello hello;
  if (auto s = NcclStatus(ncclGetUniqueId(&hello.id), "unique id"); !s.ok()) return s;
  if (auto s = WriteFull(c->fd, &hello, sizeof(hello), deadline); !s.ok()) return s;
  if (auto s = InitComm(c.get(), hello.id, 0, deadline); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("nccl connection to ", peer, ": ", s.message()));
  }
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = peers_.emplace(peer, c);
  if (!inserted) it->second = c;
  return c;
}

absl::Status NcclTransport::Send(const std::string& peer, const KvMessageHeader& h,
                                 const std::vector<ConstSpan>& payload) {
  if (auto s = ValidateHeader(h, options_.max_payload_bytes); !s.ok()) return s;
  if (auto s = CheckSendSpans(payload, h.payload_bytes); !s.ok()) return s;
  if (stop_.load()) return absl::CancelledError("transport shutting down");
  const absl::Time deadline = absl::Now() + absl::Milliseconds(options_.send_timeout_ms);
  auto c = Connect(peer, deadline);
  if (!c.ok()) {
    return c.status().code() == absl::StatusCode::kDeadlineExceeded
               ? c.status()
               : absl::UnavailableError(c.status().message());
  }
  std::lock_guard<std::mutex> lock((*c)->mu);
  if ((*c)->broken) return absl::UnavailableError(absl::StrCat("connection to ", peer, " failed"));
  absl::Status s = SendOn(c->get(), h, payload, deadline);
  return s;
}

absl::Status NcclTransport::SendOn(Conn* c, const KvMessageHeader& h,
                                   const std::vector<ConstSpan>& payload, absl::Time deadline) {
  // Failures below leave the connection in an unknown state: drop it.
  auto fail = [c](absl::Status s) {
    c->broken = true;
    if (c->comm != nullptr) {  // stops NCCL work so that the payload is released
      ncclCommAbort(c->comm);
      c->comm = nullptr;
    }
    cudaStreamSynchronize(c->stream);
    if (s.code() != absl::StatusCode::kDeadlineExceeded) {
      s = absl::UnavailableError(absl::StrCat("nccl transport: ", s.message()));
    }
    return s;
  };
  if (auto s = CudaStatus(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return fail(s);
  KvMessageHeader wire = h;
  auto crc = c->crc->Checksum(payload);
  if (!crc.ok()) return fail(crc.status());
  wire.payload_checksum = *crc ^ (options_.corrupt_payload_checksum_for_testing ? 1u : 0u);
  auto layout = MapSpans(payload, &c->scratch);
  if (!layout.ok()) return fail(layout.status());
  if (layout->sizes.size() > kMaxSpans) {
    return absl::InvalidArgumentError("payload: more than 2^20 non-empty spans");
  }
  size_t k = 0;
  for (const ConstSpan& src : payload) {  // stage host spans (overlaps the round trip)
    if (src.size == 0) continue;
    if (layout->staged[k]) {
      if (auto s = CudaStatus(cudaMemcpyAsync(layout->device[k], src.data, src.size,
                                              cudaMemcpyHostToDevice, c->stream),
                              "staging copy");
          !s.ok()) {
        return fail(s);
      }
    }
    ++k;
  }
  // Header, then the sender's span layout (the receiver posts the same segments).
  const KvHeaderBytes bytes = EncodeHeader(wire);
  const uint32_t my_spans = static_cast<uint32_t>(layout->sizes.size());
  if (auto s = WriteFull(c->fd, bytes.data(), bytes.size(), deadline); !s.ok()) return fail(s);
  if (auto s = WriteFull(c->fd, &my_spans, sizeof(my_spans), deadline); !s.ok()) return fail(s);
  if (auto s = WriteFull(c->fd, layout->sizes.data(), my_spans * sizeof(uint64_t), deadline);
      !s.ok()) {
    return fail(s);
  }
  absl::Status verdict;
  if (auto s = ReadStatus(c->fd, deadline, &verdict); !s.ok()) return fail(s);
  if (!verdict.ok()) {
    cudaStreamSynchronize(c->stream);  // staging copies must finish before Send returns
    return verdict;                    // rejected before any payload byte moved
  }
  uint32_t nspans = 0;
  if (auto s = ReadFull(c->fd, &nspans, sizeof(nspans), deadline); !s.ok()) return fail(s);
  if (nspans > kMaxSpans) return fail(absl::UnavailableError("peer sent too many spans"));
  std::vector<uint64_t> sizes(nspans);
  if (auto s = ReadFull(c->fd, sizes.data(), sizes.size() * sizeof(uint64_t), deadline); !s.ok()) {
    return fail(s);
  }
  uint64_t total = 0;
  for (uint64_t v : sizes) total += v;
  if (total != h.payload_bytes) return fail(absl::UnavailableError("peer spans do not match"));
  if (h.payload_bytes > 0) {
    const std::vector<uint64_t> cuts = Cuts(layout->sizes, sizes, h.payload_bytes);
    if (auto s = PostSegments(*layout, cuts, /*send=*/true, c->comm, c->stream); !s.ok()) {
      return fail(s);
    }
  }
  if (auto s = WaitStream(c->comm, c->stream, deadline, stop_); !s.ok()) return fail(s);
  if (auto s = ReadStatus(c->fd, deadline, &verdict); !s.ok()) return fail(s);
  return verdict;
}

absl::StatusOr<std::string> NcclTransport::Listen(const std::string& address, KvSink* sink) {
  if (sink == nullptr) return absl::InvalidArgumentError("Listen: sink is null");
  {
    absl::MutexLock lock(&mu_);
    if (listening_) return absl::FailedPreconditionError("Listen called twice");
    listening_ = true;
  }
  std::string bound;
  auto fd = TcpListen(address, &bound);
  if (!fd.ok()) return fd.status();
  listen_fd_ = *fd;
  sink_ = sink;
  accept_thread_ = std::thread([this] { AcceptLoop(); });
  return bound;
}

void NcclTransport::AcceptLoop() {
  while (!stop_.load()) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stop_.load()) return;
      absl::SleepFor(absl::Milliseconds(10));
      continue;
    }
    auto c = std::make_shared<Conn>();
    c->fd = fd;
    absl::MutexLock lock(&mu_);
    if (stop_.load()) return;  // c closes fd
    served_.push_back(c);
    threads_.emplace_back([this, c] { ServeConnection(c); });
  }
}

void NcclTransport::ServeConnection(std::shared_ptr<Conn> c) {
  Hello hello;
  const absl::Time deadline = absl::Now() + absl::Milliseconds(options_.send_timeout_ms);
  if (ReadFull(c->fd, &hello, sizeof(hello), deadline).ok() && hello.magic == kHelloMagic &&
      hello.version == kProtocolVersion) {
    if (absl::Status s = InitComm(c.get(), hello.id, 1, deadline); s.ok()) {
      while (!stop_.load() && ServeMessage(c.get())) {
      }
    } else {
      std::fprintf(stderr, "nccl transport: incoming connection: %s\n",
                   std::string(s.message()).c_str());
    }
  }
  c->broken = true;
  shutdown(c->fd, SHUT_RDWR);
}

bool NcclTransport::ServeMessage(Conn* c) {
  KvHeaderBytes bytes;
  if (!ReadFull(c->fd, bytes.data(), bytes.size(), absl::InfiniteFuture()).ok()) return false;
  const absl::Time deadline = absl::Now() + absl::Milliseconds(options_.send_timeout_ms);
  uint32_t their_count = 0;
  if (!ReadFull(c->fd, &their_count, sizeof(their_count), deadline).ok() ||
      their_count > kMaxSpans) {
    return false;
  }
  std::vector<uint64_t> theirs(their_count);
  if (!ReadFull(c->fd, theirs.data(), theirs.size() * sizeof(uint64_t), deadline).ok()) {
    return false;
  }
  auto h =
      DecodeHeader(absl::MakeConstSpan(bytes.data(), bytes.size()), options_.max_payload_bytes);
  if (!h.ok()) return WriteStatus(c->fd, h.status(), deadline).ok();
  uint64_t their_total = 0;
  for (uint64_t v : theirs) their_total += v;
  if (their_total != h->payload_bytes) {
    return WriteStatus(c->fd,
                       absl::InvalidArgumentError("payload spans do not sum to payload_bytes"),
                       deadline)
        .ok();
  }
  absl::StatusOr<std::vector<MemSpan>> spans;
  {
    std::lock_guard<std::mutex> lock(sink_mu_);
    spans = sink_->Accept(*h);
  }
  if (!spans.ok()) return WriteStatus(c->fd, spans.status(), deadline).ok();
  auto complete = [&](const absl::Status& s) {
    std::lock_guard<std::mutex> lock(sink_mu_);
    sink_->Complete(*h, s);
  };
  if (absl::Status s = CheckSinkSpans(*spans, h->payload_bytes); !s.ok()) {
    complete(s);
    return WriteStatus(c->fd, s, deadline).ok();
  }
  // From here on the message is accepted: every exit completes it.
  auto broken = [&](const absl::Status& s) {
    c->broken = true;
    complete(stop_.load() ? absl::CancelledError("transport shutting down")
                          : absl::UnavailableError(absl::StrCat("nccl transport: ", s.message())));
    return false;
  };
  if (auto s = CudaStatus(cudaSetDevice(device_), "cudaSetDevice"); !s.ok()) return broken(s);
  auto layout = MapSpans(*spans, &c->scratch);
  if (!layout.ok()) return broken(layout.status());
  const uint32_t nspans = static_cast<uint32_t>(layout->sizes.size());
  if (auto s = WriteStatus(c->fd, absl::OkStatus(), deadline); !s.ok()) return broken(s);
  if (auto s = WriteFull(c->fd, &nspans, sizeof(nspans), deadline); !s.ok()) return broken(s);
  if (auto s = WriteFull(c->fd, layout->sizes.data(), nspans * sizeof(uint64_t), deadline);
      !s.ok()) {
    return broken(s);
  }
  if (h->payload_bytes > 0) {
    const std::vector<uint64_t> cuts = Cuts(theirs, layout->sizes, h->payload_bytes);
    if (auto s = PostSegments(*layout, cuts, /*send=*/false, c->comm, c->stream); !s.ok()) {
      return broken(s);
    }
    // Non-blocking communicator: the receives must be on the stream before
    // the unstaging copies are queued behind them.
    if (auto s = WaitComm(c->comm, deadline, stop_); !s.ok()) return broken(s);
  }
  // Host spans: back from the staging buffer.
  size_t k = 0;
  for (const MemSpan& m : *spans) {
    if (m.size == 0) continue;
    if (layout->staged[k]) {
      if (auto s = CudaStatus(
              cudaMemcpyAsync(m.data, layout->device[k], m.size, cudaMemcpyDeviceToHost, c->stream),
              "unstaging copy");
          !s.ok()) {
        return broken(s);
      }
    }
    ++k;
  }
  if (auto s = WaitStream(c->comm, c->stream, deadline, stop_); !s.ok()) return broken(s);
  std::vector<ConstSpan> landed;
  for (const MemSpan& m : *spans) landed.push_back({m.data, m.size});
  auto crc = c->crc->Checksum(landed);
  if (!crc.ok()) return broken(crc.status());
  const absl::Status verdict =
      *crc == h->payload_checksum ? absl::OkStatus()
                                  : absl::DataLossError(absl::StrCat(
                                        "payload checksum mismatch (request ", h->request_id, ")"));
  complete(verdict);
  return WriteStatus(c->fd, verdict, deadline).ok();
}

}  // namespace

absl::StatusOr<std::unique_ptr<KvTransport>> CreateNcclTransport(const TransportOptions& options) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::UnavailableError(
        absl::StrCat("transport 'nccl': no CUDA device (",
                     err != cudaSuccess ? cudaGetErrorString(err) : "0 devices", ")"));
  }
  int device = 0;
  cudaGetDevice(&device);
  return std::unique_ptr<KvTransport>(new NcclTransport(options, device));
}

}  // namespace ced::kv_transport::cuda
