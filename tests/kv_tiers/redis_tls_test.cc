// The Redis tier over TLS (rediss://) against a real redis-server with TLS
// and real OpenSSL: a CA, server and client certificates are made here with
// the openssl CLI. Round trips (also large pipelines), mutual TLS, and every
// failure -- wrong CA, wrong server name, a server that does not speak TLS,
// a missing client certificate, the server killed -- is a miss + a counted
// error, never a crash; the relay threads end with the store. Without
// redis-server or openssl the tests are skipped (failed under CI=true).
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "services/kv_store/local_redis.h"
#include "services/kv_store/redis_store.h"
#include "tests/common/missing_tool.h"
#include "tests/kv_tiers/tier_test_util.h"

namespace ced::testing {
namespace {

using services::LocalRedis;
using services::LocalRedisTls;
using services::ParseRedisUrl;
using services::RedisBlockStore;
using services::RedisStoreOptions;
using ::testing::HasSubstr;

bool OnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    if (access(absl::StrCat(dir, "/", name).c_str(), X_OK) == 0) return true;
  }
  return false;
}

int Threads() {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  while (d != nullptr && readdir(d) != nullptr) ++n;
  if (d != nullptr) closedir(d);
  return n;
}

TEST(RedisTlsUrlTest, ParsesRedissAndRefusesBadCombinations) {
  auto a = ParseRedisUrl("rediss://ced:p%40ss@redis.ns.svc:6380/3");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->tls);
  EXPECT_EQ(a->host, "redis.ns.svc");
  EXPECT_EQ(a->port, 6380);
  EXPECT_EQ(a->db, 3);
  EXPECT_EQ(a->user, "ced");
  EXPECT_EQ(a->password, "p@ss");
  auto b = ParseRedisUrl("rediss://[::1]");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->tls);
  EXPECT_EQ(b->port, 6379);
  EXPECT_FALSE(ParseRedisUrl("redis://h")->tls);
  for (const char* bad : {"redisss://h", "rediss://", "rediss://h:0", "rediss:/h", "tls://h"}) {
    EXPECT_FALSE(ParseRedisUrl(bad).ok()) << bad;
  }
  // TLS files on a plain store, a certificate without its key, a missing file.
  RedisStoreOptions o;
  o.tls_ca_file = "/etc/hostname";
  auto s = RedisBlockStore::Create(o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("--kv-store-tls-ca needs a rediss://"));
  o.tls = true;
  o.tls_ca_file.clear();
  o.tls_cert_file = "/etc/hostname";
  s = RedisBlockStore::Create(o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("--kv-store-tls-key"));
  o.tls_cert_file.clear();
  o.tls_ca_file = "/nonexistent/ca.pem";
  s = RedisBlockStore::Create(o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(),
              HasSubstr("--kv-store-tls-ca: cannot read /nonexistent/ca.pem"));
}

// A CA, an unrelated CA, a server certificate for localhost / 127.0.0.1, one
// for another name, and a client certificate, all signed by the first CA.
class RedisTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!OnPath("openssl") || services::FindRedisServer().empty()) return;
    char tmpl[] = "/tmp/ced-redis-tls-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = new std::string(tmpl);
    std::ofstream(*dir_ + "/ced.cnf") << R"([req]
distinguished_name = dn
prompt = no
[dn]
CN = ced-test
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
subjectAltName = DNS:localhost,IP:127.0.0.1
extendedKeyUsage = serverAuth
[other]
subjectAltName = DNS:redis.other.example
extendedKeyUsage = serverAuth
[client]
extendedKeyUsage = clientAuth
)";
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    std::string script = absl::StrCat("set -e; cd ", *dir_, "; exec 2>openssl.log; ");
    for (const char* ca : {"ca", "evil-ca"}) {
      absl::StrAppend(&script, "openssl req -x509 -config ced.cnf -extensions ca ", key,
                      " -keyout ", ca, ".key -out ", ca, ".crt -days 2 -subj /CN=", ca, "; ");
    }
    for (const char* leaf : {"server", "other", "client"}) {
      absl::StrAppend(&script, "openssl req -new -config ced.cnf ", key, " -keyout ", leaf,
                      ".key -out ", leaf, ".csr -subj /CN=", leaf, "; ", "openssl x509 -req -in ",
                      leaf, ".csr -CA ca.crt -CAkey ca.key ",
                      "-CAcreateserial -days 2 -extfile ced.cnf -extensions ", leaf, " -out ", leaf,
                      ".crt; ");
    }
    ASSERT_EQ(std::system(("sh -c '" + script + "' >/dev/null").c_str()), 0)
        << "openssl failed: see " << *dir_ << "/openssl.log";
  }
  static void TearDownTestSuite() {
    if (dir_ == nullptr) return;
    std::error_code ec;
    std::filesystem::remove_all(*dir_, ec);
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!OnPath("openssl")) {
      CED_SKIP_OR_FAIL_WHEN_MISSING("openssl");
    }
    if (services::FindRedisServer().empty()) {
      CED_SKIP_OR_FAIL_WHEN_MISSING("redis-server");
    }
    ASSERT_NE(dir_, nullptr);
  }
  static std::string File(const std::string& name) { return *dir_ + "/" + name; }

  std::unique_ptr<LocalRedis> Redis(const std::string& cert, bool auth_clients) {
    LocalRedisTls t;
    t.cert_file = File(cert + ".crt");
    t.key_file = File(cert + ".key");
    t.ca_file = File("ca.crt");
    t.auth_clients = auth_clients;
    auto r = LocalRedis::Start(64, "", &t);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *std::move(r) : nullptr;
  }
  // A store on `url` trusting `ca` (e.g. "ca.crt"), with a client
  // certificate when `client` is set.
  static std::shared_ptr<RedisBlockStore> Store(const std::string& url, const std::string& ca,
                                                bool client = false, int timeout_ms = 2000) {
    auto o = ParseRedisUrl(url);
    EXPECT_TRUE(o.ok()) << o.status();
    o->tls_ca_file = File(ca);
    if (client) {
      o->tls_cert_file = File("client.crt");
      o->tls_key_file = File("client.key");
    }
    o->connect_timeout_ms = timeout_ms;
    o->io_timeout_ms = timeout_ms;
    o->retry_after_ms = 0;
    auto s = RedisBlockStore::Create(*o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : nullptr;
  }
  // Round trip of `n` blocks of `bytes` each; true when all came back equal.
  static bool RoundTrip(RedisBlockStore& store, size_t bytes, int n, int salt) {
    const KvBlockLayout l = TestLayout(bytes);
    const auto hs = Chain(l, n, salt);
    std::vector<KvStoredBlock> blocks;
    for (int i = 0; i < n; ++i) blocks.push_back(Stored(l, hs[i], i + salt));
    if (!store.Put(l.root, blocks).ok()) return false;
    if (store.Contains(l.root, hs) != n) return false;
    const auto got = store.GetPrefix(l.root, hs);
    if (got.size() != static_cast<size_t>(n)) return false;
    for (int i = 0; i < n; ++i) {
      if (got[i] != *blocks[i].bytes) return false;
    }
    return true;
  }
  // Every operation misses, and the error counter moves.
  static void ExpectMissesAndErrors(RedisBlockStore& store) {
    const KvBlockLayout l = TestLayout(200);
    const auto hs = Chain(l, 2, 9);
    const int64_t before = store.stats().errors;
    EXPECT_FALSE(store.Put(l.root, {Stored(l, hs[0], 0)}).ok());
    EXPECT_EQ(store.Contains(l.root, hs), 0);
    EXPECT_TRUE(store.GetPrefix(l.root, hs).empty());
    store.Erase(l.root, hs[0]);
    EXPECT_GE(store.stats().errors, before + 3);
  }

  static std::string* dir_;
};
std::string* RedisTlsTest::dir_ = nullptr;

TEST_F(RedisTlsTest, RoundTripsWithTheCaAndEndsItsThreads) {
  auto redis = Redis("server", /*auth_clients=*/false);
  ASSERT_NE(redis, nullptr);
  ASSERT_THAT(redis->url(), HasSubstr("rediss://"));
  const int threads = Threads();
  {
    auto ip = Store(redis->url(), "ca.crt");  // 127.0.0.1: an IP SAN
    ASSERT_NE(ip, nullptr);
    EXPECT_TRUE(RoundTrip(*ip, 5000, 4, 1));
    // Megabytes through the relay both ways: pipelines past every buffer.
    EXPECT_TRUE(RoundTrip(*ip, 700 << 10, 6, 2));
    EXPECT_EQ(ip->stats().errors, 0);
    EXPECT_EQ(Threads(), threads + 2) << "one relay per connection (read, write)";
    // By name: SNI + a DNS SAN; "localhost" may resolve to ::1 first, where
    // nothing listens, and the next address is tried.
    auto name = Store("rediss://localhost:" + std::to_string(redis->port()), "ca.crt");
    ASSERT_NE(name, nullptr);
    EXPECT_TRUE(RoundTrip(*name, 3000, 3, 3));
    EXPECT_EQ(name->stats().errors, 0);
  }
  EXPECT_EQ(Threads(), threads) << "relay threads end with their store";
}

TEST_F(RedisTlsTest, MutualTls) {
  auto redis = Redis("server", /*auth_clients=*/true);
  ASSERT_NE(redis, nullptr);
  auto with_cert = Store(redis->url(), "ca.crt", /*client=*/true);
  ASSERT_NE(with_cert, nullptr);
  EXPECT_TRUE(RoundTrip(*with_cert, 4000, 3, 4));
  EXPECT_EQ(with_cert->stats().errors, 0);
  // Without a client certificate the server refuses (TLS 1.3: after the
  // client's side of the handshake, at the first read).
  auto without = Store(redis->url(), "ca.crt");
  ASSERT_NE(without, nullptr);
  ExpectMissesAndErrors(*without);
}

TEST_F(RedisTlsTest, WrongCaWrongNameAndPlainServerAreMissesAndErrors) {
  auto redis = Redis("server", /*auth_clients=*/false);
  ASSERT_NE(redis, nullptr);
  const int threads = Threads();
  {
    auto wrong_ca = Store(redis->url(), "evil-ca.crt");
    ASSERT_NE(wrong_ca, nullptr);
    ExpectMissesAndErrors(*wrong_ca);
  }
  {
    auto other = Redis("other", /*auth_clients=*/false);  // a certificate for another name
    ASSERT_NE(other, nullptr);
    auto wrong_ip = Store(other->url(), "ca.crt");
    ASSERT_NE(wrong_ip, nullptr);
    ExpectMissesAndErrors(*wrong_ip);
    auto wrong_name = Store("rediss://localhost:" + std::to_string(other->port()), "ca.crt");
    ASSERT_NE(wrong_name, nullptr);
    ExpectMissesAndErrors(*wrong_name);
  }
  {
    auto plain = LocalRedis::Start(16);  // speaks RESP, not TLS
    ASSERT_TRUE(plain.ok()) << plain.status();
    auto store = Store("rediss://127.0.0.1:" + std::to_string((*plain)->port()), "ca.crt",
                       /*client=*/false, /*timeout_ms=*/300);
    ASSERT_NE(store, nullptr);
    ExpectMissesAndErrors(*store);
  }
  EXPECT_EQ(Threads(), threads);
  // The good store still works afterwards.
  auto good = Store(redis->url(), "ca.crt");
  ASSERT_NE(good, nullptr);
  EXPECT_TRUE(RoundTrip(*good, 1000, 2, 5));
}

TEST_F(RedisTlsTest, ServerDeathIsAMissNotACrash) {
  auto redis = Redis("server", /*auth_clients=*/false);
  ASSERT_NE(redis, nullptr);
  auto store = Store(redis->url(), "ca.crt");
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(RoundTrip(*store, 2000, 2, 6));
  kill(redis->pid(), SIGKILL);
  redis->Stop();
  ExpectMissesAndErrors(*store);
  ExpectMissesAndErrors(*store);
}

// A server that stops answering: hiredis's I/O timeout fires on its end of
// the socketpair, the relay (waiting on Redis) is torn down, and once the
// server answers again a new connection works.
TEST_F(RedisTlsTest, StalledServerTimesOutAndRecovers) {
  auto redis = Redis("server", /*auth_clients=*/false);
  ASSERT_NE(redis, nullptr);
  auto store = Store(redis->url(), "ca.crt", /*client=*/false, /*timeout_ms=*/300);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(RoundTrip(*store, 2000, 2, 7));
  ASSERT_EQ(kill(redis->pid(), SIGSTOP), 0);
  const auto t0 = std::chrono::steady_clock::now();
  ExpectMissesAndErrors(*store);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  ASSERT_EQ(kill(redis->pid(), SIGCONT), 0);
  EXPECT_TRUE(RoundTrip(*store, 2000, 2, 8));
}

TEST_F(RedisTlsTest, StartUpErrorsNameTheFlag) {
  RedisStoreOptions o;
  o.tls = true;
  o.tls_ca_file = File("ced.cnf");  // readable, no certificate in it
  auto s = RedisBlockStore::Create(o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("--kv-store-tls-ca"));
  o.tls_ca_file = File("ca.crt");
  o.tls_cert_file = File("client.crt");
  o.tls_key_file = File("server.key");  // another certificate's key
  s = RedisBlockStore::Create(o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("--kv-store-tls-key"));
  o.tls_key_file = File("missing.key");
  s = RedisBlockStore::Create(o);
  EXPECT_THAT(s.status().message(), HasSubstr("--kv-store-tls-key: cannot read"));
  o.tls_key_file = File("client.key");
  EXPECT_TRUE(RedisBlockStore::Create(o).ok());
}

}  // namespace
}  // namespace ced::testing
