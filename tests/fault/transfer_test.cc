// Fault 3: a K/V transfer that carries a bad checksum or stops short. Only
// that request fails (cleanly: an error status, never a wrong token, no KV
// block kept); requests before, during and after it, on the same prefill
// and decode workers, get the right tokens. Policy: no retry inside the
// cluster (the client sees the error and may retry).
#include <thread>

#include "tests/fault/fault_cluster.h"

namespace ced::testing {
namespace {

struct TransferFault {
  const char* name;
  const char* rule;  // applied to requests named "bad-*"
};

void PrintTo(const TransferFault& f, std::ostream* os) { *os << f.name; }

class FaultTransferTest : public ::testing::TestWithParam<TransferFault> {};

TEST_P(FaultTransferTest, OnlyTheFaultyRequestFails) {
  const std::string model = MakeModelDir("tiny");
  FaultClusterOptions o = Topology(model, 1, 1);
  o.prefill_flags = {"--chunk", "64", "--fault-injection-for-testing",
                     std::string("match=bad,") + GetParam().rule};
  FaultCluster c(o);
  ASSERT_TRUE(c.ok());
  ColocatedEngine ref(model);
  const auto prompt_long = Prompt(64, 1);
  const auto want_long = ref.Run(prompt_long, 800);
  Stream bystander(c.gateway().grpc(), FaultRequest(prompt_long, 800, "good-long"), Ms(120000));
  ASSERT_TRUE(bystander.ReadTokens(5));

  // Faulty requests with the replay on either side (on the prefill worker the
  // first token may reach the client before the transfer fails), interleaved
  // with good ones.
  int failed = 0, wrong = 0;
  for (int i = 0; i < 4; ++i) {
    const auto on = i % 2 == 0 ? ced::v1::REPLAY_ON_PREFILL : ced::v1::REPLAY_ON_DECODE;
    const auto bad_prompt = Prompt(200, 30 + i);
    const auto want_bad = ref.Run(bad_prompt, 12);
    const auto good_prompt = Prompt(90, 40 + i);
    const auto want_good = ref.Run(good_prompt, 12);
    std::vector<ced::v1::GenerateRequest> reqs = {
        FaultRequest(bad_prompt, 12, "bad-" + std::to_string(i), on),
        FaultRequest(good_prompt, 12, "good-" + std::to_string(i), on)};
    const std::vector<GenResult> rs = GenerateConcurrently(c.gateway().grpc(), reqs);
    EXPECT_FALSE(rs[0].status.ok()) << "the faulty transfer went unnoticed";
    if (!rs[0].status.ok()) ++failed;
    std::printf("%s bad-%d: %d %s\n", GetParam().name, i, rs[0].status.error_code(),
                rs[0].status.error_message().c_str());
    EXPECT_TRUE(IsPrefix(rs[0].tokens, want_bad)) << "garbage tokens after a faulty transfer";
    EXPECT_LT(rs[0].tokens.size(), want_bad.size());
    if (!IsPrefix(rs[0].tokens, want_bad)) ++wrong;
    EXPECT_TRUE(rs[1].status.ok()) << rs[1].status.error_message();
    EXPECT_EQ(rs[1].tokens, want_good);
  }
  const grpc::Status sb = bystander.Finish();
  EXPECT_TRUE(sb.ok()) << sb.error_message();
  EXPECT_EQ(bystander.tokens(), want_long);
  std::string why;
  Ms took;
  EXPECT_TRUE(c.WaitNoKvInUse(Ms(10000), &took, &why)) << why;
  const std::string scenario = std::string("transfer_") + GetParam().name;
  Figure(scenario, "faulty_requests_failed_of_4", failed);
  Figure(scenario, "wrong_tokens", wrong);
  Figure(scenario, "kv_blocks_leaked", c.DecodeSum("ced_kv_blocks_used"));
  // Still serving afterwards.
  const auto p = Prompt(50, 9);
  const GenResult r = Generate(c.gateway().grpc(), FaultRequest(p, 8, "after"));
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, ref.Run(p, 8));
}

INSTANTIATE_TEST_SUITE_P(Faults, FaultTransferTest,
                         ::testing::Values(TransferFault{"bad_checksum", "corrupt_checksum"},
                                           TransferFault{"truncated", "truncate"}),
                         [](const ::testing::TestParamInfo<TransferFault>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace ced::testing
