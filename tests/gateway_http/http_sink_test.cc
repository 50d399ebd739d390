// HttpSink's direct streaming on a real socket pair: every message reaches
// the reader in order as well-formed HTTP/1.1 chunks, also when the reader
// is slow and the socket's buffer is full (the connection's thread writes
// what the pushing thread could not); a reader that hangs up or a deadline
// ends it with false.
#include "services/gateway/openai/http_sink.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ced::gateway::openai {
namespace {

// Reads everything until the peer closes or `stop_after` bytes came.
std::string ReadAll(int fd, size_t stop_after = std::string::npos) {
  std::string got;
  char buffer[4096];
  while (got.size() < stop_after) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0) break;
    got.append(buffer, static_cast<size_t>(n));
  }
  return got;
}

// The payloads of a chunked body (without the terminating zero chunk, which
// the HTTP server writes); false in *ok when the framing is broken.
std::string Unchunk(const std::string& body, bool* ok) {
  std::string out;
  size_t at = 0;
  *ok = true;
  while (at < body.size()) {
    const size_t crlf = body.find("\r\n", at);
    if (crlf == std::string::npos) {
      *ok = false;
      break;
    }
    char* end = nullptr;
    const std::string hex = body.substr(at, crlf - at);
    const unsigned long size = std::strtoul(hex.c_str(), &end, 16);
    if (hex.empty() || *end != '\0' || size == 0 || crlf + 2 + size + 2 > body.size() ||
        body.compare(crlf + 2 + size, 2, "\r\n") != 0) {
      *ok = false;
      break;
    }
    out.append(body, crlf + 2, size);
    at = crlf + 2 + size + 2;
  }
  return out;
}

ced::v1::GenerateResponse Message(const std::string& text) {
  ced::v1::GenerateResponse m;
  m.set_text(text);
  return m;
}

HttpSink::Render TextRender() {
  return [](const ced::v1::GenerateResponse& m, std::string* out) {
    absl::StrAppend(out, "data: ", m.text(), "\n\n");
  };
}

HttpSink::RenderEnd EndRender() {
  return [](const grpc::Status& s) { return s.ok() ? std::string("data: [DONE]\n\n") : "data: error\n\n"; };
}

class HttpSinkDirectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0);
    // A small send buffer: a slow reader makes the pushing thread's sends
    // come up short, so the connection's thread has to finish them.
    const int small = 4096;
    ASSERT_EQ(setsockopt(fds_[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
  }
  void TearDown() override {
    for (int& fd : fds_) {
      if (fd >= 0) close(fd);
    }
  }
  int fds_[2] = {-1, -1};  // [0]: the server's side, [1]: the client's
};

TEST_F(HttpSinkDirectTest, EveryMessageArrivesInOrderThroughAFullSocket) {
  HttpSink sink;
  sink.Push(Message("queued-before-direct"));
  std::atomic<bool> result{false};
  std::thread connection([&] {
    result = sink.StreamDirect(fds_[0], absl::Now() + absl::Seconds(30), absl::Seconds(30),
                               TextRender(), EndRender());
    shutdown(fds_[0], SHUT_WR);  // the reader then sees the end
  });
  std::string expected = "data: queued-before-direct\n\n";
  std::thread producer([&] {
    for (int i = 0; i < 300; ++i) {
      // ~2 KB per message, 600 KB in all: far more than the socket holds.
      const std::string text = absl::StrCat(i, ":", std::string(2000, static_cast<char>('a' + i % 26)));
      sink.Push(Message(text));
    }
    sink.Close(grpc::Status::OK);
  });
  for (int i = 0; i < 300; ++i) {
    absl::StrAppend(&expected, "data: ", i, ":", std::string(2000, static_cast<char>('a' + i % 26)),
                    "\n\n");
  }
  expected += "data: [DONE]\n\n";
  absl::SleepFor(absl::Milliseconds(200));  // a slow reader
  const std::string body = ReadAll(fds_[1]);
  producer.join();
  connection.join();
  EXPECT_TRUE(result.load());
  bool ok = false;
  const std::string payload = Unchunk(body, &ok);
  EXPECT_TRUE(ok) << body.substr(0, 200);
  EXPECT_EQ(payload.size(), expected.size());
  EXPECT_TRUE(payload == expected);
  EXPECT_EQ(sink.closed().value_or(grpc::Status::CANCELLED).error_code(), grpc::StatusCode::OK);
}

TEST_F(HttpSinkDirectTest, CloseBeforeDirectWritesTheQueueAndTheEnd) {
  HttpSink sink;
  sink.Push(Message("one"));
  sink.Push(Message("two"));
  sink.Close(grpc::Status(grpc::StatusCode::INTERNAL, "boom"));
  EXPECT_TRUE(sink.StreamDirect(fds_[0], absl::Now() + absl::Seconds(10), absl::Seconds(10),
                                TextRender(), EndRender()));
  shutdown(fds_[0], SHUT_WR);
  bool ok = false;
  EXPECT_EQ(Unchunk(ReadAll(fds_[1]), &ok), "data: one\n\ndata: two\n\ndata: error\n\n");
  EXPECT_TRUE(ok);
}

TEST_F(HttpSinkDirectTest, AReaderThatHangsUpEndsItWithFalse) {
  HttpSink sink;
  std::atomic<bool> returned{false};
  std::atomic<bool> result{true};
  std::thread connection([&] {
    result = sink.StreamDirect(fds_[0], absl::Now() + absl::Seconds(30), absl::Seconds(30),
                               TextRender(), EndRender());
    returned = true;
  });
  sink.Push(Message("first"));
  const std::string got = ReadAll(fds_[1], 5);
  EXPECT_GE(got.size(), 5u);
  close(fds_[1]);
  fds_[1] = -1;
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!returned && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE(returned.load()) << "StreamDirect did not see the hang-up";
  // Later messages and the close go nowhere, without a crash or a SIGPIPE.
  for (int i = 0; i < 100; ++i) sink.Push(Message(std::string(1000, 'x')));
  sink.Close(grpc::Status::OK);
  connection.join();
  EXPECT_FALSE(result.load());
}

TEST_F(HttpSinkDirectTest, TheDeadlineEndsAWaitWithFalse) {
  HttpSink sink;
  const absl::Time start = absl::Now();
  EXPECT_FALSE(sink.StreamDirect(fds_[0], start + absl::Milliseconds(100), absl::Seconds(10),
                                 TextRender(), EndRender()));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
}

TEST_F(HttpSinkDirectTest, AReaderThatTakesNothingIsDroppedAfterTheWriteTimeout) {
  HttpSink sink;
  std::thread producer([&] {
    for (int i = 0; i < 200; ++i) sink.Push(Message(std::string(2000, 'y')));
  });
  // Nobody reads fds_[1]: the socket fills and stays full.
  EXPECT_FALSE(sink.StreamDirect(fds_[0], absl::Now() + absl::Seconds(30),
                                 absl::Milliseconds(200), TextRender(), EndRender()));
  producer.join();
}

TEST(HttpChunkTest, SizeInHexThenTheBytes) {
  EXPECT_EQ(HttpChunk("hello"), "5\r\nhello\r\n");
  EXPECT_EQ(HttpChunk(std::string(26, 'z')), "1a\r\n" + std::string(26, 'z') + "\r\n");
}

}  // namespace
}  // namespace ced::gateway::openai
