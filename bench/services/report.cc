#include "bench/services/report.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/common/run_info.h"
#include "bench/services/perftest.h"

namespace ced::bench {
namespace {

std::string S(const Summary& s, const char* fmt, const std::string& unit = "") {
  return FormatSummary(s, fmt, unit);
}

std::string Pct(const Summary& s) {
  return absl::StrFormat("%.1f%% [%.1f .. %.1f]", 100 * s.median, 100 * s.min, 100 * s.max);
}

std::string SizeName(uint64_t b) {
  return b >= (1u << 20) ? absl::StrCat(b >> 20, " MiB") : absl::StrCat(b >> 10, " KiB");
}

void Transport(const TransportReport& t, std::string* md) {
  const TransportBenchOptions& o = t.options;
  absl::StrAppend(
      md, "## 1. KV transfer throughput: our UCX transport vs `ucx_perftest`\n\n",
      "Loopback, two processes each side. **Ours**: a receiver process whose `KvSink` lands "
      "every message in a preallocated slot, and a sender keeping ",
      o.threads,
      " messages in flight with `KvTransport::SendAsync` (each verdict sends that buffer's next "
      "message from the transport's callback, as perftest re-posts a completed send). A "
      "message counts once the receiver verified its CRC32C and its acknowledgement came "
      "back: the figure includes the receiver's checksum pass and the verdict round trip. "
      "The payload checksums come from the producer, as the prefill worker computes each "
      "chunk's while the chunk is still in its cache (`SendChecksummed`/`SendAsync` with "
      "`checksum_given`; computed once per buffer before the clock starts). *Blocking Sends* "
      "is the previous way: ",
      o.threads,
      " threads each waiting out one `Send` at a time, the transport checksumming every "
      "payload on the sending thread. **Reference**: `ucx_perftest -t ",
      o.perftest_test, " -O ", o.threads,
      "` (server + client), the UCP active-message bandwidth test — the same API our "
      "transport uses (`ucp_am_send_nbx`, rendezvous above the eager threshold, received with "
      "`ucp_am_recv_data_nbx`). Both get the same `UCX_TLS`. ",
      o.bytes_per_sample >> 20, " MiB per measurement (at least ", o.min_iters, " messages), ",
      o.repetitions, " repetitions. GB/s = 1e9 B/s. UCX ", t.ucx_version,
      ". *perftest -e* is the same test with `-e`, endpoints with peer error handling as ours "
      "has them (see the lanes below): the like-for-like reference, and the ≥ 80% column "
      "tests ours against it. *ours, 1 in flight* is one blocking Send at a time. Every "
      "repetition runs the measurements of a cell back to back, in rotating order.\n\n"
      "| UCX_TLS | message | ours GB/s | perftest -e GB/s | ours / perftest -e (paired) | best "
      "ours / best perftest -e | ≥ 80% (paired / best) | perftest GB/s | ours / perftest "
      "(paired; best) | blocking Sends GB/s | ours, 1 in flight |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const TransportCell& c : t.cells) {
    const bool peer = c.perftest_peer.n > 0;
    absl::StrAppend(md, "| ", c.tls, " | ", SizeName(c.size), " | ", S(c.ours, "%.3f"), " | ",
                    peer ? S(c.perftest_peer, "%.3f") : "—", " | ",
                    peer ? Pct(c.ratio_peer_summary) : "—", " | ",
                    peer ? absl::StrFormat("%.1f%%", 100 * c.best_ratio_peer) : "—", " | ",
                    peer ? absl::StrCat(c.ratio_peer_summary.median >= 0.8 ? "yes" : "**no**",
                                        " / ", c.best_ratio_peer >= 0.8 ? "yes" : "**no**")
                         : "—",
                    " | ", S(c.perftest, "%.3f"), " | ", Pct(c.ratio_summary), "; ",
                    absl::StrFormat("%.1f%%", 100 * c.best_ratio), " | ",
                    c.blocking.n > 0 ? S(c.blocking, "%.3f") : "—", " | ",
                    c.single.n > 0 ? S(c.single, "%.3f") : "—", " |\n");
  }
  absl::StrAppend(
      md,
      "\nMedian [min .. max] over repetitions. *Paired*: the ratio of the two measurements "
      "of one repetition (they ran back to back), summarized over repetitions. *Best*: the "
      "best sample of each over the run (the STREAM convention) — ucx_perftest busy-polls "
      "both its processes, so on a shared, oversubscribed machine its samples collapse "
      "whenever it is descheduled (see the min column) while ours yields its core on every "
      "idle round and sleeps in `poll` after 0.5 ms idle; the best samples estimate what each does "
      "on a quiet machine and are "
      "the fairer test of the target.\n\n");
  absl::StrAppend(
      md,
      "**Which UCX lanes carry the bytes** (`ucp_ep_print_info` of a loopback endpoint made "
      "from an exchanged worker address like the KV transport's — peer error handling, its "
      "shared-memory error-handling switch — and like ucx_perftest's — no error handling; "
      "rendezvous lanes are the RMA lanes, or the bulk active-message lanes when there are "
      "none):\n\n"
      "| UCX_TLS | KV transport: AM lanes | KV transport: rendezvous lanes | perftest: AM "
      "lanes | perftest: rendezvous lanes |\n|---|---|---|---|---|\n");
  for (const LaneRow& l : t.lanes) {
    absl::StrAppend(md, "| ", l.tls, " | ", l.ours.am, " | ", l.ours.rndv, " | ", l.perftest.am,
                    " | ", l.perftest.rndv, " |\n");
  }
  absl::StrAppend(
      md,
      "\nThe KV transport connects as ucx_perftest does — the peers exchange UCP worker "
      "addresses (over a small TCP handshake on the listener's port that also checks the "
      "peer names a live reservation) and create endpoints from them — but with peer error "
      "handling: it is how the decode worker learns that a prefill peer died mid-transfer "
      "(the sink's Complete gets UNAVAILABLE) and how a Send that timed out force-closes its "
      "connection so that the payload is no longer referenced. With it, UCX 1.13 selects no "
      "CMA lane (it cannot detect a dead peer), so on shm,tcp large messages take the "
      "rendezvous over the shared-memory active-message lane, where ucx_perftest's endpoints "
      "without error handling read them with one CMA copy (`process_vm_readv`). *perftest -e* "
      "has exactly our lanes: *ours / perftest -e* is the like-for-like figure. What ours "
      "does per message beyond perftest: the 64-byte header encoded and checked, the sink's "
      "Accept, CRC32C verification of every payload byte, Complete, and an acknowledgement "
      "message back to the sender. On these lanes the rendezvous runs over active messages "
      "— UCX copies every fragment out of its shared-memory or socket buffer — so the "
      "receiver takes the payload through a UCX generic datatype whose unpack copies each "
      "fragment into the sink's span and folds it into the checksum in the same pass "
      "(`TransportOptions::fused_receive`): the check costs no second read of the payload. "
      "(On RMA lanes UCX lands a payload zero-copy and the receiver reads it once more.)\n");
  absl::StrAppend(
      md, "\nSingle-thread CPU rates on a ",
      SizeName(o.sizes.empty() ? 0 : *std::max_element(o.sizes.begin(), o.sizes.end())),
      " buffer, same run: CRC32C (", t.crc32c_impl, ") ", S(t.crc32c_gbps, "%.2f", " GB/s"),
      " (blocking Sends checksum on the sender); memcpy ", S(t.memcpy_gbps, "%.2f", " GB/s"),
      "; copy + CRC32C in one pass (the receiver's landing) ",
      S(t.copy_crc32c_gbps, "%.2f", " GB/s"), ".\n\n");
  if (!t.crc32c_by_impl.empty()) {
    absl::StrAppend(md,
                    "CRC32C per implementation this CPU runs (chosen at run time; "
                    "`CED_CPU_ISA` lowers it):\n\n| implementation | CRC32C | copy + CRC32C |\n"
                    "|---|---|---|\n");
    for (const auto& r : t.crc32c_by_impl) {
      absl::StrAppend(md, "| ", r.impl, " | ", S(r.crc32c_gbps, "%.2f", " GB/s"), " | ",
                      S(r.copy_crc32c_gbps, "%.2f", " GB/s"), " |\n");
    }
    absl::StrAppend(md, "\n");
  }
}

void Ttft(const TtftReport& t, std::string* md) {
  const TtftBenchOptions& o = t.options;
  absl::StrAppend(
      md, "## 2. Share of TTFT spent on non-overlapped K/V transfer\n\n", "`ced cluster` on `",
      o.preset, "` (one prefill, one decode worker, f32 cache, UCX_TLS ",
      o.ucx_tls.empty() ? "inherited" : o.ucx_tls, "), ", o.prompt_tokens,
      "-token prompts (`prompt_token_ids`, a fresh prompt per request: no prefix-cache hit), "
      "max_tokens ",
      o.max_tokens, ", greedy, ", o.repetitions,
      " requests per placement after a warm-up, alternating. The gateway's `transfer_ms` is "
      "the exposed transfer the prefill worker measures: from the end of its compute until its "
      "last K/V message is acknowledged. Cross-check from the decode side: *ready* is the "
      "decode worker's `ced_kv_transfer_seconds` observation for the request (reservation → "
      "all K/V and the tail landed); the prefill compute starts right after the reservation, "
      "so *ready − prefill compute* is the same quantity (an upper bound: it also holds the "
      "prefill RPC's dispatch). **Share** = exposed transfer ÷ client TTFT when the first "
      "token waits for the transfer (replay on decode); with the replay on prefill the first "
      "token leaves before the K/V is complete, so the share of TTFT is 0 and the transfer "
      "shows in the gap to the second token.\n\n"
      "| replay on | client TTFT ms | gateway prefill ms | gateway transfer_ms | share of TTFT "
      "| ready ms | ready − prefill ms | share (decode side) | 1st→2nd token ms | K/V bytes "
      "|\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const TtftRow& r : t.rows) {
    absl::StrAppend(md, "| ", r.replay_on,
                    r.placement_seen == r.replay_on ? "" : " (ran on " + r.placement_seen + ")",
                    " | ", S(r.client_ttft, "%.0f"), " | ", S(r.prefill, "%.0f"), " | ",
                    S(r.gw_transfer, "%.1f"), " | ", Pct(r.share_gateway), " | ",
                    S(r.ready, "%.0f"), " | ", S(r.nonoverlap, "%.1f"), " | ",
                    Pct(r.share_nonoverlap), " | ", S(r.second_gap, "%.0f"), " | ",
                    absl::StrFormat("%.0f", r.bytes), " |\n");
  }
  absl::StrAppend(md, "\nCluster start: ", absl::StrFormat("%.1f", t.cluster_startup_s), " s.\n\n");
}

void Gateway(const GatewayReport& g, std::string* md) {
  const GatewayBenchOptions& o = g.options;
  absl::StrAppend(
      md, "## 3. Gateway overhead\n\n", "`ced cluster` on `", o.preset,
      "` (one prefill, one decode worker",
      o.cluster_flags.empty() ? "" : absl::StrCat(", `", o.cluster_flags, "`"),
      "). Latency: ", o.prompt_tokens, "-token prompts, ", o.max_tokens,
      " tokens, greedy, replay on decode, ", o.repetitions,
      " requests per path, order rotated each repetition. **gateway** = "
      "`ced.v1.Gateway/Generate`; **openai** = the gateway's OpenAI-compatible API, `POST "
      "/v1/completions` with `stream: true` (server-sent events; each client thread keeps "
      "its connection alive, as OpenAI clients pool theirs; OpenAI's events carry text, so "
      "a token's time is its event's and tokens merged into one event share it); **direct** = the "
      "bench does the gateway's work itself "
      "(`DecodeWorker.Reserve` + `Stream`, `PrefillWorker.Prefill`): same placement, no "
      "gateway or router hop, one token stream per request as any client of one request "
      "has it (the gateway receives its tokens on one multiplexed stream per decode worker, "
      "`DecodeWorker.Subscribe`; `--decode-mux`); **local** = `Reserve` with `local_prefill` + "
      "`Stream` (the "
      "decode worker prefills itself, no K/V transfer)",
      o.embedded_router
          ? "; **gateway-embedded**, **openai-embedded** = the same APIs on a second cluster, up "
            "at the same time, whose gateway runs the router in its own process (`ced cluster "
            "--embed-router`: placement is a function call instead of a Route RPC); their "
            "requests take turns with the other paths'"
          : "",
      ". Client-measured; TPOT = mean gap after the first token.\n\n| path | TTFT ms | TPOT "
      "ms |\n|---|---|---|\n");
  const LatencyPath* direct = nullptr;
  for (const LatencyPath& p : g.paths) {
    absl::StrAppend(md, "| ", p.name, " | ", S(p.ttft, "%.2f"), " | ", S(p.tpot, "%.3f"), " |\n");
    if (p.name == "direct") direct = &p;
  }
  if (direct != nullptr) {
    absl::StrAppend(md, "\nGateway overhead (medians, path − direct):");
    for (const LatencyPath& p : g.paths) {
      if (p.name == "direct" || p.name == "local") continue;
      absl::StrAppend(md, absl::StrFormat(" %s TTFT %+.2f ms, TPOT %+.3f ms per token;", p.name,
                                          p.ttft.median - direct->ttft.median,
                                          p.tpot.median - direct->tpot.median));
    }
    absl::StrAppend(md, " target: TTFT <= +0.5 ms.\n\n");
  }
  absl::StrAppend(
      md, "Streamed tokens per second, `c` concurrent streams of ", o.stream_tokens, " tokens (",
      o.stream_prompt_tokens,
      "-token prompts, ignore_eos), the paths in an order rotated each "
      "repetition, ",
      o.throughput_repetitions,
      " repetitions. Per-stream TTFT and TPOT: median over a repetition's streams, then median "
      "over repetitions. Target: each API ≥ 0.9× direct at 16 and 48 streams.\n");
  auto ratio = [](const ThroughputSide* a, const ThroughputSide* b) {
    return a != nullptr && b != nullptr && b->tokens_per_s.median > 0
               ? absl::StrFormat("%.2f", a->tokens_per_s.median / b->tokens_per_s.median)
               : std::string("-");
  };
  for (const std::string suffix : {"", "-embedded"}) {
    bool header = false;
    for (const ThroughputPoint& p : g.throughput) {
      const ThroughputSide* gw = p.Side("gateway" + suffix);
      const ThroughputSide* oa = p.Side("openai" + suffix);
      const ThroughputSide* di = p.Side("direct");
      if (gw == nullptr || oa == nullptr || di == nullptr) continue;
      if (!header) {
        absl::StrAppend(md, "\n",
                        suffix.empty() ? "Router in its own process:"
                                       : "Router embedded in the gateway (`--embed-router`):",
                        "\n\n| c | gRPC tok/s | OpenAI tok/s | direct tok/s | gRPC ÷ direct | "
                        "OpenAI ÷ direct | TTFT ms gRPC / OpenAI / direct | TPOT ms gRPC / "
                        "OpenAI / direct |\n|---|---|---|---|---|---|---|---|\n");
        header = true;
      }
      absl::StrAppend(
          md, "| ", p.concurrency, " | ", S(gw->tokens_per_s, "%.0f"), " | ",
          S(oa->tokens_per_s, "%.0f"), " | ", S(di->tokens_per_s, "%.0f"), " | ", ratio(gw, di),
          " | ", ratio(oa, di), " | ",
          absl::StrFormat("%.0f / %.0f / %.0f | %.2f / %.2f / %.2f |\n",
                          Summarize(gw->ttft_ms).median, Summarize(oa->ttft_ms).median,
                          Summarize(di->ttft_ms).median, Summarize(gw->tpot_ms).median,
                          Summarize(oa->tpot_ms).median, Summarize(di->tpot_ms).median));
    }
  }
  absl::StrAppend(md,
                  "\nCPU time per 1000 streamed tokens (ms, median over repetitions), by "
                  "process: each service's `ced_process_cpu_seconds_total`, the bench's own "
                  "(`getrusage`) for the clients. What a path costs the machine, whatever the "
                  "contention. The counters tick in 10 ms steps: at c = 1 (128 tokens per "
                  "repetition) a tick is 78 ms per 1000 tokens, so that row is coarse. On the "
                  "*-embedded paths the router's CPU is in the gateway's column.\n\n| c | path |");
  for (const std::string& name : CpuProcesses()) absl::StrAppend(md, " ", name, " |");
  absl::StrAppend(md, " all |\n|---|---|");
  for (size_t i = 0; i <= CpuProcesses().size(); ++i) absl::StrAppend(md, "---|");
  absl::StrAppend(md, "\n");
  for (const ThroughputPoint& p : g.throughput) {
    for (const ThroughputSide& side : p.sides) {
      absl::StrAppend(md, "| ", p.concurrency, " | ", side.path, " |");
      double all = 0;
      for (size_t i = 0; i < CpuProcesses().size(); ++i) {
        std::vector<double> v;
        for (const auto& rep : side.cpu_ms_per_ktok) v.push_back(rep[i]);
        const double m = Summarize(v).median;
        all += m;
        absl::StrAppend(md, absl::StrFormat(" %.0f |", m));
      }
      absl::StrAppend(md, absl::StrFormat(" %.0f |\n", all));
    }
  }
  absl::StrAppend(md, "\n");
}

void KvBytes(const KvBytesReport& k, std::string* md) {
  const KvBytesBenchOptions& o = k.options;
  absl::StrAppend(
      md, "## 4. K/V bytes per prompt token on the wire\n\n",
      "One `ced cluster --kv-format F` per row; bytes are deltas of the decode worker's "
      "`ced_kv_transfer_bytes_total{direction=\"in\"}` around single requests of ",
      o.short_prompt, " and ", o.long_prompt,
      " prompt tokens (the prefill worker's `direction=\"out\"` agrees: column *prefill out*). "
      "**per token** = (B(",
      o.long_prompt, ") − B(", o.short_prompt, ")) ÷ ", o.long_prompt - o.short_prompt,
      ": the global K/V; **tail** = B(N) − N × per token: the per-sequence part. Hand "
      "arithmetic, per token: 2 (K, V) × own-source layers × bytes of one row of G·D values "
      "(fp4: G·D/2 values + G·D/16 E4M3 scales). Tail: a 32-byte descriptor + local K/V rings "
      "(W tokens × 2 rows per layer: the encoder's layers when the decode worker replays, "
      "all layers when the prefill worker replays or the model is decoder-only) + for a "
      "replay on decode h_E of the R replayed tokens, R × d × 4 bytes (f32 whatever the "
      "cache format).\n\n"
      "| preset | format | per token (wire) | accounting | hand | B(",
      o.long_prompt, ") | prefill out | B/prompt token at ", o.long_prompt,
      " | tail, replay on decode (decoder-only: no replay) | tail, replay on prefill |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n");
  for (const KvBytesRow& r : k.rows) {
    absl::StrAppend(
        md, "| ", r.preset, " | ", r.format, " | ", absl::StrFormat("%.1f", r.slope), " | ",
        r.accounting_per_token, " | ", r.hand_formula, " = ", r.hand_per_token, " | ",
        absl::StrFormat("%.0f", r.bytes_long), " | ", absl::StrFormat("%.0f", r.prefill_out_long),
        " | ", absl::StrFormat("%.1f", r.bytes_long / r.long_prompt), " | ",
        absl::StrFormat("%.0f (hand %s = %d)", r.tail_decode, r.hand_tail_decode_formula,
                        r.hand_tail_decode),
        " | ",
        r.decoder_only ? "— (no replay)"
                       : absl::StrFormat("%.0f (hand %s = %d)", r.tail_prefill,
                                         r.hand_tail_prefill_formula, r.hand_tail_prefill),
        " |\n");
  }
  absl::StrAppend(md, "\n");
}

}  // namespace

MachineFacts CollectMachineFacts() {
  MachineFacts m;
  m.cpu_model = CpuModelName();
  std::string line;
  m.logical_cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  std::ifstream mem("/proc/meminfo");
  while (std::getline(mem, line)) {
    if (line.rfind("MemTotal:", 0) == 0) {
      m.mem_total_gib = std::atof(line.substr(9).c_str()) / (1024.0 * 1024.0);
      break;
    }
  }
  utsname u{};
  if (uname(&u) == 0) m.kernel = absl::StrCat(u.sysname, " ", u.release);
  m.load_start = LoadAverage();
  m.ucx_version = UcxVersionString();
  const char* tls = std::getenv("UCX_TLS");
  m.ucx_tls_env = tls ? tls : "";
  return m;
}

std::string FormatMarkdown(const ServicesReport& r) {
  const MachineFacts& m = r.machine;
  std::string md = absl::StrCat(
      "# Services benchmarks\n\nGenerated by `ced_services_bench` (see bench/README.md, "
      "\"Services\"); do not edit by hand.\n\n",
      "- Command: `", r.command, "`\n- Date (UTC): ", r.date_utc,
      "\n- Wall time: ", absl::StrFormat("%.0f s", r.wall_s), r.quick ? " (quick mode)" : "", "\n",
      "- Machine: ", m.cpu_model, ", ", m.logical_cores, " logical cores, ",
      absl::StrFormat("%.1f GiB", m.mem_total_gib), " RAM, ", m.kernel, "\n",
      "- Load average (1/5/15 min) at start: ", m.load_start, "; at end: ", m.load_end,
      " — the machine is shared: every comparison alternates its sides and reports the "
      "median with [min .. max]\n",
      "- UCX ", m.ucx_version, "; UCX_TLS in the environment: ",
      m.ucx_tls_env.empty() ? "unset (UCX default)" : m.ucx_tls_env, "\n\n");
  if (r.transport) Transport(*r.transport, &md);
  if (r.ttft) Ttft(*r.ttft, &md);
  if (r.gateway) Gateway(*r.gateway, &md);
  if (r.kv_bytes) KvBytes(*r.kv_bytes, &md);
  return md;
}

}  // namespace ced::bench
