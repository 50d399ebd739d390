// Under load: router + gateway + 2 prefill + 2 decode workers serve 32
// concurrent greedy requests, each equal token for token to the colocated
// engine, for every replay placement; both UCX transports (tcp and shared
// memory) carry the K/V; afterwards every worker's KV blocks are free again.
#include <iostream>
#include <cstdlib>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "absl/strings/str_join.h"
#include "tests/e2e/cluster_fixture.h"
#include "tests/e2e/e2e_util.h"

namespace ced::testing {
namespace {

constexpr int kRequests = 32;

struct Load {
  std::vector<ced::v1::GenerateRequest> requests;
  std::vector<std::vector<int32_t>> expected;
};

// Prompts of 5..300 tokens (a few at or below R = 16, most above it, two
// longer than one 256-token prefill chunk) and 6..18 new tokens each.
Load MakeLoad(const std::string& model, int count, ced::v1::ReplayOn on) {
  ColocatedEngine colocated(model);
  Load load;
  for (int i = 0; i < count; ++i) {
    int n = 5 + (i * 295) / std::max(count - 1, 1);
    if (i == 1) n = 16;
    if (i == 2) n = 17;
    const int max_tokens = 6 + (i * 7) % 13;
    const std::vector<int32_t> prompt = Prompt(n, i);
    load.requests.push_back(Request(prompt, max_tokens, on));
    load.requests.back().set_request_id("load-" + std::to_string(i));
    load.expected.push_back(colocated.Run(prompt, max_tokens));
  }
  return load;
}

// Every decode worker's ced_kv_blocks_used gauge (refreshed at heartbeat
// time) is 0 and the router sees every worker idle, within 20 s.
void ExpectAllKvFree(const LocalCluster& cluster) {
  std::string why;
  const bool idle = WaitUntil(
      [&] {
        for (const auto& [name, addr] : cluster.addresses()) {
          if (name.rfind("decode-", 0) != 0) continue;
          const auto used = ScrapeMetric(addr.at("metrics"), "ced_kv_blocks_used");
          if (used != 0.0) {
            why = name + " ced_kv_blocks_used=" + (used ? std::to_string(*used) : "absent");
            return false;
          }
        }
        const auto workers = ListWorkers(cluster.addresses().at("router").at("grpc"));
        if (!workers) {
          why = "router ListWorkers failed";
          return false;
        }
        return AllWorkersIdle(*workers, &why);
      },
      std::chrono::seconds(20));
  EXPECT_TRUE(idle) << "still busy: " << why;
}

class LoadTest : public ::testing::TestWithParam<ced::v1::ReplayOn> {
 protected:
  void SetUp() override {
    model_ = MakeModelDir("tiny");
    cluster_ = std::make_unique<LocalCluster>(
        model_, std::vector<std::string>{"--prefill", "2", "--decode", "2"});
  }
  void TearDown() override { cluster_.reset(); }
  std::string model_;
  std::unique_ptr<LocalCluster> cluster_;
};

TEST_P(LoadTest, ConcurrentGreedyRequestsEqualColocatedOnEveryWorker) {
  ASSERT_TRUE(cluster_->ready()) << cluster_->Log();
  const ced::v1::ReplayOn on = GetParam();
  const Load load = MakeLoad(model_, kRequests, on);
  const std::vector<GenResult> got = GenerateConcurrently(cluster_->gateway(), load.requests);
  std::set<std::string> prefill_workers, decode_workers;
  for (int i = 0; i < kRequests; ++i) {
    const GenResult& r = got[i];
    const auto& req = load.requests[i];
    if (!r.status.ok()) {
      ADD_FAILURE() << "request " << i << " (" << req.prompt_token_ids_size()
                    << " prompt tokens): " << r.status.error_message();
      continue;
    }
    EXPECT_EQ(r.tokens, load.expected[i])
        << "request " << i << " (" << req.prompt_token_ids_size() << " prompt tokens)";
    EXPECT_EQ(r.last.finish_reason(), ced::v1::FINISH_REASON_LENGTH) << i;
    EXPECT_EQ(r.last.request_id(), req.request_id());
    EXPECT_EQ(r.last.usage().prompt_tokens(), req.prompt_token_ids_size()) << i;
    EXPECT_EQ(r.last.usage().completion_tokens(), req.max_tokens()) << i;
    const ced::v1::Placement& p = r.last.placement();
    if (on == ced::v1::REPLAY_ON_AUTO) {
      EXPECT_TRUE(p.replay_on() == ced::v1::REPLAY_ON_PREFILL ||
                  p.replay_on() == ced::v1::REPLAY_ON_DECODE)
          << i << ": " << p.ShortDebugString();
    } else {
      EXPECT_EQ(p.replay_on(), on) << i << ": " << p.ShortDebugString();
    }
    EXPECT_FALSE(p.local_prefill()) << i;
    prefill_workers.insert(p.prefill_worker_id());
    decode_workers.insert(p.decode_worker_id());
  }
  EXPECT_EQ(prefill_workers, (std::set<std::string>{"prefill-0", "prefill-1"}));
  EXPECT_EQ(decode_workers, (std::set<std::string>{"decode-0", "decode-1"}));
  ExpectAllKvFree(*cluster_);
}

INSTANTIATE_TEST_SUITE_P(E2eReplayOn, LoadTest,
                         ::testing::Values(ced::v1::REPLAY_ON_PREFILL, ced::v1::REPLAY_ON_DECODE,
                                           ced::v1::REPLAY_ON_AUTO),
                         [](const auto& info) { return ced::v1::ReplayOn_Name(info.param); });

// The KV data plane over each UCX transport, chosen by UCX_TLS in the
// environment the workers inherit. Each worker logs the UCX lanes of every KV
// connection once it carries data, which proves the transport (not just the
// setting).
class UcxTransportTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const char* old = std::getenv("UCX_TLS");
    saved_ = old ? std::optional<std::string>(old) : std::nullopt;
    setenv("UCX_TLS", GetParam(), 1);
    model_ = MakeModelDir("tiny");
    cluster_ = std::make_unique<LocalCluster>(
        model_, std::vector<std::string>{"--prefill", "1", "--decode", "1"});
  }
  void TearDown() override {
    cluster_.reset();
    if (saved_) {
      setenv("UCX_TLS", saved_->c_str(), 1);
    } else {
      unsetenv("UCX_TLS");
    }
  }
  std::optional<std::string> saved_;
  std::string model_;
  std::unique_ptr<LocalCluster> cluster_;
};

// The "kv: ... connection ...: active messages on X, rendezvous on Y" lines of
// one service.
std::vector<std::string> ConnectionLanes(const std::string& log, const std::string& service) {
  std::vector<std::string> out;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("[" + service + "] kv: ", 0) == 0 &&
        line.find("active messages on") != std::string::npos) {
      out.push_back(line);
    }
  }
  return out;
}

TEST_P(UcxTransportTest, FewRequestsEqualColocated) {
  ASSERT_TRUE(cluster_->ready()) << cluster_->Log();
  const Load load = MakeLoad(model_, 4, ced::v1::REPLAY_ON_AUTO);
  std::vector<ced::v1::GenerateRequest> requests = load.requests;
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].set_replay_on(i % 2 ? ced::v1::REPLAY_ON_DECODE : ced::v1::REPLAY_ON_PREFILL);
  }
  const std::vector<GenResult> got = GenerateConcurrently(cluster_->gateway(), requests);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].status.ok()) << i << ": " << got[i].status.error_message();
    EXPECT_EQ(got[i].tokens, load.expected[i]) << "request " << i;
  }
  ExpectAllKvFree(*cluster_);

  // Both sides of the K/V connection (prefill: the sender; decode: the
  // listener) use shared-memory lanes exactly when UCX_TLS allows them, for
  // active messages and for rendezvous payloads alike.
  const bool shm = std::string(GetParam()).find("shm") != std::string::npos;
  for (const std::string service : {"prefill-0", "decode-0"}) {
    const std::vector<std::string> lines = ConnectionLanes(cluster_->Log(), service);
    ASSERT_FALSE(lines.empty()) << service << " logged no KV connection:\n" << cluster_->Log();
    for (const std::string& line : lines) {
      const std::string rndv = line.substr(line.find("rendezvous on"));
      EXPECT_EQ(line.find("/memory") != std::string::npos, shm) << line;
      EXPECT_EQ(rndv.find("/memory") != std::string::npos, shm) << line;
      if (!shm) { EXPECT_NE(rndv.find("tcp/"), std::string::npos) << line; }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(E2eUcxTls, UcxTransportTest, ::testing::Values("tcp", "shm,tcp"),
                         [](const auto& info) {
                           return std::string(info.param) == "tcp" ? "Tcp" : "SharedMemory";
                         });

}  // namespace
}  // namespace ced::testing
