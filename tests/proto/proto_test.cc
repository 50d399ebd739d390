// The generated protocol code links, round-trips, and serves a call in process.
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "ced/internal/decode_worker.grpc.pb.h"
#include "ced/internal/prefill_worker.grpc.pb.h"
#include "ced/internal/router.grpc.pb.h"
#include "ced/v1/gateway.grpc.pb.h"

namespace {

using google::protobuf::util::MessageDifferencer;

ced::v1::GenerateRequest MakeRequest() {
  ced::v1::GenerateRequest request;
  request.add_prompt_token_ids(1);
  request.add_prompt_token_ids(42);
  request.add_prompt_token_ids(-7);
  request.set_max_tokens(64);
  request.set_temperature(0.7f);
  request.set_top_p(0.9f);
  request.set_top_k(40);
  request.set_seed(0xFFFFFFFFFFFFFFF0ull);
  request.add_stop("\n\n");
  request.add_stop_token_ids(2);
  request.set_request_id("req-1");
  request.set_replay_on(ced::v1::REPLAY_ON_DECODE);
  request.set_replay_mode(ced::v1::REPLAY_MODE_EXACT);
  request.set_ignore_eos(true);
  request.set_add_bos(true);
  return request;
}

TEST(ProtoTest, GenerateRequestRoundTrips) {
  const ced::v1::GenerateRequest request = MakeRequest();
  std::string wire;
  ASSERT_TRUE(request.SerializeToString(&wire));
  ced::v1::GenerateRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  EXPECT_TRUE(MessageDifferencer::Equals(request, parsed)) << parsed.DebugString();
  EXPECT_EQ(parsed.seed(), 0xFFFFFFFFFFFFFFF0ull);
  EXPECT_EQ(parsed.prompt_token_ids(2), -7);
  EXPECT_EQ(parsed.replay_mode(), ced::v1::REPLAY_MODE_EXACT);
}

TEST(ProtoTest, GarbageDoesNotParse) {
  ced::v1::GenerateRequest parsed;
  EXPECT_FALSE(parsed.ParseFromString(std::string("\xff\xff\xff\xff", 4)));
}

TEST(ProtoTest, PrefillResponseIsOneEventAtATime) {
  ced::internal::PrefillResponse response;
  response.mutable_first_token()->set_token_id(5);
  EXPECT_EQ(response.event_case(), ced::internal::PrefillResponse::kFirstToken);
  response.mutable_done()->set_prompt_tokens(9);
  EXPECT_EQ(response.event_case(), ced::internal::PrefillResponse::kDone);
  EXPECT_FALSE(response.has_first_token());
}

// Services convert these enums with a cast: keep their numbers equal.
TEST(ProtoTest, PublicAndInternalEnumsAgree) {
  EXPECT_EQ(int{ced::v1::REPLAY_ON_PREFILL}, int{ced::internal::REPLAY_ON_PREFILL});
  EXPECT_EQ(int{ced::v1::REPLAY_ON_DECODE}, int{ced::internal::REPLAY_ON_DECODE});
  EXPECT_EQ(int{ced::v1::REPLAY_ON_AUTO}, int{ced::internal::REPLAY_ON_AUTO});
  EXPECT_EQ(int{ced::v1::REPLAY_MODE_BOUNDED}, int{ced::internal::REPLAY_MODE_BOUNDED});
  EXPECT_EQ(int{ced::v1::REPLAY_MODE_EXACT}, int{ced::internal::REPLAY_MODE_EXACT});
  EXPECT_EQ(int{ced::v1::FINISH_REASON_LENGTH}, int{ced::internal::FINISH_REASON_LENGTH});
  EXPECT_EQ(int{ced::v1::FINISH_REASON_STOP}, int{ced::internal::FINISH_REASON_STOP});
  EXPECT_EQ(int{ced::v1::FINISH_REASON_CANCELLED}, int{ced::internal::FINISH_REASON_CANCELLED});
  EXPECT_EQ(int{ced::v1::FINISH_REASON_ERROR}, int{ced::internal::FINISH_REASON_ERROR});
  EXPECT_EQ(ced::v1::FinishReason_ARRAYSIZE, ced::internal::FinishReason_ARRAYSIZE);
}

TEST(ProtoTest, ServiceNames) {
  EXPECT_STREQ(ced::v1::Gateway::service_full_name(), "ced.v1.Gateway");
  EXPECT_STREQ(ced::internal::Router::service_full_name(), "ced.internal.Router");
  EXPECT_STREQ(ced::internal::DecodeWorker::service_full_name(), "ced.internal.DecodeWorker");
  EXPECT_STREQ(ced::internal::PrefillWorker::service_full_name(), "ced.internal.PrefillWorker");
}

// A callback-API Gateway answering Tokenize with one id per byte.
class ByteTokenizer final : public ced::v1::Gateway::CallbackService {
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const ced::v1::TokenizeRequest* request,
                                     ced::v1::TokenizeResponse* response) override {
    for (unsigned char c : request->text()) response->add_token_ids(c);
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

TEST(ProtoTest, InProcessTokenizeCall) {
  ByteTokenizer service;
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = ced::v1::Gateway::NewStub(server->InProcessChannel(grpc::ChannelArguments()));

  ced::v1::TokenizeRequest request;
  request.set_text("hi");
  ced::v1::TokenizeResponse response;
  grpc::ClientContext context;
  grpc::Status status = stub->Tokenize(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.token_ids_size(), 2);
  EXPECT_EQ(response.token_ids(0), 'h');
  EXPECT_EQ(response.token_ids(1), 'i');

  // An unimplemented method answers UNIMPLEMENTED rather than crashing.
  grpc::ClientContext info_context;
  ced::v1::ModelInfoResponse info;
  status = stub->ModelInfo(&info_context, ced::v1::ModelInfoRequest(), &info);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  server->Shutdown();
}

}  // namespace
