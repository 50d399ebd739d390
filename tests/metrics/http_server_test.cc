#include "services/metrics/http_server.h"

#include <atomic>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/metrics/text_format.h"
#include "tests/metrics/test_util.h"

namespace ced::metrics {
namespace {

using ::testing::HasSubstr;
using testing::HttpGet;
using testing::SendHttpRequest;

class MetricsHttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Family<Counter>* family = *registry_.AddCounter("served_total", "Served.", {"outcome"});
    family->WithLabels({{"outcome", "ok"}}).Increment(5);
  }
  std::unique_ptr<MetricsHttpServer> Start(MetricsHttpServer::Options options) {
    options.registry = &registry_;
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server = MetricsHttpServer::Create(options);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? std::move(*server) : nullptr;
  }
  Registry registry_;
};

TEST_F(MetricsHttpServerTest, ServesMetricsWithTextFormatContentType) {
  auto server = Start({});
  ASSERT_NE(server, nullptr);
  EXPECT_GT(server->port(), 0);
  absl::StatusOr<testing::HttpResult> response = HttpGet(server->port(), "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->Header("Content-Type"), kTextContentType);
  EXPECT_EQ(response->body, registry_.Serialize());
  EXPECT_THAT(response->body, HasSubstr("served_total{outcome=\"ok\"} 5\n"));
}

TEST_F(MetricsHttpServerTest, HeadHasNoBody) {
  auto server = Start({});
  ASSERT_NE(server, nullptr);
  absl::StatusOr<testing::HttpResult> response =
      SendHttpRequest(server->port(), "HEAD", "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "");
}

TEST_F(MetricsHttpServerTest, HealthzFollowsCallback) {
  std::atomic<bool> healthy{true};
  MetricsHttpServer::Options options;
  options.health_check = [&healthy] { return healthy.load(); };
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<testing::HttpResult> response = HttpGet(server->port(), "/healthz");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "ok");
  healthy = false;
  response = HttpGet(server->port(), "/healthz");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 503);
}

TEST_F(MetricsHttpServerTest, HealthzWithoutCallbackIsOk) {
  auto server = Start({});
  ASSERT_NE(server, nullptr);
  absl::StatusOr<testing::HttpResult> response = HttpGet(server->port(), "/healthz");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
}

TEST_F(MetricsHttpServerTest, ExtraHandlersUnknownPathsAndMethods) {
  MetricsHttpServer::Options options;
  options.extra_handlers["/info"] = [](const HttpRequest& request) {
    HttpResponse response;
    response.content_type = "application/json";
    response.body = "{\"query\":\"" + request.query + "\"}";
    return response;
  };
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<testing::HttpResult> response = HttpGet(server->port(), "/info?x=1");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->Header("content-type"), "application/json");
  EXPECT_EQ(response->body, "{\"query\":\"x=1\"}");

  response = HttpGet(server->port(), "/nope");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 404);
  response = HttpGet(server->port(), "/metrics/extra");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 404);
  response = SendHttpRequest(server->port(), "POST", "/metrics");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 405);
}

TEST_F(MetricsHttpServerTest, RejectsBadOptions) {
  MetricsHttpServer::Options options;
  EXPECT_EQ(MetricsHttpServer::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);  // No registry.
  options.registry = &registry_;
  for (const char* address :
       {"no-port", "127.0.0.1:", "127.0.0.1:70000", "127.0.0.1:x", "::1:80"}) {
    options.listen_address = address;
    EXPECT_EQ(MetricsHttpServer::Create(options).status().code(),
              absl::StatusCode::kInvalidArgument)
        << address;
  }
  options.listen_address = "127.0.0.1:0";
  options.extra_handlers["/metrics"] = [](const HttpRequest&) { return HttpResponse{}; };
  EXPECT_EQ(MetricsHttpServer::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(MetricsHttpServerTest, PortInUseIsUnavailable) {
  auto first = Start({});
  ASSERT_NE(first, nullptr);
  MetricsHttpServer::Options options;
  options.registry = &registry_;
  options.listen_address = "127.0.0.1:" + std::to_string(first->port());
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> second = MetricsHttpServer::Create(options);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
}

TEST_F(MetricsHttpServerTest, StopsInDestructor) {
  auto server = Start({});
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  server.reset();
  absl::StatusOr<testing::HttpResult> response = HttpGet(port, "/metrics");
  EXPECT_FALSE(response.ok());
}

TEST_F(MetricsHttpServerTest, LocalhostAlias) {
  MetricsHttpServer::Options options;
  options.listen_address = "localhost:0";
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  absl::StatusOr<testing::HttpResult> response = HttpGet(server->port(), "/healthz");
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
}

}  // namespace
}  // namespace ced::metrics
