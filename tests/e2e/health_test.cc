// grpc.health.v1 on the gateway: SERVING only while it reaches a router that
// lists at least one live prefill and one live decode worker. The services
// are separate `ced serve --role=...` processes started one by one.
#include <memory>

#include "tests/e2e/e2e_util.h"
#include "tests/e2e/service_process.h"

namespace ced::testing {
namespace {

constexpr int kServing = 1, kNotServing = 2;
const std::chrono::seconds kWait(20);

class E2eHealthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = MakeModelDir("tiny");
    router_ = std::make_unique<ServiceProcess>(std::vector<std::string>{
        "--role=router", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
        "--heartbeat-timeout-ms", "1500", "--model", model_});
    if (!router_->ready()) return;
    gateway_ = std::make_unique<ServiceProcess>(
        std::vector<std::string>{"--role=gateway", "--listen", "127.0.0.1:0", "--metrics-listen",
                                 "127.0.0.1:0", "--router", router_->grpc(), "--model", model_});
  }
  void TearDown() override {
    for (auto* p : {&prefill_, &decode_, &gateway_, &router_}) p->reset();
  }

  std::unique_ptr<ServiceProcess> StartWorker(const std::string& role, const std::string& id) {
    std::vector<std::string> args = {"--role=" + role,
                                     "--worker-id",
                                     id,
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--metrics-listen",
                                     "127.0.0.1:0",
                                     "--router",
                                     router_->grpc(),
                                     "--model",
                                     model_,
                                     "--kv-cache-mb",
                                     "32"};
    if (role == "decode") args.insert(args.end(), {"--kv-listen", "127.0.0.1:0"});
    if (role == "prefill") args.push_back("--replay-capable");
    return std::make_unique<ServiceProcess>(args);
  }
  // Both the server-wide status and the service's.
  int Health() const {
    const int all = HealthStatus(gateway_->grpc(), "");
    const int service = HealthStatus(gateway_->grpc(), "ced.v1.Gateway");
    return all == service ? all : -2;
  }
  // Health stays NOT_SERVING over several of the gateway's 1 s router polls.
  void ExpectNotServingThroughout(const std::string& when) {
    EXPECT_FALSE(WaitUntil([&] { return Health() != kNotServing; }, std::chrono::milliseconds(3500),
                           std::chrono::milliseconds(200)))
        << when << ": health became " << Health();
  }
  bool RouterLists(const std::string& worker_id) const {
    const auto workers = ListWorkers(router_->grpc());
    if (!workers) return false;
    for (const auto& w : workers->workers()) {
      if (w.info().worker_id() == worker_id && w.live()) return true;
    }
    return false;
  }

  std::string model_;
  std::unique_ptr<ServiceProcess> router_, gateway_, prefill_, decode_;
};

TEST_F(E2eHealthTest, ServingOnlyWithRouterAndAWorkerOfEachKind) {
  ASSERT_TRUE(router_->ready()) << router_->Log();
  ASSERT_TRUE(gateway_->ready()) << gateway_->Log();
  EXPECT_EQ(HealthStatus(gateway_->grpc(), "no.such.Service"), -1);  // Check: NOT_FOUND
  ExpectNotServingThroughout("router only");

  decode_ = StartWorker("decode", "decode-0");
  ASSERT_TRUE(decode_->ready()) << decode_->Log();
  ASSERT_TRUE(WaitUntil([&] { return RouterLists("decode-0"); }, kWait));
  ExpectNotServingThroughout("decode worker only");

  prefill_ = StartWorker("prefill", "prefill-0");
  ASSERT_TRUE(prefill_->ready()) << prefill_->Log();
  EXPECT_TRUE(WaitUntil([&] { return Health() == kServing; }, kWait)) << Health();
  const auto prompt = Prompt(30, 1);
  const GenResult r = Generate(gateway_->grpc(), Request(prompt, 6, ced::v1::REPLAY_ON_AUTO));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\n" << gateway_->Log();
  EXPECT_EQ(r.tokens, ColocatedEngine(model_).Run(prompt, 6));

  // A crashed prefill worker goes stale at the router: NOT_SERVING.
  prefill_->Stop(SIGKILL);
  EXPECT_TRUE(WaitUntil([&] { return Health() == kNotServing; }, kWait)) << Health();
  // A new one brings it back.
  prefill_ = StartWorker("prefill", "prefill-1");
  ASSERT_TRUE(prefill_->ready()) << prefill_->Log();
  EXPECT_TRUE(WaitUntil([&] { return Health() == kServing; }, kWait)) << Health();
  // A crashed decode worker: NOT_SERVING.
  decode_->Stop(SIGKILL);
  EXPECT_TRUE(WaitUntil([&] { return Health() == kNotServing; }, kWait)) << Health();
  decode_ = StartWorker("decode", "decode-1");
  ASSERT_TRUE(decode_->ready()) << decode_->Log();
  EXPECT_TRUE(WaitUntil([&] { return Health() == kServing; }, kWait)) << Health();
  // Without a router, nothing is known about the workers: NOT_SERVING.
  router_->Stop(SIGKILL);
  EXPECT_TRUE(WaitUntil([&] { return Health() == kNotServing; }, kWait)) << Health();
}

}  // namespace
}  // namespace ced::testing
