// services/common/host_port: the "host:port" parser every address flag uses,
// and the check of a peer address (the workers' and gateway's --router).
#include "services/common/host_port.h"

#include <gtest/gtest.h>

namespace ced::services {
namespace {

TEST(HostPortTest, ParsesHostsPortsAndBracketedV6) {
  absl::StatusOr<HostPort> hp = ParseHostPort("127.0.0.1:50051");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->host, "127.0.0.1");
  EXPECT_EQ(hp->port, 50051);
  hp = ParseHostPort("[::1]:0");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->host, "::1");
  EXPECT_EQ(hp->port, 0);
  hp = ParseHostPort(":9100");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->host, "");
  EXPECT_EQ(FormatHostPort("::1", 5), "[::1]:5");
  EXPECT_EQ(FormatHostPort("ced-router", 50051), "ced-router:50051");
}

TEST(HostPortTest, BadAddressesQuoteTheAddress) {
  for (const char* bad : {"bad", "h:x", "h:65536", "h:-1", ""}) {
    const absl::StatusOr<HostPort> hp = ParseHostPort(bad);
    ASSERT_FALSE(hp.ok()) << bad;
    EXPECT_EQ(hp.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(hp.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << hp.status();
  }
}

TEST(HostPortTest, PeerAddressNeedsAHostAndANonZeroPort) {
  EXPECT_TRUE(CheckPeerAddress("router", "ced-router:50051").ok());
  EXPECT_TRUE(CheckPeerAddress("router", "[::1]:50051").ok());
  for (const char* bad : {"bad", ":50051", "127.0.0.1:0", "r:x", "", "http://r:50051",
                          "dns:///r:50051", "r/x:1", "r x:1", "user@r:1", "[::1:1"}) {
    const absl::Status s = CheckPeerAddress("router", bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(s.message().rfind("--router: ", 0), 0u) << s;
  }
  EXPECT_EQ(CheckPeerAddress("gateway", "https://gw:443").message(),
            "--gateway: 'https://gw:443' is a URL; give host:port (e.g. 127.0.0.1:50050)");
  EXPECT_EQ(CheckPeerAddress("router", "r/x:1").message(),
            "--router: 'r/x:1' has a character a host cannot have ('/')");
}

}  // namespace
}  // namespace ced::services
