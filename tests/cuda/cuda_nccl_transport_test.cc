// The "nccl" KV transport (services/kv_transport/cuda). Without a GPU only the
// factory is checked (the plugin loads and names the missing device); with two
// GPUs a receiver process on the second one takes messages from this process
// on the first: rejected before any byte moves, device and host payloads land
// intact, a corrupted checksum is DATA_LOSS. NCCL refuses two ranks on one
// GPU, so a one-GPU machine skips the two-process test.
#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "services/common/subprocess.h"
#include "services/kv_transport/transport.h"
#include "tests/cuda/cuda_test_util.h"

namespace ced::kv_transport {
namespace {

constexpr uint64_t kRequest = 7;
constexpr uint64_t kToken = 99;
const std::vector<size_t> kSinkSpans = {1000, 3000, 61536};  // 65536 bytes
constexpr size_t kPayload = 65536;

uint8_t Pattern(size_t i, uint32_t seed) { return static_cast<uint8_t>(i * 131 + seed * 17 + 3); }

KvMessageHeader Header(uint32_t seed, uint64_t token = kToken, uint64_t bytes = kPayload) {
  KvMessageHeader h;
  h.kind = KvMessageKind::kGlobalRange;
  h.request_id = kRequest;
  h.transfer_token = token;
  h.token_begin = seed;  // the receiver derives the expected bytes from it
  h.token_end = seed + 1;
  h.layer = -1;
  h.payload_bytes = bytes;
  return h;
}

TEST(NcclTransportTest, FactoryLoadsThePluginAndNamesAMissingDevice) {
  TransportOptions o;
  o.kind = "nccl";
  auto t = CreateKvTransport(o);
  if (::ced::testing::HasCudaDevice()) {
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ((*t)->name(), "nccl");
  } else {
    ASSERT_EQ(t.status().code(), absl::StatusCode::kUnavailable) << t.status();
    EXPECT_NE(t.status().message().find("no CUDA device"), std::string::npos) << t.status();
  }
}

// The receiving side, run as its own process by TwoProcesses (disabled when run
// directly). Device-memory sink; writes "<bound address>" to $CED_NCCL_DIR/addr
// and exits after the abort message, with a non-zero status when a landed
// payload differed from what the sender sent.
class DeviceSink final : public KvSink {
 public:
  DeviceSink() { EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&buf_), kPayload), cudaSuccess); }
  ~DeviceSink() override { cudaFree(buf_); }
  absl::StatusOr<std::vector<MemSpan>> Accept(const KvMessageHeader& h) override {
    if (h.request_id != kRequest) return absl::NotFoundError("unknown request");
    if (h.transfer_token != kToken) return absl::FailedPreconditionError("transfer token mismatch");
    if (h.kind == KvMessageKind::kAbort) return std::vector<MemSpan>{};
    if (h.payload_bytes != kPayload) return absl::InvalidArgumentError("size mismatch");
    cudaMemset(buf_, 0, kPayload);
    std::vector<MemSpan> spans;
    size_t off = 0;
    for (size_t s : kSinkSpans) {
      spans.push_back({buf_ + off, s});
      off += s;
    }
    return spans;
  }
  void Complete(const KvMessageHeader& h, absl::Status status) override {
    absl::MutexLock lock(&mu_);
    if (h.kind == KvMessageKind::kAbort) {
      done_ = true;
      return;
    }
    if (status.ok()) {
      std::vector<uint8_t> host(kPayload);
      cudaMemcpy(host.data(), buf_, kPayload, cudaMemcpyDeviceToHost);
      for (size_t i = 0; i < kPayload; ++i) {
        if (host[i] != Pattern(i, h.token_begin)) {
          ++mismatches_;
          break;
        }
      }
      ++ok_;
    }
  }
  bool WaitDone() {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&done_), absl::Seconds(240));
  }
  int ok() {
    absl::MutexLock l(&mu_);
    return ok_;
  }
  int mismatches() {
    absl::MutexLock l(&mu_);
    return mismatches_;
  }

 private:
  uint8_t* buf_ = nullptr;
  absl::Mutex mu_;
  bool done_ = false;
  int ok_ = 0, mismatches_ = 0;
};

TEST(NcclTransportTest, DISABLED_ReceiverProcess) {
  const char* dir = std::getenv("CED_NCCL_DIR");
  ASSERT_NE(dir, nullptr);
  DeviceSink sink;
  TransportOptions o;
  o.kind = "nccl";
  auto t = CreateKvTransport(o);
  ASSERT_TRUE(t.ok()) << t.status();
  auto addr = (*t)->Listen("127.0.0.1:0", &sink);
  ASSERT_TRUE(addr.ok()) << addr.status();
  const std::string path = std::string(dir) + "/addr";
  { std::ofstream(path + ".tmp") << *addr; }
  std::rename((path + ".tmp").c_str(), path.c_str());
  ASSERT_TRUE(sink.WaitDone());
  EXPECT_EQ(sink.mismatches(), 0);
  EXPECT_EQ(sink.ok(), 2);
}

TEST(NcclTransportTest, TwoProcessesOnTwoGpus) {
  CED_SKIP_WITHOUT_CUDA();
  int count = 0;
  cudaGetDeviceCount(&count);
  if (count < 2) GTEST_SKIP() << "NCCL needs two GPUs (it refuses two ranks on one device)";
  const std::string dir = ::testing::TempDir() + "/ced_nccl_" + std::to_string(getpid());
  ASSERT_EQ(system(("mkdir -p " + dir).c_str()), 0);
  std::remove((dir + "/addr").c_str());
  // The receiver: this binary, only the disabled test, on the second GPU.
  std::string self(4096, '\0');
  self.resize(readlink("/proc/self/exe", self.data(), self.size() - 1));
  std::vector<std::string> args = {self, "--gtest_also_run_disabled_tests",
                                   "--gtest_filter=NcclTransportTest.DISABLED_ReceiverProcess"};
  services::SubprocessOptions options;
  options.argv = std::move(args);
  options.env["CED_NCCL_DIR"] = dir;
  options.env["CUDA_VISIBLE_DEVICES"] = "1";
  absl::StatusOr<std::unique_ptr<services::Subprocess>> child =
      services::Subprocess::Spawn(options);
  ASSERT_TRUE(child.ok()) << child.status();
  std::string peer;
  for (int i = 0; i < 1200 && peer.empty(); ++i) {
    std::ifstream in(dir + "/addr");
    if (!(in >> peer)) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_FALSE(peer.empty()) << "receiver did not start";

  TransportOptions o;
  o.kind = "nccl";
  o.send_timeout_ms = 120000;
  auto t = CreateKvTransport(o);
  ASSERT_TRUE(t.ok()) << t.status();
  // The sender's spans are cut differently from the sink's.
  std::vector<uint8_t> host1(kPayload), host2(kPayload);
  for (size_t i = 0; i < kPayload; ++i) {
    host1[i] = Pattern(i, 1);
    host2[i] = Pattern(i, 2);
  }
  ::ced::testing::DeviceArray<uint8_t> dev1(host1);
  const std::vector<ConstSpan> device_spans = {
      {dev1.get(), 4096}, {dev1.get() + 4096, 0}, {dev1.get() + 4096, kPayload - 4096}};
  const std::vector<ConstSpan> host_spans = {{host2.data(), 70},
                                             {host2.data() + 70, kPayload - 70}};

  // Rejected by the sink: nothing moves, the connection stays usable.
  EXPECT_EQ((*t)->Send(peer, Header(1, kToken + 1), device_spans).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*t)->Send(peer, Header(1), device_spans), absl::OkStatus());
  EXPECT_EQ((*t)->Send(peer, Header(2), host_spans), absl::OkStatus());
  {
    TransportOptions bad = o;
    bad.corrupt_payload_checksum_for_testing = true;
    auto tb = CreateKvTransport(bad);
    ASSERT_TRUE(tb.ok()) << tb.status();
    EXPECT_EQ((*tb)->Send(peer, Header(1), device_spans).code(), absl::StatusCode::kDataLoss);
  }
  // Spans that do not add up are the caller's error, caught before sending.
  EXPECT_EQ((*t)->Send(peer, Header(1), {{dev1.get(), 10}}).code(),
            absl::StatusCode::kInvalidArgument);
  KvMessageHeader abort = Header(0, kToken, 0);
  abort.kind = KvMessageKind::kAbort;
  EXPECT_EQ((*t)->Send(peer, abort, {}), absl::OkStatus());

  absl::StatusOr<int> exited = (*child)->Wait(/*timeout_s=*/240);
  if (!exited.ok()) (*child)->Terminate(/*grace_s=*/0);
  const int st = exited.ok() ? *exited : -1;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "receiver process failed: " << st;
}

}  // namespace
}  // namespace ced::kv_transport
