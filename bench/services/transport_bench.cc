#include "bench/services/transport_bench.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "bench/services/perftest.h"
#include "engine/common/status.h"
#include "services/common/subprocess.h"
#include "services/kv_transport/checksum.h"
#include "services/kv_transport/transport.h"

namespace ced::bench {
namespace {

using kv_transport::ConstSpan;
using kv_transport::KvMessageHeader;
using kv_transport::KvMessageKind;
using kv_transport::KvSink;
using kv_transport::KvTransport;
using kv_transport::MemSpan;

// Lands every message in its sender's slot; counts completions.
class SlotSink final : public KvSink {
 public:
  SlotSink(uint64_t slot_bytes, int slots)
      : slot_bytes_(slot_bytes), slots_(slots), buffer_(new uint8_t[slot_bytes * slots]) {
    // First touch, so page faults do not land in the first measurement.
    std::fill(buffer_.get(), buffer_.get() + slot_bytes * slots, uint8_t{0});
  }
  absl::StatusOr<std::vector<MemSpan>> Accept(const KvMessageHeader& h) override {
    if (h.payload_bytes > slot_bytes_) {
      return absl::InvalidArgumentError(
          absl::StrCat("payload of ", h.payload_bytes, " bytes exceeds the slot"));
    }
    uint8_t* slot = buffer_.get() + (h.request_id % slots_) * slot_bytes_;
    return std::vector<MemSpan>{{slot, h.payload_bytes}};
  }
  void Complete(const KvMessageHeader&, absl::Status) override {}

 private:
  const uint64_t slot_bytes_;
  const int slots_;
  std::unique_ptr<uint8_t[]> buffer_;
};

// One receiver process and the sending transport in this process, for one UCX_TLS.
struct Endpoint {
  std::string tls;
  std::unique_ptr<services::Subprocess> sink;
  std::string address;
  std::unique_ptr<KvTransport> sender;
};

absl::StatusOr<std::unique_ptr<Endpoint>> StartEndpoint(const TransportBenchOptions& o,
                                                        const std::string& tls,
                                                        uint64_t slot_bytes) {
  auto ep = std::make_unique<Endpoint>();
  ep->tls = tls;
  services::SubprocessOptions co = services::BackgroundJob(
      {o.self_exe, "--role=kv_sink", "--sink_tls=" + tls,
       absl::StrCat("--sink_slot_bytes=", slot_bytes), absl::StrCat("--sink_slots=", o.threads),
       absl::StrCat("--verifier_threads=", o.verifier_threads),
       absl::StrCat("--fused_receive=", o.fused_receive)},
      o.scratch_dir + "/kv_sink_" + tls + ".log");
  co.stdin_from = services::SubprocessOptions::Stdin::kPipe;
  co.pipe_stdout = true;
  ASSIGN_OR_RETURN(ep->sink, services::Subprocess::Spawn(co));
  ASSIGN_OR_RETURN(std::string line, ep->sink->ReadLine(30));
  if (!absl::StartsWith(line, "ADDR ")) {
    return absl::InternalError(absl::StrCat("kv sink (", tls, "): unexpected output '", line,
                                            "'; log: ", services::TailOfFile(co.output_path, 400)));
  }
  ep->address = line.substr(5);
  kv_transport::TransportOptions to;
  to.kind = "ucx";
  to.ucx_tls = tls;
  to.send_timeout_ms = 120000;
  ASSIGN_OR_RETURN(ep->sender, kv_transport::CreateKvTransport(to));
  return ep;
}

KvMessageHeader BenchHeader(int slot, uint64_t size) {
  KvMessageHeader h;
  h.kind = KvMessageKind::kGlobalRange;
  h.request_id = static_cast<uint64_t>(slot);
  h.transfer_token = 1;
  h.token_begin = 0;
  h.token_end = 1;
  h.payload_bytes = size;
  return h;
}

// Blocking Sends: `threads` senders (one per buffer of `src`), each sending
// `iters` messages of `size` bytes back to back; the transport computes every
// checksum. Returns 1e9 B/s over the whole volume.
absl::StatusOr<double> MeasureBlocking(Endpoint& ep, const std::vector<std::vector<uint8_t>>& src,
                                       uint64_t size, int iters) {
  const int threads = static_cast<int>(src.size());
  std::vector<absl::Status> errors(threads);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const KvMessageHeader h = BenchHeader(t, size);
      const std::vector<ConstSpan> payload = {{src[t].data(), size}};
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < iters && errors[t].ok(); ++i) {
        errors[t] = ep.sender->Send(ep.address, h, payload);
      }
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  const double t0 = NowSeconds();
  go.store(true);
  for (auto& w : workers) w.join();
  const double elapsed = NowSeconds() - t0;
  for (const absl::Status& s : errors) RETURN_IF_ERROR(s);
  return static_cast<double>(size) * iters * threads / elapsed / 1e9;
}

// SendAsync with one message in flight per buffer of `src` (so src.size() in
// flight, as perftest -O keeps its sends outstanding): each verdict sends that
// buffer's next message from the transport's callback, `iters` per buffer. The
// checksums come from the producer (computed once per buffer, before the
// clock starts), as the prefill worker checksums each chunk while it is in its
// cache; the receiver verifies every message. Returns 1e9 B/s.
absl::StatusOr<double> MeasureAsync(Endpoint& ep, const std::vector<std::vector<uint8_t>>& src,
                                    uint64_t size, int iters) {
  const int window = static_cast<int>(src.size());
  struct Slot {
    KvMessageHeader header;
    std::vector<ConstSpan> payload;
    int left = 0;
  };
  std::vector<Slot> slots(window);
  for (int t = 0; t < window; ++t) {
    slots[t].header = BenchHeader(t, size);
    slots[t].header.payload_checksum = kv_transport::Crc32c(0, src[t].data(), size);
    slots[t].payload = {{src[t].data(), size}};
    slots[t].left = iters;
  }
  absl::Mutex mu;
  absl::Status error;
  int running = window;
  absl::Notification all_done;
  std::function<void(int, absl::Status)> on_verdict = [&](int t, absl::Status s) {
    Slot& slot = slots[t];
    if (s.ok() && --slot.left > 0) {
      ep.sender->SendAsync(ep.address, slot.header, slot.payload, true,
                           [&on_verdict, t](absl::Status v) { on_verdict(t, std::move(v)); });
      return;
    }
    absl::MutexLock lock(&mu);
    if (!s.ok() && error.ok()) error = s;
    if (--running == 0) all_done.Notify();
  };
  const double t0 = NowSeconds();
  for (int t = 0; t < window; ++t) {
    ep.sender->SendAsync(ep.address, slots[t].header, slots[t].payload, true,
                         [&on_verdict, t](absl::Status v) { on_verdict(t, std::move(v)); });
  }
  all_done.WaitForNotification();  // every send reports (send_timeout_ms bounds each)
  const double elapsed = NowSeconds() - t0;
  absl::MutexLock lock(&mu);
  RETURN_IF_ERROR(error);
  return static_cast<double>(size) * iters * window / elapsed / 1e9;
}

int ItersFor(const TransportBenchOptions& o, uint64_t size, int divisor) {
  const uint64_t n = o.bytes_per_sample / size / static_cast<uint64_t>(divisor);
  return static_cast<int>(std::max<uint64_t>(n, static_cast<uint64_t>(o.min_iters)));
}

// Median-of-5 single-thread rates of CRC32C, memcpy and the fused copy +
// CRC32C (the receiver's landing pass) over `bytes`: as the transport runs them
// (the implementation chosen for this process), then per implementation.
void MeasureCpuRates(uint64_t bytes, TransportReport* report) {
  std::vector<uint8_t> a(bytes, 1), b(bytes, 2);
  volatile uint32_t sink = 0;
  auto rate = [bytes](double t0) {
    return static_cast<double>(bytes) / (NowSeconds() - t0) / 1e9;
  };
  std::vector<double> crc, copy, copy_crc;
  for (int i = 0; i < 5; ++i) {
    double t0 = NowSeconds();
    sink = sink + kv_transport::Crc32c(0, a.data(), a.size());
    crc.push_back(rate(t0));
    t0 = NowSeconds();
    std::memcpy(b.data(), a.data(), bytes);
    copy.push_back(rate(t0));
    t0 = NowSeconds();
    sink = sink + kv_transport::CopyCrc32c(0, b.data(), a.data(), bytes);
    copy_crc.push_back(rate(t0));
    a[i] = b[bytes - 1 - i];
  }
  report->crc32c_gbps = Summarize(crc);
  report->memcpy_gbps = Summarize(copy);
  report->copy_crc32c_gbps = Summarize(copy_crc);
  report->crc32c_impl = std::string(kv_transport::Crc32cImplementation());
  for (kv_transport::Crc32cImpl impl : kv_transport::SupportedCrc32cImpls()) {
    std::vector<double> impl_crc, impl_copy_crc;
    for (int i = 0; i < 5; ++i) {
      double t0 = NowSeconds();
      sink = sink + kv_transport::Crc32cWith(impl, 0, a.data(), a.size());
      impl_crc.push_back(rate(t0));
      t0 = NowSeconds();
      sink = sink + kv_transport::CopyCrc32cWith(impl, 0, b.data(), a.data(), bytes);
      impl_copy_crc.push_back(rate(t0));
    }
    report->crc32c_by_impl.push_back({std::string(kv_transport::Crc32cImplName(impl)),
                                      Summarize(impl_crc), Summarize(impl_copy_crc)});
  }
}

}  // namespace

int RunKvSinkRole(const std::string& tls, uint64_t slot_bytes, int slots, int verifier_threads,
                  int fused_receive) {
  SlotSink sink(slot_bytes, std::max(slots, 1));
  kv_transport::TransportOptions to;
  to.kind = "ucx";
  to.ucx_tls = tls;
  to.verifier_threads = verifier_threads;
  to.fused_receive = fused_receive;
  auto transport = kv_transport::CreateKvTransport(to);
  if (!transport.ok()) {
    std::fprintf(stderr, "kv sink: %s\n", transport.status().ToString().c_str());
    return 1;
  }
  auto address = (*transport)->Listen("127.0.0.1:0", &sink);
  if (!address.ok()) {
    std::fprintf(stderr, "kv sink: %s\n", address.status().ToString().c_str());
    return 1;
  }
  std::printf("ADDR %s\n", address->c_str());
  std::fflush(stdout);
  char buf[256];
  while (read(STDIN_FILENO, buf, sizeof buf) > 0) {
  }
  return 0;
}

absl::StatusOr<TransportReport> RunTransportBench(const TransportBenchOptions& o,
                                                  const Progress& progress) {
  if (o.threads < 1 || o.repetitions < 1 || o.sizes.empty() || o.tls.empty()) {
    return absl::InvalidArgumentError("transport bench: threads, repetitions, sizes, tls");
  }
  TransportReport report;
  report.options = o;
  report.ucx_version = UcxVersionString();
  const uint64_t max_size = *std::max_element(o.sizes.begin(), o.sizes.end());
  std::vector<std::vector<uint8_t>> src(o.threads, std::vector<uint8_t>(max_size));
  for (int t = 0; t < o.threads; ++t) {
    for (uint64_t i = 0; i < max_size; ++i) src[t][i] = static_cast<uint8_t>(i * 131 + t);
  }
  const std::vector<std::vector<uint8_t>> single_src(1, src[0]);
  MeasureCpuRates(max_size, &report);
  progress(absl::StrFormat("transport: CRC32C %.2f GB/s (%s), memcpy %.2f GB/s (one thread)",
                           report.crc32c_gbps.median, report.crc32c_impl,
                           report.memcpy_gbps.median));
  for (const auto& r : report.crc32c_by_impl) {
    progress(absl::StrFormat("transport: CRC32C %s: %.2f GB/s, copy + CRC32C %.2f GB/s", r.impl,
                             r.crc32c_gbps.median, r.copy_crc32c_gbps.median));
  }
  for (const std::string& tls : o.tls) {
    LaneRow row;
    row.tls = tls;
    ASSIGN_OR_RETURN(row.ours, ProbeUcxLanes(tls, /*peer_error_handling=*/true));
    ASSIGN_OR_RETURN(row.perftest, ProbeUcxLanes(tls, /*peer_error_handling=*/false));
    progress(absl::StrCat("transport: UCX_TLS=", tls, " lanes with peer error handling: am ",
                          row.ours.am, ", rendezvous ", row.ours.rndv, "; without: am ",
                          row.perftest.am, ", rendezvous ", row.perftest.rndv));
    report.lanes.push_back(row);
  }
  std::map<std::string, std::unique_ptr<Endpoint>> endpoints;
  for (const std::string& tls : o.tls) {
    ASSIGN_OR_RETURN(endpoints[tls], StartEndpoint(o, tls, max_size));
    progress(absl::StrCat("transport: kv sink for UCX_TLS=", tls, " at ", endpoints[tls]->address));
  }
  for (const std::string& tls : o.tls) {
    for (uint64_t size : o.sizes) {
      TransportCell cell;
      cell.tls = tls;
      cell.size = size;
      report.cells.push_back(cell);
    }
  }
  int port = o.port_base;  // 0: RunPerftest picks a free port every time
  for (int rep = 0; rep < o.repetitions; ++rep) {
    for (TransportCell& cell : report.cells) {
      Endpoint& ep = *endpoints[cell.tls];
      const int ours_iters = ItersFor(o, cell.size, o.threads);
      const int perf_iters = ItersFor(o, cell.size, 1);
      // Warm the connection and the destination pages once per cell.
      if (rep == 0) RETURN_IF_ERROR(MeasureAsync(ep, src, cell.size, 2).status());
      double ours = 0, blocking = 0, perf = 0, single = 0, perf_peer = 0;
      auto run_ours = [&]() -> absl::Status {
        ASSIGN_OR_RETURN(ours, MeasureAsync(ep, src, cell.size, ours_iters));
        return absl::OkStatus();
      };
      auto run_blocking = [&]() -> absl::Status {
        ASSIGN_OR_RETURN(blocking, MeasureBlocking(ep, src, cell.size, ours_iters));
        return absl::OkStatus();
      };
      auto run_single = [&]() -> absl::Status {
        if (!o.single_flight) return absl::OkStatus();
        ASSIGN_OR_RETURN(single, MeasureBlocking(ep, single_src, cell.size, perf_iters));
        return absl::OkStatus();
      };
      auto run_perf_with = [&](bool error_handling, double* out) -> absl::Status {
        PerftestRun run;
        run.error_handling = error_handling;
        run.binary = o.perftest;
        run.test = o.perftest_test;
        run.tls = cell.tls;
        run.size = cell.size;
        run.iters = perf_iters;
        run.warmup = std::max(2, perf_iters / 16);
        run.outstanding = o.threads;
        run.port = port > 0 ? port++ : 0;
        run.log_dir = o.scratch_dir;
        ASSIGN_OR_RETURN(*out, RunPerftest(run));
        return absl::OkStatus();
      };
      auto run_perf = [&]() { return run_perf_with(false, &perf); };
      auto run_perf_peer = [&]() -> absl::Status {
        if (!o.perftest_peer) return absl::OkStatus();
        return run_perf_with(true, &perf_peer);
      };
      // Rotate the order of the measurements from one repetition to the next.
      const std::function<absl::Status()> runs[] = {run_ours, run_perf, run_blocking, run_single,
                                                    run_perf_peer};
      for (int k = 0; k < 5; ++k) RETURN_IF_ERROR(runs[(k + rep) % 5]());
      cell.ours_gbps.push_back(ours);
      cell.blocking_gbps.push_back(blocking);
      cell.perftest_gbps.push_back(perf);
      cell.ratio.push_back(perf > 0 ? ours / perf : 0);
      if (o.single_flight) cell.single_gbps.push_back(single);
      if (o.perftest_peer) {
        cell.perftest_peer_gbps.push_back(perf_peer);
        cell.ratio_peer.push_back(perf_peer > 0 ? ours / perf_peer : 0);
      }
      progress(absl::StrCat(
          absl::StrFormat("transport rep %d/%d UCX_TLS=%-7s %8.0f KiB: ours %.3f GB/s (%d in "
                          "flight; blocking Sends %.3f), %s %.3f GB/s (%.0f%%)",
                          rep + 1, o.repetitions, cell.tls, cell.size / 1024.0, ours, o.threads,
                          blocking, o.perftest_test, perf, perf > 0 ? 100 * ours / perf : 0),
          o.perftest_peer ? absl::StrFormat(", with -e %.3f GB/s (%.0f%%)", perf_peer,
                                            perf_peer > 0 ? 100 * ours / perf_peer : 0)
                          : "",
          o.single_flight ? absl::StrFormat("; ours with 1 in flight %.3f GB/s", single) : ""));
    }
  }
  for (TransportCell& cell : report.cells) {
    cell.ours = Summarize(cell.ours_gbps);
    cell.blocking = Summarize(cell.blocking_gbps);
    cell.perftest = Summarize(cell.perftest_gbps);
    cell.ratio_summary = Summarize(cell.ratio);
    cell.single = Summarize(cell.single_gbps);
    cell.best_ratio = cell.perftest.max > 0 ? cell.ours.max / cell.perftest.max : 0;
    cell.perftest_peer = Summarize(cell.perftest_peer_gbps);
    cell.ratio_peer_summary = Summarize(cell.ratio_peer);
    cell.best_ratio_peer = cell.perftest_peer.max > 0 ? cell.ours.max / cell.perftest_peer.max : 0;
  }
  for (auto& [tls, ep] : endpoints) {
    ep->sender.reset();
    ep->sink->CloseStdin();
    (void)ep->sink->Wait(10);
  }
  return report;
}

}  // namespace ced::bench
