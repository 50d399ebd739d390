// `ced cluster` keeps its services running: a process that crashes (SIGKILL
// here, as the kernel's OOM killer would) is started again on the addresses
// it had, and the cluster answers again; one that exits cleanly (SIGTERM, or
// a drain) is left stopped, and --max-restarts 0 turns restarts off. Real
// processes on loopback; tokens compared with a colocated run of the engine.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/cluster_fixture.h"
#include "tests/e2e/e2e_util.h"

namespace ced::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

bool LogHas(const LocalCluster& cluster, const std::string& text) {
  return cluster.Log().find(text) != std::string::npos;
}

// The value after `flag` in a service's argv, or "".
std::string FlagValue(const std::vector<std::string>& argv, const std::string& flag) {
  auto it = std::find(argv.begin(), argv.end(), flag);
  return it == argv.end() || it + 1 == argv.end() ? "" : *(it + 1);
}

TEST(E2eSuperviseTest, EveryRoleThatCrashesIsStartedAgainOnItsAddresses) {
  const std::string model = MakeModelDir("tiny");
  LocalCluster cluster(model, {"--prefill", "1", "--decode", "1"});
  ASSERT_TRUE(cluster.ready()) << cluster.Log();
  const auto prompt = Prompt(60, 7);
  ColocatedEngine colocated(model);
  const auto expected = colocated.Run(prompt, 8, ReplayMode::kBounded, {});

  for (const std::string name : {"decode-0", "prefill-0", "router", "gateway"}) {
    SCOPED_TRACE(name);
    const std::vector<std::string> before = cluster.ServiceArgv(name);
    ASSERT_FALSE(before.empty()) << "no " << name << " process";
    ASSERT_TRUE(cluster.SignalService(name, SIGKILL));
    ASSERT_TRUE(
        WaitUntil([&] { return LogHas(cluster, "cluster: " + name + " restarted"); }, seconds(90)))
        << cluster.Log();
    EXPECT_TRUE(LogHas(cluster, "cluster: " + name + " killed by signal 9"));
    EXPECT_TRUE(LogHas(cluster, "cluster: restarting " + name + " in 1 s (restart 1 of"));
    // The new process listens where the old one did (the cluster started
    // with port 0: the bound port, not 0, is passed again).
    const std::vector<std::string> after = cluster.ServiceArgv(name);
    ASSERT_FALSE(after.empty()) << cluster.Log();
    EXPECT_EQ(FlagValue(after, "--listen"), cluster.addresses().at(name).at("grpc"));
    EXPECT_EQ(FlagValue(after, "--metrics-listen"), cluster.addresses().at(name).at("metrics"));
    if (name == "decode-0") {
      EXPECT_EQ(FlagValue(after, "--kv-listen"), cluster.addresses().at(name).at("kv"));
    }
    if (name == "gateway") {
      EXPECT_EQ(FlagValue(after, "--http-listen"), cluster.addresses().at(name).at("http"));
    }
    EXPECT_EQ(FlagValue(before, "--listen"), "127.0.0.1:0");
    // The cluster answers again, with the same tokens (a restarted router
    // first hears from the workers at their next load report).
    GenResult r;
    EXPECT_TRUE(WaitUntil(
        [&] {
          r = Generate(cluster.gateway(), Request(prompt, 8, ced::v1::REPLAY_ON_AUTO));
          return r.status.ok();
        },
        seconds(60), milliseconds(500)))
        << r.status.error_message() << "\n"
        << cluster.Log();
    EXPECT_EQ(r.tokens, expected);
  }
}

TEST(E2eSuperviseTest, CleanExitsAndMaxRestartsZeroAreNotRestarted) {
  const std::string model = MakeModelDir("tiny");
  {
    // SIGTERM: the worker drains and exits with 0, as after `ced client
    // drain`; taking it out was asked for, so it stays out.
    LocalCluster cluster(model, {"--prefill", "1", "--decode", "1"});
    ASSERT_TRUE(cluster.ready()) << cluster.Log();
    ASSERT_TRUE(cluster.SignalService("prefill-0", SIGTERM));
    ASSERT_TRUE(WaitUntil(
        [&] { return LogHas(cluster, "cluster: prefill-0 exited with status 0"); }, seconds(60)))
        << cluster.Log();
    // A restart would be announced 0.2 s after the exit and run 1 s later.
    std::this_thread::sleep_for(seconds(3));
    EXPECT_FALSE(LogHas(cluster, "restarting prefill-0")) << cluster.Log();
    EXPECT_TRUE(cluster.ServiceArgv("prefill-0").empty());
  }
  {
    LocalCluster cluster(model, {"--prefill", "1", "--decode", "1", "--max-restarts", "0"});
    ASSERT_TRUE(cluster.ready()) << cluster.Log();
    ASSERT_TRUE(cluster.SignalService("decode-0", SIGKILL));
    ASSERT_TRUE(WaitUntil([&] { return LogHas(cluster, "cluster: decode-0 killed by signal 9"); },
                          seconds(60)))
        << cluster.Log();
    std::this_thread::sleep_for(seconds(3));
    EXPECT_FALSE(LogHas(cluster, "restarting decode-0")) << cluster.Log();
    EXPECT_TRUE(cluster.ServiceArgv("decode-0").empty());
    // The rest keeps serving what it can: no decode worker, a clear error.
    const GenResult r =
        Generate(cluster.gateway(), Request(Prompt(20, 1), 4, ced::v1::REPLAY_ON_AUTO));
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE) << r.status.error_message();
  }
}

// Whether `pid` has ended (no such process, or a zombie nobody reaped yet).
bool Ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  const std::string text((std::istreambuf_iterator<char>(stat)), {});
  const size_t close = text.rfind(')');
  return close == std::string::npos || text.compare(close + 1, 3, " Z ") == 0;
}

// A `ced cluster` that is killed outright (it cannot stop anything) does not
// leave its services behind holding their ports: they get SIGTERM from the
// kernel when it dies.
TEST(E2eSuperviseTest, ServicesEndWhenTheClusterProcessIsKilled) {
  const std::string model = MakeModelDir("tiny");
  LocalCluster cluster(model, {"--prefill", "1", "--decode", "1", "--kv-store", "local"});
  ASSERT_TRUE(cluster.ready()) << cluster.Log();
  std::vector<pid_t> pids;
  for (const char* name : {"router", "prefill-0", "decode-0", "gateway", "redis-server"}) {
    pids.push_back(cluster.ServicePid(name));
    ASSERT_GT(pids.back(), 0) << "no " << name << " process\n" << cluster.Log();
  }
  ASSERT_TRUE(cluster.SignalCluster(SIGKILL));
  EXPECT_TRUE(WaitUntil(
      [&] { return std::all_of(pids.begin(), pids.end(), [](pid_t p) { return Ended(p); }); },
      seconds(60)))
      << cluster.Log();
}

// --kv-store local: the cluster's own redis-server is started again on its
// port when it dies, and the workers store blocks in it again.
TEST(E2eSuperviseTest, TheLocalRedisIsStartedAgainOnItsPort) {
  const std::string model = MakeModelDir("tiny");
  LocalCluster cluster(model, {"--prefill", "1", "--decode", "1", "--kv-store", "local"});
  ASSERT_TRUE(cluster.ready()) << cluster.Log();
  const std::vector<std::string> before = cluster.ServiceArgv("redis-server");
  ASSERT_FALSE(before.empty()) << "no redis-server process\n" << cluster.Log();
  ASSERT_TRUE(cluster.SignalService("redis-server", SIGKILL));
  ASSERT_TRUE(
      WaitUntil([&] { return LogHas(cluster, "cluster: redis-server restarted"); }, seconds(60)))
      << cluster.Log();
  EXPECT_TRUE(LogHas(cluster, "cluster: redis-server (KV tier) stopped; restarting it in 1 s"));
  const std::vector<std::string> after = cluster.ServiceArgv("redis-server");
  ASSERT_FALSE(after.empty()) << cluster.Log();
  // Its process title names the address it serves: the same port.
  EXPECT_EQ(after, before);
  // A request's full blocks reach the new redis-server (the workers
  // reconnect; until then they recompute, never fail a request).
  auto written = [&] {
    double sum = 0;
    for (const char* w : {"prefill-0", "decode-0"}) {
      sum += ScrapeMetric(cluster.addresses().at(w).at("metrics"),
                          R"(ced_kv_tier_written_bytes_total{tier="redis"})")
                 .value_or(0.0);
    }
    return sum;
  };
  const double before_request = written();
  const GenResult r =
      Generate(cluster.gateway(), Request(Prompt(80, 5), 4, ced::v1::REPLAY_ON_AUTO));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\n" << cluster.Log();
  EXPECT_TRUE(WaitUntil([&] { return written() > before_request; }, seconds(30)))
      << "written before the request: " << before_request << "\n"
      << cluster.Log();
}

}  // namespace
}  // namespace ced::testing
