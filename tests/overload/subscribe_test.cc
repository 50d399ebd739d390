// The decode worker's multiplexed token stream (DecodeWorker.Subscribe) and
// the gateway on either kind of token stream: real `ced serve` processes on
// loopback. The test acts as the gateway where it talks to the workers.
#include <csignal>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "tests/overload/topology.h"

namespace ced::testing {
namespace {

class SubscribeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = MakeModelDir("tiny");
    colocated_ = std::make_unique<ColocatedEngine>(model_);
  }
  void Start(const TopologyFlags& flags) {
    topo_ = std::make_unique<Topology>(model_, flags);
    ASSERT_TRUE(topo_->ready()) << topo_->Logs();
    client_ = std::make_unique<DirectClient>(topo_->decode().grpc(), topo_->prefill().grpc());
  }
  void TearDown() override {
    client_.reset();
    topo_.reset();
  }
  // Opens a Subscribe stream and reads its first (empty) batch.
  std::unique_ptr<grpc::ClientReader<ced::internal::TokenBatch>> Open(
      grpc::ClientContext* ctx, const std::string& name) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    ced::internal::SubscribeRequest req;
    req.set_subscriber_id(name);
    auto reader = client_->decode_stub().Subscribe(ctx, req);
    ced::internal::TokenBatch hello;
    EXPECT_TRUE(reader->Read(&hello)) << "the stream ended before its first batch";
    EXPECT_EQ(hello.chunks_size(), 0);
    return reader;
  }

  std::string model_;
  std::unique_ptr<ColocatedEngine> colocated_;
  std::unique_ptr<Topology> topo_;
  std::unique_ptr<DirectClient> client_;
};

TopologyFlags NoRouter() {
  TopologyFlags f;
  f.router = false;
  return f;
}

// Three requests on one stream: each gets exactly the tokens the colocated
// engine computes, in step order, then an `ended` chunk with OK; the worker
// counts the stream and frees every block.
TEST_F(SubscribeTest, RequestsOnOneStreamGetTheirOwnTokensAndEnd) {
  Start(NoRouter());
  grpc::ClientContext ctx;
  auto reader = Open(&ctx, "gw-test-1");
  EXPECT_EQ(topo_->Metric(topo_->decode(), "ced_decode_token_streams"), 1);
  const int kRequests = 3, kTokens = 12;
  std::map<std::string, std::vector<int32_t>> prompts;
  std::vector<std::thread> prefills;
  std::vector<grpc::Status> prefill_status(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    const std::string id = "sub-" + std::to_string(i);
    prompts[id] = Prompt(40 + 8 * i, 30 + i);
    ced::internal::ReserveResponse reserved;
    const grpc::Status s = client_->Reserve(id, prompts[id], kTokens, &reserved, "gw-test-1");
    ASSERT_TRUE(s.ok()) << s.error_message();
    prefills.emplace_back([&, id, reserved, i] {
      prefill_status[i] = client_->Prefill(id, prompts[id], reserved);
    });
  }
  std::map<std::string, std::vector<int32_t>> tokens;
  std::map<std::string, int> next_step, finish;
  std::map<std::string, grpc::Status> ended;
  ced::internal::TokenBatch batch;
  while (static_cast<int>(ended.size()) < kRequests && reader->Read(&batch)) {
    for (const ced::internal::TokenChunk& c : batch.chunks()) {
      ASSERT_TRUE(prompts.count(c.request_id())) << "chunk of unknown request " << c.request_id();
      ASSERT_FALSE(ended.count(c.request_id())) << c.request_id() << ": chunk after its end";
      if (c.ended()) {
        ended[c.request_id()] =
            grpc::Status(static_cast<grpc::StatusCode>(c.status_code()), c.status_message());
        continue;
      }
      if (c.token_ids_size() > 0) {
        EXPECT_EQ(c.start_step(), next_step[c.request_id()]) << c.request_id();
        next_step[c.request_id()] += c.token_ids_size();
      }
      tokens[c.request_id()].insert(tokens[c.request_id()].end(), c.token_ids().begin(),
                                    c.token_ids().end());
      if (c.finish_reason() != ced::internal::FINISH_REASON_UNSPECIFIED) {
        finish[c.request_id()] = c.finish_reason();
      }
    }
  }
  for (std::thread& t : prefills) t.join();
  for (const grpc::Status& s : prefill_status) EXPECT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(static_cast<int>(ended.size()), kRequests) << topo_->Logs();
  for (const auto& [id, prompt] : prompts) {
    EXPECT_TRUE(ended[id].ok()) << id << ": " << ended[id].error_message();
    EXPECT_EQ(finish[id], ced::internal::FINISH_REASON_LENGTH) << id;
    EXPECT_EQ(tokens[id], colocated_->Run(prompt, kTokens)) << id;
  }
  topo_->ExpectNoKvLeak();
  ctx.TryCancel();
  (void)reader->Finish();
  EXPECT_TRUE(WaitUntil(
      [&] { return topo_->Metric(topo_->decode(), "ced_decode_token_streams") == 0; },
      std::chrono::seconds(10)));
  // The ended stream holds nothing up: the worker drains and exits (it
  // used to wait for the cancelled stream's reactor until SIGKILLed at 40 s).
  const auto t0 = std::chrono::steady_clock::now();
  topo_->decode().Stop(SIGTERM);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30))
      << "the decode worker did not exit on SIGTERM";
}

// Names are checked: an unknown one in Reserve, an empty, over-long or
// already open one in Subscribe; each error names the field.
TEST_F(SubscribeTest, BadSubscriberNamesAreRefusedNamingTheField) {
  Start(NoRouter());
  ced::internal::ReserveResponse reserved;
  grpc::Status s = client_->Reserve("r-unknown", Prompt(20, 1), 4, &reserved, "nobody");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("subscriber_id"), std::string::npos) << s.error_message();
  s = client_->Reserve("r-long", Prompt(20, 1), 4, &reserved, std::string(129, 'x'));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("subscriber_id"), std::string::npos) << s.error_message();

  auto refused = [&](const std::string& name) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    ced::internal::SubscribeRequest req;
    req.set_subscriber_id(name);
    auto reader = client_->decode_stub().Subscribe(&ctx, req);
    ced::internal::TokenBatch batch;
    EXPECT_FALSE(reader->Read(&batch)) << "'" << name << "' was accepted";
    return reader->Finish();
  };
  s = refused("");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("subscriber_id"), std::string::npos) << s.error_message();
  s = refused(std::string(129, 'y'));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  grpc::ClientContext ctx;
  auto open = Open(&ctx, "taken");
  s = refused("taken");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_NE(s.error_message().find("subscriber_id"), std::string::npos) << s.error_message();
  // The refused duplicate did not close the open stream: it still takes requests.
  s = client_->Reserve("r-ok", Prompt(20, 2), 4, &reserved, "taken");
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(client_->Cancel("r-ok"));
  ctx.TryCancel();
  (void)open->Finish();
  topo_->ExpectNoKvLeak();
}

// A gateway that goes away (its stream cancelled) leaves nothing behind: the
// requests on its stream are cancelled at once, long before their
// reservation would time out (30 s; the check waits at most 20 s).
TEST_F(SubscribeTest, AStreamThatEndsCancelsItsRequests) {
  Start(NoRouter());
  grpc::ClientContext ctx;
  auto reader = Open(&ctx, "gw-gone");
  ced::internal::ReserveResponse reserved;
  for (const char* id : {"orphan-a", "orphan-b"}) {
    const grpc::Status s = client_->Reserve(id, Prompt(64, 5), 8, &reserved, "gw-gone");
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_GT(topo_->Metric(topo_->decode(), "ced_kv_blocks_used"), 0);
  ctx.TryCancel();
  (void)reader->Finish();
  topo_->ExpectNoKvLeak();
  EXPECT_TRUE(WaitUntil([&] { return !client_->Cancel("orphan-a"); }, std::chrono::seconds(5)))
      << "still reserved after its stream ended";
}

// The gateway on both kinds of token stream serves the same tokens: with
// --decode-mux (the default) it opens one stream to the worker; with
// --decode-mux=false it opens none (one Stream call per request).
TEST_F(SubscribeTest, GatewayServesTheSameTokensOnEitherKindOfStream) {
  const auto prompt = Prompt(48, 11);
  const auto expected = colocated_->Run(prompt, 10);
  for (const bool mux : {true, false}) {
    SCOPED_TRACE(mux ? "--decode-mux=true" : "--decode-mux=false");
    TopologyFlags f;
    f.gateway_flags = {mux ? "--decode-mux=true" : "--decode-mux=false"};
    Start(f);
    for (int i = 0; i < 3; ++i) {
      const GenResult r =
          Generate(topo_->gateway().grpc(), Request(prompt, 10, ced::v1::REPLAY_ON_AUTO));
      ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\n" << topo_->Logs();
      EXPECT_EQ(r.tokens, expected);
    }
    EXPECT_EQ(topo_->Metric(topo_->decode(), "ced_decode_token_streams"), mux ? 1 : 0);
    topo_->ExpectNoKvLeak();
    client_.reset();
    topo_.reset();
  }
}

}  // namespace
}  // namespace ced::testing
