// The KV listener's address exchange (services/kv_transport/ucx/ucx_exchange.h):
// its codec round-trips and refuses malformed messages, and its server refuses
// malformed or unadmitted hellos, answering well-formed ones, over real sockets.
#include "services/kv_transport/ucx/ucx_exchange.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <atomic>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kv_transport/test_sink.h"

namespace ced::kv_transport::ucx {
namespace {

using ::testing::HasSubstr;

KvMessageHeader Header(uint64_t request, uint64_t token) {
  return testing::MakeHeader(request, token, 4096);
}

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

TEST(ExchangeCodec, HelloRoundTrips) {
  const std::string address = "worker-address-bytes";
  const std::string hello = EncodeHello(Header(7, 99), Bytes(address));
  ASSERT_EQ(hello.size(), kHelloBytes + address.size());
  absl::StatusOr<Hello> h = DecodeHelloHeader(Bytes(hello.substr(0, kHelloBytes)), 1 << 20);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->address_bytes, address.size());
  EXPECT_EQ(h->first.request_id, 7u);
  EXPECT_EQ(h->first.transfer_token, 99u);
  EXPECT_EQ(hello.substr(kHelloBytes), address);
}

TEST(ExchangeCodec, MalformedHellosAreRefusedNamingTheField) {
  const std::string good = EncodeHello(Header(7, 99), Bytes(std::string(40, 'a')));
  auto decode = [](std::string bytes) {
    return DecodeHelloHeader(Bytes(bytes.substr(0, kHelloBytes)), 1 << 20).status();
  };
  std::string bad = good;
  bad[0] = 'X';
  EXPECT_THAT(decode(bad).message(), HasSubstr("not a ced-serve KV hello"));
  bad = good;
  bad[8] = 2;
  EXPECT_THAT(decode(bad).message(), HasSubstr("'version'"));
  bad = good;
  bad[12] = bad[13] = bad[14] = bad[15] = 0;
  EXPECT_THAT(decode(bad).message(), HasSubstr("'address_bytes'"));
  bad = good;
  bad[14] = 1;  // 64 KiB + 40
  EXPECT_THAT(decode(bad).message(), HasSubstr("'address_bytes'"));
  bad = good;
  bad[20] = 1;
  EXPECT_THAT(decode(bad).message(), HasSubstr("'reserved'"));
  bad = good;
  bad[24 + 10] ^= 0x40;  // inside the KV header: its checksum no longer matches
  EXPECT_FALSE(decode(bad).ok());
  EXPECT_FALSE(DecodeHelloHeader(Bytes(good.substr(0, kHelloBytes - 1)), 1 << 20).ok());
}

TEST(ExchangeCodec, ReplyRoundTripsAndCarriesRefusals) {
  const std::string address = "server-address";
  std::string reply = EncodeReply(ConnectionGrant{5, 0xABCDEF}, Bytes(address));
  absl::StatusOr<ReplyHeader> r = DecodeReplyHeader(Bytes(reply.substr(0, kReplyBytes)));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->status.ok());
  EXPECT_EQ(r->grant.id, 5u);
  EXPECT_EQ(r->grant.secret, 0xABCDEFu);
  EXPECT_EQ(reply.substr(kReplyBytes), address);

  reply = EncodeReply(absl::PermissionDeniedError("no such reservation"), {});
  r = DecodeReplyHeader(Bytes(reply.substr(0, kReplyBytes)));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(reply.substr(kReplyBytes), "no such reservation");

  std::string bad = EncodeReply(ConnectionGrant{5, 1}, Bytes(address));
  bad[8] = 77;  // no such status code
  EXPECT_FALSE(DecodeReplyHeader(Bytes(bad.substr(0, kReplyBytes))).ok());
  bad = EncodeReply(ConnectionGrant{5, 1}, Bytes(address));
  bad[12] = bad[13] = 0;  // OK with an empty address
  EXPECT_FALSE(DecodeReplyHeader(Bytes(bad.substr(0, kReplyBytes))).ok());
}

// A real server on loopback: the client gets the grant and the server's
// address when the accept callback admits it, the callback's status when it
// refuses, and the callback never sees a malformed hello.
TEST(ExchangeServer, AdmitsRefusesAndIgnoresGarbage) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::atomic<int> calls{0};
  auto server = AddressExchangeServer::Start(
      reinterpret_cast<const sockaddr*>(&addr), sizeof addr, "server-address", 1 << 20,
      [&](const Hello& hello, const std::string& client) -> absl::StatusOr<ConnectionGrant> {
        ++calls;
        EXPECT_EQ(client, "client-address");
        if (hello.first.transfer_token != 99) {
          return absl::PermissionDeniedError("no such reservation");
        }
        return ConnectionGrant{1, 42};
      });
  ASSERT_TRUE(server.ok()) << server.status();
  addr.sin_port = htons((*server)->port());
  const std::atomic<bool> stop{false};
  const std::string client = "client-address";
  auto ok = ExchangeAddresses(reinterpret_cast<const sockaddr*>(&addr), sizeof addr, Header(7, 99),
                              Bytes(client), 5000, stop);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->grant.id, 1u);
  EXPECT_EQ(ok->grant.secret, 42u);
  EXPECT_EQ(ok->server_address, "server-address");

  auto refused = ExchangeAddresses(reinterpret_cast<const sockaddr*>(&addr), sizeof addr,
                                   Header(7, 98), Bytes(client), 5000, stop);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(refused.status().message(), HasSubstr("no such reservation"));
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ((*server)->refused(), 1u);

  // Nobody listens: UNAVAILABLE, not a hang.
  sockaddr_in closed = addr;
  closed.sin_port = htons(1);
  auto unreachable = ExchangeAddresses(reinterpret_cast<const sockaddr*>(&closed), sizeof closed,
                                       Header(7, 99), Bytes(client), 5000, stop);
  EXPECT_EQ(unreachable.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ced::kv_transport::ucx
