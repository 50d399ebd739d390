// Transport security, authentication and listener binding of the services,
// with real processes on loopback and certificates from scripts/make_test_ca.sh:
//   - an mTLS cluster with bearer tokens answers a request with the colocated
//     engine's tokens; plaintext clients, clients trusting another CA, servers
//     with expired or untrusted certificates, internal clients without (or
//     with the wrong) client certificate all fail to connect;
//   - missing / wrong tokens get UNAUTHENTICATED, health checks stay open;
//   - the OpenAI HTTP API is HTTPS only, with the same certificate and tokens
//     (401 in OpenAI's error shape without one);
//   - every listening socket of every service process is on the loopback
//     interface it was told to bind (gRPC, /metrics, the UCX KV listener).
#include "services/common/security.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "ced/internal/decode_worker.grpc.pb.h"
#include "ced/internal/prefill_worker.grpc.pb.h"
#include "ced/internal/router.grpc.pb.h"
#include "ced/v1/gateway.grpc.pb.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/common/grpc_util.h"
#include "services/common/subprocess.h"
#include "tests/e2e/cluster_fixture.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/service_process.h"
#include "tests/metrics/test_util.h"

namespace ced::testing {
namespace {

std::string SourceDir() {
  const char* dir = std::getenv("CED_SOURCE_DIR");
  return dir != nullptr ? dir : CED_SOURCE_DIR_DEFAULT;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The test CA (made once per test binary run).
const std::string& CertDir() {
  // Shared by the test processes (CTest runs each test alone): made in a
  // private folder, then renamed into place; a folder made by an older
  // version of the script is not reused.
  static const std::string* dir = [] {
    const std::string script = SourceDir() + "/scripts/make_test_ca.sh";
    auto* d = new std::string(::testing::TempDir() + "/ced_security_ca_" +
                              std::to_string(std::hash<std::string>()(ReadAll(script))));
    if (access((*d + "/untrusted.key").c_str(), R_OK) == 0) return d;
    const std::string tmp = *d + ".tmp" + std::to_string(getpid());
    const std::string cmd = "bash " + script + " " + tmp + " >/dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    if (std::rename(tmp.c_str(), d->c_str()) != 0) {  // another process was first
      (void)std::system(("rm -rf '" + tmp + "'").c_str());
    }
    return d;
  }();
  return *dir;
}
std::string Cert(const std::string& name) { return CertDir() + "/" + name; }

struct ClientIdentity {
  std::string ca;         // file; empty: plaintext channel
  std::string cert, key;  // files; empty: no client certificate
};

std::shared_ptr<grpc::Channel> Channel(const std::string& address, const ClientIdentity& id) {
  grpc::ChannelArguments args;
  // A fresh connection per channel: no test reuses another's handshake.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (id.ca.empty()) {
    return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ReadAll(id.ca);
  if (!id.cert.empty()) {
    o.pem_cert_chain = ReadAll(id.cert);
    o.pem_private_key = ReadAll(id.key);
  }
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(o), args);
}

std::chrono::system_clock::time_point In(int seconds) {
  return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

grpc::Status ListWorkersCall(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = ced::internal::Router::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(In(20));
  ced::internal::ListWorkersResponse resp;
  return stub->ListWorkers(&ctx, {}, &resp);
}

GenResult GenerateCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& token,
                       const ced::v1::GenerateRequest& req) {
  auto stub = ced::v1::Gateway::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(In(120));
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  auto reader = stub->Generate(&ctx, req);
  GenResult r;
  ced::v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    r.tokens.insert(r.tokens.end(), resp.token_ids().begin(), resp.token_ids().end());
    r.text += resp.text();
    r.last = resp;
  }
  r.status = reader->Finish();
  return r;
}

grpc::Status ModelInfoCall(const std::shared_ptr<grpc::Channel>& channel,
                           const std::string& authorization) {
  auto stub = ced::v1::Gateway::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(In(20));
  if (!authorization.empty()) ctx.AddMetadata("authorization", authorization);
  ced::v1::ModelInfoResponse resp;
  return stub->ModelInfo(&ctx, {}, &resp);
}

// grpc.health.v1.Health/Check("") through the generic stub: SERVING -> 1.
int HealthCheck(const std::shared_ptr<grpc::Channel>& channel, grpc::Status* status) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(In(20));
  grpc::Slice empty("", 0);
  grpc::ByteBuffer req(&empty, 1), resp;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", {}, &req, &resp, [&](grpc::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    *status = s;
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  if (!status->ok()) return -1;
  std::vector<grpc::Slice> slices;
  (void)resp.Dump(&slices);
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  // HealthCheckResponse{status = 1}: field 1, varint.
  return bytes.size() == 2 && bytes[0] == 0x08 ? bytes[1] : 0;
}

// Runs `ced client ...` and returns its exit code; output in *out.
int RunCedClient(const std::vector<std::string>& args, std::string* out) {
  services::SubprocessOptions ced;
  ced.argv = {CedBinary()};
  ced.argv.insert(ced.argv.end(), args.begin(), args.end());
  ced.stderr_to_stdout = true;
  absl::StatusOr<services::CompletedRun> run = services::RunToCompletion(std::move(ced), 120);
  EXPECT_TRUE(run.ok()) << run.status();
  *out = run.ok() ? run->output : std::string();
  return run.ok() && WIFEXITED(run->wait_status) ? WEXITSTATUS(run->wait_status) : -1;
}

// --- unit checks of the building blocks ------------------------------------------

TEST(SecurityTokensTest, MatchesOnlyConfiguredTokens) {
  const std::vector<std::string> tokens = {"alpha-1", "beta-22"};
  EXPECT_TRUE(services::TokenMatches(tokens, "alpha-1"));
  EXPECT_TRUE(services::TokenMatches(tokens, "beta-22"));
  EXPECT_FALSE(services::TokenMatches(tokens, "alpha-"));
  EXPECT_FALSE(services::TokenMatches(tokens, "alpha-12"));
  EXPECT_FALSE(services::TokenMatches(tokens, ""));
  EXPECT_FALSE(services::TokenMatches({}, "alpha-1"));
}

TEST(SecurityTokensTest, LoadsFileAndListAndRejectsBadOnes) {
  const std::string file = ::testing::TempDir() + "/ced_tokens_" + std::to_string(getpid());
  std::ofstream(file) << "# comment\n\n  tok-a  \ntok-b\n";
  auto t = services::LoadTokens(file, "tok-c, tok-d");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, (std::vector<std::string>{"tok-a", "tok-b", "tok-c", "tok-d"}));
  std::ofstream(file) << "# only a comment\n";
  EXPECT_NE(services::LoadTokens(file, "").status().message().find("holds no token"),
            std::string::npos);
  EXPECT_NE(
      services::LoadTokens(file + ".missing", "").status().message().find("--auth-tokens-file"),
      std::string::npos);
  std::remove(file.c_str());
}

TEST(SecurityConfigTest, BadFilesAreErrorsNamingTheFlag) {
  services::SecurityFiles f;
  f.cert = Cert("server.crt");
  auto r = services::LoadSecurity("router", f);
  EXPECT_NE(r.status().message().find("--tls-cert and --tls-key"), std::string::npos);
  f.key = Cert("client.key");  // another key
  r = services::LoadSecurity("router", f);
  EXPECT_NE(r.status().message().find("does not belong to --tls-cert"), std::string::npos)
      << r.status();
  f.key = Cert("server.key");
  f.ca = Cert("server.key");  // not a certificate
  r = services::LoadSecurity("router", f);
  EXPECT_NE(r.status().message().find("--tls-ca"), std::string::npos) << r.status();
  f.ca = Cert("missing.crt");
  r = services::LoadSecurity("router", f);
  EXPECT_NE(r.status().message().find("cannot read"), std::string::npos) << r.status();
  f.ca = Cert("ca.crt");
  r = services::LoadSecurity("router", f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->tls_server());
  EXPECT_FALSE(r->client_ca_pem.empty());  // internal: client certs required
  r = services::LoadSecurity("gateway", f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->client_ca_pem.empty());  // public: no client certs by default
  f.auth_tokens_env = "x";
  EXPECT_FALSE(services::LoadSecurity("router", f).ok());
}

TEST(SecurityCliTest, ServeRefusesBadTlsFlagsWithAClearError) {
  std::string out;
  EXPECT_EQ(RunCedClient({"serve", "--role=router", "--listen", "127.0.0.1:0", "--tls-cert",
                          Cert("server.crt")},
                         &out),
            2);
  EXPECT_NE(out.find("--tls-cert and --tls-key"), std::string::npos) << out;
  EXPECT_EQ(RunCedClient({"serve", "--role=router", "--listen", "127.0.0.1:0", "--tls-cert",
                          Cert("server.crt"), "--tls-key", Cert("untrusted.key")},
                         &out),
            2);
  EXPECT_NE(out.find("does not belong"), std::string::npos) << out;
  EXPECT_EQ(RunCedClient({"serve", "--role=router", "--auth-tokens-file", "/dev/null"}, &out), 2);
  EXPECT_NE(out.find("unknown flag --auth-tokens-file"), std::string::npos) << out;
  EXPECT_EQ(RunCedClient({"serve", "--role=decode", "--help"}, &out), 0);
  EXPECT_NE(out.find("--tls-ca"), std::string::npos) << out;
}

// A worker must register an address its peers can reach: listening on a
// wildcard host needs an explicit advertised address (item 15: listeners bind
// the configured interface, and the router never hands out 0.0.0.0).
TEST(SecurityCliTest, WorkersOnAWildcardAddressMustAdvertiseOne) {
  std::string out;
  EXPECT_EQ(RunCedClient({"serve", "--role=prefill", "--model", "/nonexistent", "--listen",
                          "0.0.0.0:0", "--router", "127.0.0.1:1"},
                         &out),
            1);
  EXPECT_NE(out.find("--advertise-address is required"), std::string::npos) << out;
  EXPECT_EQ(RunCedClient({"serve", "--role=decode", "--model", "/nonexistent", "--listen",
                          "127.0.0.1:0", "--kv-listen", "0.0.0.0:0", "--router", "127.0.0.1:1"},
                         &out),
            1);
  EXPECT_NE(out.find("--advertise-kv-address is required"), std::string::npos) << out;
  EXPECT_EQ(RunCedClient({"cluster", "--model", "/nonexistent", "--bind", "0.0.0.0"}, &out), 2);
  EXPECT_NE(out.find("--bind must be one interface's address"), std::string::npos) << out;
}

// --- one router process per certificate case -------------------------------------

struct RouterCase {
  std::string cert, key;  // the router's
  ClientIdentity client;
  bool connects;
  const char* what;
};

TEST(SecurityTlsTest, InternalListenerAcceptsOnlyTheInternalIdentity) {
  // The health-only listener does not print its port: take one that was free a moment ago.
  const std::string health = "127.0.0.1:" + std::to_string(metrics::testing::PickFreePort());
  ServiceProcess router({"--role=router", "--listen", "127.0.0.1:0", "--metrics-listen",
                         "127.0.0.1:0", "--tls-cert", Cert("server.crt"), "--tls-key",
                         Cert("server.key"), "--tls-ca", Cert("ca.crt"), "--health-listen",
                         health});
  ASSERT_TRUE(router.ready());
  // The plaintext health port answers health checks and nothing else.
  grpc::Status hs;
  EXPECT_EQ(HealthCheck(Channel(health, {}), &hs), 1) << hs.error_message();
  EXPECT_EQ(ListWorkersCall(Channel(health, {})).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  const ClientIdentity internal{Cert("ca.crt"), Cert("server.crt"), Cert("server.key")};
  EXPECT_TRUE(ListWorkersCall(Channel(router.grpc(), internal)).ok());
  const ClientIdentity client_cert{Cert("ca.crt"), Cert("client.crt"), Cert("client.key")};
  EXPECT_TRUE(ListWorkersCall(Channel(router.grpc(), client_cert)).ok());
  struct Bad {
    ClientIdentity id;
    const char* what;
  };
  for (const Bad& bad : {
           Bad{{"", "", ""}, "plaintext client"},
           Bad{{Cert("ca.crt"), "", ""}, "TLS client without a client certificate"},
           Bad{{Cert("ca.crt"), Cert("untrusted.crt"), Cert("untrusted.key")},
               "client certificate from an untrusted CA"},
           Bad{{Cert("ca.crt"), Cert("expired.crt"), Cert("expired.key")},
               "expired client certificate"},
           Bad{{Cert("other-ca.crt"), Cert("server.crt"), Cert("server.key")},
               "client trusting another CA"},
       }) {
    const grpc::Status s = ListWorkersCall(Channel(router.grpc(), bad.id));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE)
        << bad.what << ": " << s.error_message();
  }
  // The router still serves the internal identity afterwards.
  EXPECT_TRUE(ListWorkersCall(Channel(router.grpc(), internal)).ok());

  // The services' own channels (MakeChannel under the process's security):
  // --tls-server-name replaces the dialled host in the certificate check.
  services::SecurityFiles files;
  files.cert = Cert("server.crt");
  files.key = Cert("server.key");
  files.ca = Cert("ca.crt");
  for (const auto& [name, ok] : {std::pair<std::string, bool>{"", true},
                                 {"ced-internal", true},
                                 {"not-in-the-sans", false}}) {
    files.server_name = name;
    auto config = services::LoadSecurity("client", files);
    ASSERT_TRUE(config.ok()) << config.status();
    services::SetProcessSecurity(*config);
    const grpc::Status s = ListWorkersCall(services::MakeChannel(router.grpc()));
    EXPECT_EQ(s.ok(), ok) << "server name '" << name << "': " << s.error_message();
  }
  services::SetProcessSecurity({});
}

TEST(SecurityTlsTest, ServersWithExpiredOrUntrustedCertificatesAreRefused) {
  const ClientIdentity internal{Cert("ca.crt"), Cert("server.crt"), Cert("server.key")};
  for (const std::string name : {"expired", "untrusted"}) {
    ServiceProcess router({"--role=router", "--listen", "127.0.0.1:0", "--metrics-listen",
                           "127.0.0.1:0", "--tls-cert", Cert(name + ".crt"), "--tls-key",
                           Cert(name + ".key"), "--tls-ca", Cert("ca.crt")});
    ASSERT_TRUE(router.ready());
    const grpc::Status s = ListWorkersCall(Channel(router.grpc(), internal));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << name << ": " << s.error_message();
  }
}

// --- a whole cluster with mTLS inside and TLS + tokens at the gateway ------------

// Listening TCP sockets ("addr:port" as in /proc/net/tcp*, decoded) of `pid`.
std::vector<std::string> ListeningSockets(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = opendir(fd_dir.c_str())) {
    while (dirent* e = readdir(d)) {
      char target[256];
      const ssize_t n = readlink((fd_dir + "/" + e->d_name).c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = 0;
      std::string t(target);
      if (t.rfind("socket:[", 0) == 0) inodes.insert(t.substr(8, t.size() - 9));
    }
    closedir(d);
  }
  std::vector<std::string> out;
  for (const char* table : {"tcp", "tcp6"}) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/net/" + table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() < 10 || f[3] != "0A" || inodes.count(f[9]) == 0) continue;  // 0A: LISTEN
      const std::string& local = f[1];  // hex address : hex port
      const auto colon = local.find(':');
      const std::string hex = local.substr(0, colon);
      const int port = std::stoi(local.substr(colon + 1), nullptr, 16);
      std::string addr;
      if (hex.size() == 8) {  // IPv4, little-endian
        const unsigned v = std::stoul(hex, nullptr, 16);
        addr = std::to_string(v & 0xff) + "." + std::to_string((v >> 8) & 0xff) + "." +
               std::to_string((v >> 16) & 0xff) + "." + std::to_string(v >> 24);
      } else if (hex.rfind("0000000000000000FFFF0000", 0) == 0) {  // v4-mapped
        const unsigned v = std::stoul(hex.substr(24), nullptr, 16);
        addr = std::to_string(v & 0xff) + "." + std::to_string((v >> 8) & 0xff) + "." +
               std::to_string((v >> 16) & 0xff) + "." + std::to_string(v >> 24);
      } else {
        addr = hex == "00000000000000000000000001000000"   ? "[::1]"
               : hex == "00000000000000000000000000000000" ? "[::]"
                                                           : "[" + hex + "]";
      }
      out.push_back(addr + ":" + std::to_string(port));
    }
  }
  return out;
}

// Pids whose parent is `parent`.
std::vector<pid_t> Children(pid_t parent) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/stat");
    std::string stat;
    std::getline(in, stat);
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state;
    pid_t ppid;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(pid);
  }
  closedir(d);
  return out;
}

class SecurityClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cluster_ != nullptr) return;
    model_ = new std::string(MakeModelDir("tiny"));
    tokens_file_ = new std::string(CertDir() + "/tokens.txt");
    std::ofstream(*tokens_file_) << "# gateway tokens\nsecret-token-1\nsecret-token-2\n";
    cluster_ = new LocalCluster(
        *model_, {"--prefill", "1", "--decode", "1", "--kv-cache-mb", "64", "--tls-cert",
                  Cert("server.crt"), "--tls-key", Cert("server.key"), "--tls-ca", Cert("ca.crt"),
                  "--auth-tokens-file", *tokens_file_});
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete model_;
    delete tokens_file_;
    cluster_ = nullptr;
  }
  static std::string Addr(const std::string& name, const std::string& kind) {
    return cluster_->addresses().at(name).at(kind);
  }
  static inline std::string* model_ = nullptr;
  static inline std::string* tokens_file_ = nullptr;
  static inline LocalCluster* cluster_ = nullptr;
};

// A client with the CA and a token gets the colocated engine's tokens; without
// TLS, with another CA or without a valid token it gets nothing (health checks
// excepted); `ced client` does the same with --tls-ca / --auth-token.
TEST_F(SecurityClusterTest, GatewayAnswersOnlyTlsClientsWithAToken) {
  ASSERT_TRUE(cluster_->ready()) << cluster_->Log();
  const auto prompt = Prompt(40, 7);
  const auto expected = ColocatedEngine(*model_).Run(prompt, 12);
  auto channel = Channel(cluster_->gateway(), {Cert("ca.crt"), "", ""});
  const GenResult r =
      GenerateCall(channel, "secret-token-2", Request(prompt, 12, ced::v1::REPLAY_ON_DECODE));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\n" << cluster_->Log();
  EXPECT_EQ(r.tokens, expected);

  // Plaintext and wrong-CA clients: no connection at all.
  for (const ClientIdentity& id :
       {ClientIdentity{"", "", ""}, ClientIdentity{Cert("other-ca.crt"), "", ""}}) {
    const grpc::Status s = ModelInfoCall(Channel(cluster_->gateway(), id), "Bearer secret-token-1");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE)
        << (id.ca.empty() ? "plaintext" : "other CA") << ": " << s.error_message();
  }

  // Tokens: missing, unknown, a prefix of a good one, another scheme.
  grpc::Status s = ModelInfoCall(channel, "");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(s.error_message().find("missing bearer token"), std::string::npos) << s.error_message();
  s = ModelInfoCall(channel, "Bearer secret-token-3");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(s.error_message(), "invalid bearer token");
  s = ModelInfoCall(channel, "Basic c2VjcmV0");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  const GenResult g =
      GenerateCall(channel, "secret-token-", Request(Prompt(8, 1), 4, ced::v1::REPLAY_ON_DECODE));
  EXPECT_EQ(g.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(g.tokens.empty());
  EXPECT_TRUE(ModelInfoCall(channel, "Bearer secret-token-1").ok());

  // Health checks stay open.
  grpc::Status hs;
  EXPECT_EQ(HealthCheck(channel, &hs), 1) << hs.error_message();

  std::string out;
  EXPECT_EQ(RunCedClient({"client", "model-info", "--gateway", cluster_->gateway(), "--tls-ca",
                          Cert("ca.crt"), "--auth-token", "secret-token-1"},
                         &out),
            0)
      << out;
  EXPECT_NE(RunCedClient({"client", "model-info", "--gateway", cluster_->gateway(), "--tls-ca",
                          Cert("ca.crt")},
                         &out),
            0);
  EXPECT_NE(out.find("UNAUTHENTICATED"), std::string::npos) << out;
}

// The OpenAI-compatible HTTP API is served over TLS with the same
// certificate and the same bearer tokens as the gRPC API: an HTTPS client
// that trusts the CA and sends a token gets the text the gRPC API gives for
// the same prompt; without a token it gets 401 in OpenAI's error shape;
// plaintext HTTP and clients of another CA get no answer at all.
TEST_F(SecurityClusterTest, HttpApiAnswersOnlyTlsClientsWithAToken) {
  ASSERT_TRUE(cluster_->ready()) << cluster_->Log();
  const std::string http = Addr("gateway", "http");
  const auto colon = http.rfind(':');
  ASSERT_NE(colon, std::string::npos) << http;
  const std::string host = http.substr(0, colon);
  const int port = std::stoi(http.substr(colon + 1));
  const auto prompt = Prompt(40, 7);
  const GenResult grpc_result =
      GenerateCall(Channel(cluster_->gateway(), {Cert("ca.crt"), "", ""}), "secret-token-1",
                   Request(prompt, 12, ced::v1::REPLAY_ON_DECODE));
  ASSERT_TRUE(grpc_result.status.ok()) << grpc_result.status.error_message();

  nlohmann::json body = {
      {"prompt", prompt}, {"max_tokens", 12}, {"temperature", 0}, {"replay_on", "decode"}};
  auto https = [&](const std::string& ca) {
    auto client = std::make_unique<httplib::SSLClient>(host, port);
    client->set_ca_cert_path(ca.c_str());
    client->enable_server_certificate_verification(true);
    client->set_connection_timeout(20);
    client->set_read_timeout(60);
    return client;
  };
  {
    auto client = https(Cert("ca.crt"));
    const httplib::Headers auth = {{"Authorization", "Bearer secret-token-2"}};
    // The model list needs the token too; the health check does not.
    auto res = client->Get("/v1/models", auth);
    ASSERT_TRUE(res) << httplib::to_string(res.error()) << "\n" << cluster_->Log();
    ASSERT_EQ(res->status, 200) << res->body;
    body["model"] = nlohmann::json::parse(res->body)["data"][0]["id"];
    res = client->Get("/v1/models");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 401) << res->body;
    res = client->Get("/health");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200) << res->body;

    res = client->Post("/v1/completions", auth, body.dump(), "application/json");
    ASSERT_TRUE(res) << httplib::to_string(res.error()) << "\n" << cluster_->Log();
    ASSERT_EQ(res->status, 200) << res->body;
    const nlohmann::json reply = nlohmann::json::parse(res->body);
    EXPECT_EQ(reply["choices"][0]["text"], grpc_result.text) << res->body;
    EXPECT_EQ(reply["usage"]["completion_tokens"], 12) << res->body;

    // No token, an unknown one: 401 in OpenAI's shape, nothing generated.
    for (const httplib::Headers& h :
         {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer secret-token-3"}}}) {
      res = client->Post("/v1/completions", h, body.dump(), "application/json");
      ASSERT_TRUE(res) << httplib::to_string(res.error());
      EXPECT_EQ(res->status, 401) << res->body;
      const nlohmann::json error = nlohmann::json::parse(res->body, nullptr, false);
      ASSERT_TRUE(error.contains("error")) << res->body;
      EXPECT_EQ(error["error"]["type"], "authentication_error") << res->body;
      EXPECT_FALSE(error.contains("choices")) << res->body;
    }
  }
  // Plaintext HTTP on the TLS port: no HTTP answer.
  {
    httplib::Client plain(host, port);
    plain.set_connection_timeout(10);
    plain.set_read_timeout(10);
    auto res = plain.Get("/health");
    EXPECT_FALSE(res) << "plaintext HTTP got status " << res->status;
  }
  // A client that trusts another CA refuses the server's certificate.
  {
    auto client = https(Cert("other-ca.crt"));
    auto res = client->Get("/health");
    EXPECT_FALSE(res) << "a client of another CA got status " << res->status;
    if (!res) {
      EXPECT_EQ(res.error(), httplib::Error::SSLServerVerification);
    }
  }
}

// The internal tier only talks to the internal identity, and every listener
// of every service process (gRPC, /metrics, the UCX KV listener and UCX's own
// TCP listeners) is on the loopback interface `ced cluster` binds by default.
TEST_F(SecurityClusterTest, InternalTierNeedsTheInternalIdentityAndBindsLoopback) {
  ASSERT_TRUE(cluster_->ready()) << cluster_->Log();
  const ClientIdentity internal{Cert("ca.crt"), Cert("server.crt"), Cert("server.key")};
  EXPECT_TRUE(ListWorkersCall(Channel(Addr("router", "grpc"), internal)).ok());
  // Cancel on a decode worker (an operation of the internal tier) without the
  // internal identity: no connection, whatever the request.
  for (const ClientIdentity& id :
       {ClientIdentity{"", "", ""}, ClientIdentity{Cert("ca.crt"), "", ""},
        ClientIdentity{Cert("ca.crt"), Cert("untrusted.crt"), Cert("untrusted.key")}}) {
    auto stub = ced::internal::DecodeWorker::NewStub(Channel(Addr("decode-0", "grpc"), id));
    grpc::ClientContext ctx;
    ctx.set_deadline(In(20));
    ced::internal::CancelResponse resp;
    const grpc::Status st = stub->Cancel(&ctx, {}, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  }

  std::vector<pid_t> services;
  for (pid_t cluster : Children(getpid())) {
    for (pid_t p : Children(cluster)) services.push_back(p);
  }
  ASSERT_EQ(services.size(), 4u) << "router, prefill, decode, gateway";
  std::set<std::string> expected, seen;
  for (const auto& [name, kinds] : cluster_->addresses()) {
    for (const auto& [kind, address] : kinds) expected.insert(address);
  }
  for (pid_t p : services) {
    for (const std::string& sock : ListeningSockets(p)) {
      seen.insert(sock);
      EXPECT_TRUE(sock.rfind("127.0.0.1:", 0) == 0 || sock.rfind("[::1]:", 0) == 0)
          << "pid " << p << " listens on " << sock;
    }
  }
  // Every advertised listener (gRPC, metrics, KV) is among them.
  for (const std::string& a : expected) EXPECT_EQ(seen.count(a), 1u) << a;
}

// Drain, the workers' admin operation, answers only the internal identity;
// with it, the worker drains as on SIGTERM: it deregisters and exits.
TEST_F(SecurityClusterTest, DrainAnswersOnlyTheInternalIdentity) {
  ASSERT_TRUE(cluster_->ready()) << cluster_->Log();
  auto drain = [](const std::string& address, const ClientIdentity& id) {
    auto stub = ced::internal::PrefillWorker::NewStub(Channel(address, id));
    grpc::ClientContext ctx;
    ctx.set_deadline(In(20));
    ced::internal::DrainRequest req;
    req.set_reason("security test");
    ced::internal::DrainResponse resp;
    return stub->Drain(&ctx, req, &resp);
  };
  const std::string prefill = Addr("prefill-0", "grpc");
  for (const ClientIdentity& id :
       {ClientIdentity{"", "", ""}, ClientIdentity{Cert("ca.crt"), "", ""},
        ClientIdentity{Cert("ca.crt"), Cert("untrusted.crt"), Cert("untrusted.key")}}) {
    EXPECT_EQ(drain(prefill, id).error_code(), grpc::StatusCode::UNAVAILABLE);
  }
  auto services = [] {
    std::vector<pid_t> out;
    for (pid_t cluster : Children(getpid())) {
      for (pid_t p : Children(cluster)) out.push_back(p);
    }
    return out;
  };
  ASSERT_EQ(services().size(), 4u) << "the refused calls drained nothing";
  const ClientIdentity internal{Cert("ca.crt"), Cert("server.crt"), Cert("server.key")};
  const grpc::Status s = drain(prefill, internal);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(WaitUntil([&] { return services().size() == 3u; }, std::chrono::seconds(30)))
      << services().size() << " service processes\n"
      << cluster_->Log();
  // It drained and exited 0, as on SIGTERM (its supervisor reaps and reports it).
  EXPECT_TRUE(WaitUntil(
      [&] { return cluster_->Log().find("prefill-0 exited with status 0") != std::string::npos; },
      std::chrono::seconds(10)))
      << cluster_->Log();
}

// The admin FlushCache (`ced client flush-cache`) likewise: refused without
// the internal identity, answered with it.
TEST_F(SecurityClusterTest, FlushCacheAnswersOnlyTheInternalIdentity) {
  ASSERT_TRUE(cluster_->ready()) << cluster_->Log();
  auto flush = [](const std::string& address, const ClientIdentity& id,
                  ced::internal::FlushCacheResponse* resp) {
    auto stub = ced::internal::DecodeWorker::NewStub(Channel(address, id));
    grpc::ClientContext ctx;
    ctx.set_deadline(In(20));
    ced::internal::FlushCacheRequest req;
    req.set_reason("security test");
    return stub->FlushCache(&ctx, req, resp);
  };
  const std::string decode = Addr("decode-0", "grpc");
  ced::internal::FlushCacheResponse resp;
  for (const ClientIdentity& id :
       {ClientIdentity{"", "", ""}, ClientIdentity{Cert("ca.crt"), "", ""},
        ClientIdentity{Cert("ca.crt"), Cert("untrusted.crt"), Cert("untrusted.key")}}) {
    EXPECT_EQ(flush(decode, id, &resp).error_code(), grpc::StatusCode::UNAVAILABLE);
  }
  EXPECT_EQ(cluster_->Log().find("prefix cache flushed"), std::string::npos)
      << "a refused call flushed";
  const ClientIdentity internal{Cert("ca.crt"), Cert("server.crt"), Cert("server.key")};
  const grpc::Status s = flush(decode, internal, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.referenced_blocks(), 0);
  EXPECT_TRUE(
      WaitUntil([&] { return cluster_->Log().find("prefix cache flushed") != std::string::npos; },
                std::chrono::seconds(10)))
      << cluster_->Log();
}

// A gateway that embeds the router (--embed-router) serves it on an internal
// listener of its own: the workers register there with the internal identity
// and requests are served; the public side's bearer tokens open nothing there
// and a client without the internal certificate gets no connection.
TEST(SecurityEmbeddedRouterTest, EmbeddedRouterListenerNeedsTheInternalIdentity) {
  const std::string model = MakeModelDir("tiny");
  const std::string tokens = CertDir() + "/tokens-embedded.txt";
  std::ofstream(tokens) << "secret-token-1\n";
  LocalCluster cluster(
      model, {"--prefill", "1", "--decode", "1", "--kv-cache-mb", "64", "--embed-router",
              "--tls-cert", Cert("server.crt"), "--tls-key", Cert("server.key"), "--tls-ca",
              Cert("ca.crt"), "--auth-tokens-file", tokens});
  ASSERT_TRUE(cluster.ready()) << cluster.Log();
  const auto prompt = Prompt(40, 8);
  const GenResult r =
      GenerateCall(Channel(cluster.gateway(), {Cert("ca.crt"), "", ""}), "secret-token-1",
                   Request(prompt, 10, ced::v1::REPLAY_ON_DECODE));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message() << "\n" << cluster.Log();
  EXPECT_EQ(r.tokens, ColocatedEngine(model).Run(prompt, 10));

  const std::string router = cluster.addresses().at("router").at("grpc");
  const ClientIdentity internal{Cert("ca.crt"), Cert("server.crt"), Cert("server.key")};
  EXPECT_TRUE(ListWorkersCall(Channel(router, internal)).ok());
  for (const ClientIdentity& id :
       {ClientIdentity{"", "", ""}, ClientIdentity{Cert("ca.crt"), "", ""},
        ClientIdentity{Cert("ca.crt"), Cert("untrusted.crt"), Cert("untrusted.key")}}) {
    auto stub = ced::internal::Router::NewStub(Channel(router, id));
    grpc::ClientContext ctx;
    ctx.set_deadline(In(20));
    ctx.AddMetadata("authorization", "Bearer secret-token-1");
    ced::internal::RegisterRequest req;
    ced::internal::RegisterResponse resp;
    const grpc::Status st = stub->Register(&ctx, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE)
        << (id.ca.empty()     ? "plaintext"
            : id.cert.empty() ? "no client certificate"
                              : "untrusted")
        << ": " << st.error_message();
  }
  // The public listener is not the router: a token holder cannot register there.
  {
    auto stub =
        ced::internal::Router::NewStub(Channel(cluster.gateway(), {Cert("ca.crt"), "", ""}));
    grpc::ClientContext ctx;
    ctx.set_deadline(In(20));
    ctx.AddMetadata("authorization", "Bearer secret-token-1");
    ced::internal::RegisterRequest req;
    ced::internal::RegisterResponse resp;
    EXPECT_EQ(stub->Register(&ctx, req, &resp).error_code(), grpc::StatusCode::UNIMPLEMENTED);
  }
  std::remove(tokens.c_str());
}

}  // namespace
}  // namespace ced::testing
