// Hostile input (reliability items 11 and 12), against real processes on
// loopback:
// - malformed bytes to every internal listener (the gRPC ports of router,
//   gateway, prefill and decode, their /metrics HTTP ports, and the decode
//   worker's UCX listener): each costs only its own connection; afterwards
//   every listener still answers and a normal greedy request gets the
//   colocated engine's tokens;
// - forged K/V sent to a decode worker over the real UCX transport from a
//   sender in this test (never reserved, wrong transfer token, another
//   request's token, beyond the reserved range, wrong cache format, wrong
//   length, per-layer, tail out of order): each is refused, counted under its
//   reason in ced_kv_rejected_messages_total, and no byte lands; the
//   reservation it aimed at still completes with the right tokens.
// Afterwards no KV block is left in use.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/config.h"
#include "engine/runtime/engine.h"
#include "services/common/worker_util.h"
#include "services/kv_transport/transport.h"
#include "services/kv_transport/ucx/ucx_exchange.h"
#include "tests/overload/topology.h"

namespace ced::testing {
namespace {

// A TCP connection to host:port on loopback; -1 on failure.
int Connect(const std::string& address) {
  const auto colon = address.rfind(':');
  std::string host = address.substr(0, colon);
  if (host.empty() || host == "0.0.0.0" || host == "localhost") host = "127.0.0.1";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) return -1;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return fd;
}

// Writes what the peer takes (it may close early), then reads until it
// closes the connection or `wait_ms` pass. The outcome is the peer's
// business: these bytes only have to cost this one connection.
void Attack(const std::string& address, const std::string& bytes, int wait_ms = 1500,
            bool reset = false) {
  const int fd = Connect(address);
  ASSERT_GE(fd, 0) << "cannot connect to " << address;
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  if (reset) {
    linger l{1, 0};  // close with RST
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
    return;
  }
  shutdown(fd, SHUT_WR);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
  }
  close(fd);
}

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

const std::string kPreface("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);

// An HTTP/2 frame header: 24-bit length, type, flags, stream id.
std::string Frame(uint32_t length, uint8_t type, uint8_t flags, uint32_t stream) {
  std::string f(9, '\0');
  f[0] = static_cast<char>(length >> 16);
  f[1] = static_cast<char>(length >> 8);
  f[2] = static_cast<char>(length);
  f[3] = static_cast<char>(type);
  f[4] = static_cast<char>(flags);
  f[5] = static_cast<char>((stream >> 24) & 0x7f);
  f[6] = static_cast<char>(stream >> 16);
  f[7] = static_cast<char>(stream >> 8);
  f[8] = static_cast<char>(stream);
  return f;
}

struct Payload {
  std::string name;
  std::string bytes;
  bool reset = false;
};

std::vector<Payload> Payloads() {
  std::vector<Payload> p;
  p.push_back({"random 64 KiB", RandomBytes(64 << 10, 1)});
  p.push_back({"random 16 B", RandomBytes(16, 2)});
  p.push_back({"truncated HTTP/2 preface", kPreface.substr(0, 18)});
  p.push_back({"preface + frame header claiming 16 MiB",
               kPreface + Frame(0, 4, 0, 0) + Frame(0xFFFFFF, 0, 0, 1) + RandomBytes(8192, 3)});
  p.push_back({"preface + HEADERS with garbage HPACK",
               kPreface + Frame(0, 4, 0, 0) + Frame(64, 1, 0x5, 1) + RandomBytes(64, 4)});
  p.push_back(
      {"preface + SETTINGS of bad length", kPreface + Frame(5, 4, 0, 0) + RandomBytes(5, 5)});
  p.push_back({"HTTP/1.1 with a 256 KiB header", "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Long: " +
                                                     std::string(256 << 10, 'a') + "\r\n\r\n"});
  p.push_back({"HTTP/1.1 with a bad request line", "\x01\x02 /\xff HTTP/9.9\r\n\r\n"});
  p.push_back({"UCX-looking header of zeros", std::string(4096, '\0')});
  {
    // A well-formed UCX connection-manager request header (u64 length,
    // status 0, padding) with random private data behind it.
    std::string h(16, '\0');
    h[0] = static_cast<char>(200);
    p.push_back({"UCX request header + 200 random bytes", h + RandomBytes(200, 7)});
    h[0] = static_cast<char>(16);
    p.push_back({"UCX request header + 16 B, then more", h + RandomBytes(16, 8) + h});
  }
  {
    // The KV listener's own exchange (ucx_exchange.h): a hello of a wrong
    // version, one claiming a huge worker address, and well-formed hellos
    // naming no reservation with random bytes for a worker address (which
    // must be refused before UCX ever parses them).
    kv_transport::KvMessageHeader h;
    h.kind = kv_transport::KvMessageKind::kGlobalRange;
    h.token_begin = 0;
    h.token_end = 16;
    h.layer = -1;
    h.payload_bytes = 4096;
    const std::string address = RandomBytes(300, 9);
    const auto span =
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(address.data()), address.size());
    std::string hello = kv_transport::ucx::EncodeHello(h, span);
    hello[8] = 9;
    p.push_back({"KV hello of version 9", hello});
    hello = kv_transport::ucx::EncodeHello(h, span);
    hello[12] = hello[13] = hello[14] = hello[15] = static_cast<char>(0xFF);
    p.push_back({"KV hello claiming a 4 GiB worker address", hello});
    for (uint64_t seed : {10, 11}) {
      h.request_id = std::mt19937_64(seed)();
      h.transfer_token = std::mt19937_64(seed + 100)();
      p.push_back({"KV hello naming no reservation, garbage worker address",
                   kv_transport::ucx::EncodeHello(h, span)});
    }
  }
  p.push_back({"connect and reset", "", true});
  p.push_back({"random 1 KiB then reset", RandomBytes(1024, 6), true});
  return p;
}

class HostileInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = MakeModelDir("tiny");
    ColocatedEngine colocated(model_);
    prompt_ = Prompt(40, 9);
    expected_ = colocated.Run(prompt_, 8);
  }
  std::string model_;
  std::vector<int32_t> prompt_, expected_;
};

TEST_F(HostileInputTest, MalformedBytesToEveryListenerCostOnlyThatConnection) {
  Topology topo(model_, {});
  ASSERT_TRUE(topo.ready()) << topo.Logs();
  const GenResult before =
      Generate(topo.gateway().grpc(), Request(prompt_, 8, ced::v1::REPLAY_ON_AUTO));
  ASSERT_TRUE(before.status.ok()) << before.status.error_message();
  EXPECT_EQ(before.tokens, expected_);

  struct Listener {
    std::string name, address, kind;  // kind: grpc | metrics | ucx
  };
  std::vector<Listener> listeners;
  for (auto& [name, p] : topo.processes()) {
    listeners.push_back({name + " gRPC", p->grpc(), "grpc"});
    listeners.push_back({name + " /metrics", p->metrics(), "metrics"});
    if (!p->kv().empty()) listeners.push_back({name + " UCX", p->kv(), "ucx"});
  }
  ASSERT_EQ(listeners.size(), 9u);
  int connections = 0;
  for (const Listener& l : listeners) {
    // One connection left idle for the whole barrage (a slow client).
    const int idle = Connect(l.address);
    ASSERT_GE(idle, 0) << l.name;
    for (const Payload& p : Payloads()) {
      SCOPED_TRACE(l.name + ": " + p.name);
      Attack(l.address, p.bytes, 400, p.reset);
      ++connections;
    }
    // The listener still answers a well-formed client.
    if (l.kind == "grpc") {
      EXPECT_GE(HealthStatus(l.address, ""), 0) << l.name << "\n" << topo.Logs();
    } else if (l.kind == "metrics") {
      int status = 0;
      HttpGet(l.address, "/metrics", &status);
      EXPECT_EQ(status, 200) << l.name << "\n" << topo.Logs();
    }
    close(idle);
  }
  // Every process is up and serving; the UCX listener carries a real transfer.
  for (auto& [name, p] : topo.processes()) {
    EXPECT_GE(HealthStatus(p->grpc(), ""), 0) << name << " is gone\n" << topo.Logs();
  }
  EXPECT_TRUE(WaitUntil([&] { return HealthStatus(topo.gateway().grpc(), "") == 1; },
                        std::chrono::seconds(20)));
  for (int i = 0; i < 2; ++i) {
    const GenResult after = Generate(
        topo.gateway().grpc(),
        Request(prompt_, 8, i == 0 ? ced::v1::REPLAY_ON_DECODE : ced::v1::REPLAY_ON_PREFILL));
    ASSERT_TRUE(after.status.ok()) << after.status.error_message() << "\n" << topo.Logs();
    EXPECT_EQ(after.tokens, expected_);
  }
  topo.ExpectNoKvLeak();
  // The well-formed hellos naming no reservation were refused by the decode
  // worker's reservation check (each sent to the one KV listener).
  EXPECT_GE(
      ScrapeMetric(topo.decode().metrics(), "ced_kv_rejected_messages_total{reason=\"connection\"}")
          .value_or(0),
      2);
  std::printf("[figures] %d hostile connections to %zu listeners; all listeners survived\n",
              connections, listeners.size());
}

class HostileKvTest : public HostileInputTest {
 protected:
  void SetUp() override {
    HostileInputTest::SetUp();
    auto config = LoadConfigFile(model_ + "/config.json");
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
    kv_transport::TransportOptions o;
    o.kind = "ucx";
    o.send_timeout_ms = 20000;
    auto t = kv_transport::CreateKvTransport(o);
    ASSERT_TRUE(t.ok()) << t.status();
    sender_ = *std::move(t);
  }
  // Sends `h` with a payload of h.payload_bytes bytes; the receiver's verdict.
  absl::Status Send(const std::string& peer, kv_transport::KvMessageHeader h) {
    std::vector<uint8_t> payload(h.payload_bytes, 0xAB);
    return sender_->Send(peer, h, {{payload.data(), payload.size()}});
  }
  kv_transport::KvMessageHeader Global(const std::string& id, uint64_t token, int begin,
                                       int end) const {
    kv_transport::KvMessageHeader h;
    h.kind = kv_transport::KvMessageKind::kGlobalRange;
    h.request_id = services::RequestIdHash(id);
    h.transfer_token = token;
    h.token_begin = static_cast<uint32_t>(begin);
    h.token_end = static_cast<uint32_t>(end);
    h.layer = -1;
    h.format = config_.kv_cache_dtype;
    h.payload_bytes = Engine::GlobalRangeBytes(config_, begin, end);
    return h;
  }

  ModelConfig config_;
  std::unique_ptr<kv_transport::KvTransport> sender_;
};

// Sampling fields the gateway would have refused, sent to the decode worker
// directly: refused naming the field, and the worker serves the next request.
TEST_F(HostileKvTest, ReserveWithBadSamplingIsRefusedNamingTheField) {
  TopologyFlags flags;
  flags.router = false;  // the test is the gateway
  Topology topo(model_, flags);
  ASSERT_TRUE(topo.ready()) << topo.Logs();
  DirectClient direct(topo.decode().grpc(), topo.prefill().grpc());
  struct Case {
    std::string field;
    std::function<void(ced::internal::SamplingParams*)> mutate;
  };
  const std::vector<Case> cases = {
      {"sampling.logit_bias[100000]",
       [](ced::internal::SamplingParams* s) { (*s->mutable_logit_bias())[100000] = 1.0f; }},
      {"sampling.logit_bias[3]",
       [](ced::internal::SamplingParams* s) { (*s->mutable_logit_bias())[3] = 1e9f; }},
      {"sampling.repetition_penalty",
       [](ced::internal::SamplingParams* s) { s->set_repetition_penalty(-1.0f); }},
      {"sampling.presence_penalty",
       [](ced::internal::SamplingParams* s) { s->set_presence_penalty(7.0f); }},
  };
  int i = 0;
  for (const Case& c : cases) {
    ced::internal::SamplingParams sampling;
    c.mutate(&sampling);
    ced::internal::ReserveResponse out;
    const grpc::Status s =
        direct.Reserve(absl::StrCat("bad-", i++), prompt_, 8, &out, "", &sampling);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_EQ(s.error_message().rfind(c.field, 0), 0u) << s.error_message();
  }
  ced::internal::ReserveResponse ok;
  EXPECT_TRUE(direct.Reserve("good", prompt_, 8, &ok).ok());
}

TEST_F(HostileKvTest, ForgedKvIsRefusedCountedAndNothingLands) {
  TopologyFlags flags;
  flags.router = false;  // the test is the gateway
  Topology topo(model_, flags);
  ASSERT_TRUE(topo.ready()) << topo.Logs();
  DirectClient direct(topo.decode().grpc(), topo.prefill().grpc());
  ced::internal::ReserveResponse victim, other;
  ASSERT_TRUE(direct.Reserve("victim", prompt_, 8, &victim).ok());
  ASSERT_TRUE(direct.Reserve("other", prompt_, 8, &other).ok());
  ASSERT_NE(victim.transfer_token(), other.transfer_token());
  const std::string kv = victim.kv_address();
  ASSERT_FALSE(kv.empty());
  const int n = static_cast<int>(prompt_.size());
  const uint64_t t = victim.transfer_token();

  struct Case {
    std::string name, reason;
    kv_transport::KvMessageHeader header;
  };
  // A peer must name a live reservation (request id + transfer token) to get a
  // connection at all: the forged tokens are refused at the address exchange,
  // before UCX sees the peer ("connection"). A message naming the victim's
  // reservation gets a connection; over it, every message is checked against
  // the reservation before a byte lands, forged tokens included.
  std::vector<Case> forged_tokens;
  {
    auto h = Global("ghost", t ^ 0x9E3779B97F4A7C15ull, 0, 16);
    forged_tokens.push_back({"never reserved", "unknown_token", h});
    h = Global("victim", t ^ 0x5555, 0, 16);
    forged_tokens.push_back({"wrong transfer token", "unknown_token", h});
    h = Global("victim", other.transfer_token(), 0, 16);
    forged_tokens.push_back({"another request's token", "request_mismatch", h});
  }
  std::vector<Case> cases;
  for (const Case& c : forged_tokens)
    cases.push_back({c.name + ", no connection", "connection", c.header});
  {
    auto h = Global("victim", t, 32, n + 8);
    cases.push_back({"beyond the reserved range", "range", h});
    h = Global("victim", t, n, n + 1);
    cases.push_back({"first token past the prompt", "range", h});
    h = Global("victim", t, 0, 16);
    h.layer = 3;
    cases.push_back({"per-layer message", "range", h});
    h = Global("victim", t, 0, 16);
    h.format = config_.kv_cache_dtype == KvFormat::kBF16 ? KvFormat::kF32 : KvFormat::kBF16;
    cases.push_back({"wrong cache format", "format", h});
    h = Global("victim", t, 0, 16);
    h.payload_bytes -= 4;
    cases.push_back({"payload shorter than the range", "length", h});
    h = Global("victim", t, 0, 16);
    h.kind = kv_transport::KvMessageKind::kTail;
    h.flags = kv_transport::kKvFlagFinal;
    h.payload_bytes = 256;
    cases.push_back({"tail before the global K/V", "unexpected", h});
  }
  for (const Case& c : forged_tokens) cases.push_back({c.name + ", connected", c.reason, c.header});
  std::map<std::string, int> want;
  for (const Case& c : cases) {
    const absl::Status s = Send(kv, c.header);
    EXPECT_FALSE(s.ok()) << c.name << " was accepted";
    if (c.reason == "connection") {
      EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << c.name << ": " << s;
    }
    ++want[c.reason];
  }
  const std::string& m = topo.decode().metrics();
  for (const auto& [reason, count] : want) {
    EXPECT_EQ(ScrapeMetric(m, "ced_kv_rejected_messages_total{reason=\"" + reason + "\"}"), count)
        << reason;
  }
  // Not a byte landed.
  EXPECT_EQ(ScrapeMetric(m, "ced_kv_transfer_bytes_total{direction=\"in\"}").value_or(0), 0);

  // The real transfers still land and decode to the colocated tokens.
  const GenResult v = direct.Run("victim", prompt_, victim);
  ASSERT_TRUE(v.status.ok()) << v.status.error_message() << "\n" << topo.Logs();
  EXPECT_EQ(v.tokens, expected_);
  const GenResult o = direct.Run("other", prompt_, other);
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_EQ(o.tokens, expected_);
  // A replay of a legitimate message after the request ended is refused too.
  EXPECT_FALSE(Send(kv, Global("victim", t, 0, 16)).ok());
  const double late =
      ScrapeMetric(m, "ced_kv_rejected_messages_total{reason=\"unknown_token\"}").value_or(0) +
      ScrapeMetric(m, "ced_kv_rejected_messages_total{reason=\"inactive\"}").value_or(0) +
      ScrapeMetric(m, "ced_kv_rejected_messages_total{reason=\"unexpected\"}").value_or(0);
  EXPECT_EQ(late, want["unknown_token"] + want["unexpected"] + 1);
  topo.ExpectNoKvLeak();
  EXPECT_EQ(HealthStatus(topo.decode().grpc(), ""), 1);
  int total = 0;
  for (const auto& [reason, count] : want) total += count;
  std::printf("[figures] %d forged K/V messages refused over UCX, 0 bytes landed\n", total + 1);
}

}  // namespace
}  // namespace ced::testing
