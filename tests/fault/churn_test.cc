// Issue 15 point 3, under churn: decode workers join and leave one after
// another while client threads stream long prompts through the gateway to
// them and to one stable decode worker. They leave by SIGKILL, by SIGTERM
// (with a 100 ms drain: its requests are given up), and, once, by vanishing:
// SIGSTOP, its connections open and silent as when a host drops off the
// network, until the churn is over (SIGKILL then). On loopback a killed
// peer's connections reset at once; a vanished one is where a send to it
// blocks (up to the transport's 30 s send timeout) and a prefill worker that
// sends to every peer in one queue would hold everybody's K/V behind it.
// A departure costs only the requests the departed worker held:
// - with migration off (--migration-limit 0) a request may fail only if it
//   ran while a worker left; the stable worker counts no failed or cancelled
//   request and finished exactly the requests the client saw succeed on it;
// - with migration on (the default; SIGKILL, and SIGTERM with the default
//   drain) every request succeeds;
// and every request that succeeded streamed the colocated engine's tokens and
// ended within kEndBoundMs of its start, far below the 30 s a K/V send stuck
// on a departed peer (or a reservation timeout) takes.
//
// Deterministic: the prefill worker sleeps before every K/V message
// (send_delay_ms), so a long prompt's K/V takes about a second to move; the
// test takes a churn worker away only as K/V bytes reach it, every other time
// the first of its first request (7 more messages are queued for it), in
// between after it finished a request and as the next K/V arrives.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "tests/fault/fault_cluster.h"

namespace ced::testing {
namespace {

constexpr int kChunk = 64;
constexpr int kPromptTokens = 512;  // 8 chunks, each K/V message 100 ms apart
constexpr int kSendDelayMs = 100;
constexpr int kMaxTokens = 12;
// > 1 in flight, so that both decode workers get requests, even while one
// client waits on a vanished worker.
constexpr int kClients = 4;
// A request ends (success or failure) within this of its start. Its own K/V
// takes 0.8 s, 2.4 s behind the other clients' on the same decode worker; a
// send stuck on a departed peer, or a reservation timeout, holds it 30 s.
constexpr int kEndBoundMs = 10000;
// The stable worker's requests share its send lane: kClients of them queue.
static_assert(kPromptTokens / kChunk * kSendDelayMs * kClients * 2 < kEndBoundMs, "no margin");
// After a departure the router may still place requests on the worker until
// it misses its heartbeats (1 s in FaultCluster).
constexpr int kDepartureGraceMs = 3000;

struct Outcome {
  std::string id;
  int salt = 0;
  SteadyClock::time_point start, end;
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::string decode_worker;  // from the final message; empty on failure
  int migrations = 0;
};

struct Departure {
  std::string worker;
  SteadyClock::time_point at;
};

double MsOf(SteadyClock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double InBytes(Proc& p) {
  return ScrapeMetric(p.metrics(), "ced_kv_transfer_bytes_total{direction=\"in\"}").value_or(0);
}

double Finished(Proc& p) {
  return ScrapeMetric(p.metrics(), "ced_requests_total{outcome=\"ok\"}").value_or(0);
}

void Percentiles(const std::string& scenario, const std::string& group, std::vector<double> ms) {
  Figure(scenario, group + "_count", static_cast<double>(ms.size()));
  if (ms.empty()) return;
  std::sort(ms.begin(), ms.end());
  Figure(scenario, group + "_p50_ms", ms[ms.size() / 2]);
  Figure(scenario, group + "_max_ms", ms.back());
}

struct Case {
  const char* name;
  int migration_limit;
  int cycles;
  int churn_drain_ms;  // --drain-timeout-ms of the churn workers (SIGTERM); -1: the default
  // The first churn worker vanishes (SIGSTOP) instead of being killed, and is
  // SIGKILLed only when the churn is over: its requests hang until then.
  bool vanish_first;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class FaultChurnTest : public ::testing::TestWithParam<Case> {};

TEST_P(FaultChurnTest, DepartingDecodeWorkersCostOnlyTheirRequests) {
  const Case& param = GetParam();
  const std::string scenario = std::string("churn_") + param.name;
  const std::string model = MakeModelDir("tiny");
  FaultClusterOptions o = Topology(model, 1, 1);
  o.prefill_flags = {"--chunk", std::to_string(kChunk), "--fault-injection-for-testing",
                     "match=churn,send_delay_ms=" + std::to_string(kSendDelayMs)};
  o.gateway_flags = {"--migration-limit", std::to_string(param.migration_limit)};
  FaultCluster c(o);
  ASSERT_TRUE(c.ok());
  const std::string stable = c.decode_id(0);

  std::mutex mu;
  std::vector<Outcome> outcomes;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t) {
    clients.emplace_back([&, t] {
      for (int n = 0; !stop.load(); ++n) {
        Outcome r;
        r.salt = n * kClients + t;  // a prompt of its own: no prefix-cache hit
        r.id = "churn-" + std::to_string(t) + "-" + std::to_string(n);
        const auto req = FaultRequest(Prompt(kPromptTokens, r.salt), kMaxTokens, r.id);
        r.start = SteadyClock::now();
        GenerateOptions go;
        go.deadline = Ms(60000);
        GenResult g = Generate(c.gateway().grpc(), req, go);
        r.end = SteadyClock::now();
        r.status = g.status;
        r.tokens = std::move(g.tokens);
        if (g.status.ok()) {
          r.decode_worker = g.last.placement().decode_worker_id();
          r.migrations = g.last.placement().migrations();
        }
        std::lock_guard<std::mutex> lock(mu);
        outcomes.push_back(std::move(r));
      }
    });
  }

  std::vector<Departure> departures;
  int in_flight_departures = 0;
  // A worker that vanished (SIGSTOP: its connections stay open, nothing
  // answers, as when a host drops off the network) until the churn is over.
  std::unique_ptr<Proc> vanished;
  for (int k = 1; k <= param.cycles; ++k) {
    // Cycles 1, 4, 5, 8, ...: the worker leaves as the K/V of its first
    // request starts to arrive (the rest of it is queued at the prefill
    // worker). The others first finish a request (a churn worker's bystander)
    // and leave at the next K/V that arrives.
    const bool at_first_kv = k % 4 == 0 || k % 4 == 1;
    const int sig = k == 1 && param.vanish_first ? SIGSTOP : k % 2 == 1 ? SIGKILL : SIGTERM;
    const std::string id = c.decode_id(k);
    std::vector<std::string> extra;
    if (param.churn_drain_ms >= 0) {
      extra = {"--drain-timeout-ms", std::to_string(param.churn_drain_ms)};
    }
    std::unique_ptr<Proc> p = c.StartDecode(k, extra);
    std::string failure;
    if (!p->ready() || !WaitUntil([&] { return c.Live(id); }, Ms(30000), Ms(20))) {
      failure = id + " did not join";
    } else if (!at_first_kv && !WaitUntil([&] { return Finished(*p) > 0; }, Ms(30000), Ms(20))) {
      failure = id + " finished no request";
    }
    const double before = InBytes(*p);
    if (failure.empty() && !WaitUntil([&] { return InBytes(*p) > before; }, Ms(30000), Ms(5))) {
      failure = id + " received no K/V";
    }
    if (failure.empty()) {
      departures.push_back({id, SteadyClock::now()});
      if (at_first_kv) ++in_flight_departures;
      if (sig == SIGKILL) {
        p->Kill();
      } else if (sig == SIGSTOP) {
        p->Signal(SIGSTOP);
        vanished = std::move(p);
      } else {
        p->Signal(SIGTERM);
        if (!p->WaitExit(Ms(20000)).has_value()) failure = id + " did not exit after SIGTERM";
      }
    }
    if (!failure.empty()) {
      ADD_FAILURE() << failure;  // the requests so far still tell who waited
      if (departures.empty() || departures.back().worker != id) {
        departures.push_back({id, SteadyClock::now()});
      }
      if (p) p->Kill();
      break;
    }
  }
  const double vanished_ms = vanished ? MsOf(SteadyClock::now() - departures.front().at) : 0;
  if (vanished) Figure(scenario, "vanished_worker_silent_ms", vanished_ms);
  // Requests still running may have been placed on the last departed worker.
  std::this_thread::sleep_for(Ms(kDepartureGraceMs));
  if (vanished) vanished->Kill();
  stop = true;
  for (auto& t : clients) t.join();

  ColocatedEngine ref(model);
  ASSERT_TRUE(ref.ok());
  std::vector<double> stable_ms, alive_ms, held_ok_ms, held_failed_ms;
  int failed = 0, on_stable = 0, migrated = 0;
  for (const Outcome& r : outcomes) {
    const double took = MsOf(r.end - r.start);
    const std::vector<int32_t> want = ref.Run(Prompt(kPromptTokens, r.salt), kMaxTokens);
    if (!r.status.ok()) {
      ++failed;
      held_failed_ms.push_back(took);
      EXPECT_EQ(param.migration_limit, 0)
          << r.id << " failed despite migration: " << r.status.error_message();
      // It ran while a worker left, and could have been placed on it.
      const bool exposed = std::any_of(departures.begin(), departures.end(), [&](const auto& d) {
        return r.start < d.at + Ms(kDepartureGraceMs) && r.end >= d.at;
      });
      EXPECT_TRUE(exposed) << r.id << " failed while no worker left: " << r.status.error_message();
      EXPECT_TRUE(IsPrefix(r.tokens, want)) << r.id << " streamed a wrong token";
      continue;
    }
    EXPECT_EQ(r.tokens, want) << r.id;
    EXPECT_LT(took, kEndBoundMs) << r.id << " on " << r.decode_worker << " took " << took
                                 << " ms: it waited for a departed worker";
    // The worker it ended on (a migrated request ends on another one).
    if (r.decode_worker == stable) ++on_stable;
    if (r.migrations > 0) {
      ++migrated;
      held_ok_ms.push_back(took);
      continue;
    }
    if (r.decode_worker == stable) {
      stable_ms.push_back(took);
      continue;
    }
    // On a churn worker: did it leave (SIGTERM: drained) before the request ended?
    const auto d = std::find_if(departures.begin(), departures.end(),
                                [&](const Departure& x) { return x.worker == r.decode_worker; });
    const bool held = d != departures.end() && d->at < r.end;
    (held ? held_ok_ms : alive_ms).push_back(took);
  }

  // The stable worker failed nothing: every request it finished is one the
  // client saw succeed on it, and none ended in error or cancellation there.
  auto stable_requests = [&](const char* outcome) {
    return ScrapeMetric(c.decode(0).metrics(),
                        std::string("ced_requests_total{outcome=\"") + outcome + "\"}")
        .value_or(0);
  };
  EXPECT_EQ(stable_requests("ok"), on_stable);
  EXPECT_EQ(stable_requests("error"), 0) << "requests on the stable worker failed";
  EXPECT_EQ(stable_requests("cancelled"), 0) << "requests on the stable worker were given up";
  // The scenario happened: bystanders on both kinds of worker, and requests
  // that a departure hit.
  EXPECT_GT(stable_ms.size(), 0u);
  EXPECT_GT(alive_ms.size(), 0u);
  EXPECT_GT(held_ok_ms.size() + held_failed_ms.size(), 0u);
  if (param.migration_limit == 0 && param.churn_drain_ms < kPromptTokens / kChunk * kSendDelayMs) {
    // A departure with K/V in flight takes that request down with it.
    EXPECT_GE(failed, in_flight_departures);
  }

  Figure(scenario, "departures", static_cast<double>(departures.size()));
  Figure(scenario, "requests", static_cast<double>(outcomes.size()));
  Figure(scenario, "failed", failed);
  Figure(scenario, "migrated", migrated);
  Percentiles(scenario, "held_failed", held_failed_ms);
  Percentiles(scenario, "held_succeeded", held_ok_ms);
  Percentiles(scenario, "bystander_stable", stable_ms);
  Percentiles(scenario, "bystander_churn_alive", alive_ms);
  std::string why;
  EXPECT_TRUE(c.WaitNoKvInUse(Ms(20000), nullptr, &why)) << why;
}

// Migration off: a SIGTERMed worker gives up its requests after 100 ms, and
// one worker vanishes. Migration on: a SIGTERMed worker drains its requests
// (the default 30 s bound), a SIGKILLed worker's requests move.
INSTANTIATE_TEST_SUITE_P(Migration, FaultChurnTest,
                         ::testing::Values(Case{"migration_off", 0, 6, 100, true},
                                           Case{"migration_on", 3, 4, -1, false}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace ced::testing
