#include "services/common/security.h"

#include <grpc/grpc_security.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <openssl/x509.h>

#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "services/common/host_port.h"

namespace ced::services {
namespace {

std::mutex g_mu;
SecurityConfig* g_config = nullptr;  // leaked on purpose: read by late threads

absl::StatusOr<std::string> ReadFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using X509Ptr = std::unique_ptr<X509, X509Deleter>;

std::unique_ptr<BIO, BioDeleter> MemBio(const std::string& pem) {
  return std::unique_ptr<BIO, BioDeleter>(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Every certificate in a PEM bundle; an error when there is none.
absl::StatusOr<std::vector<X509Ptr>> ParseCerts(const std::string& flag, const std::string& path,
                                                const std::string& pem) {
  auto bio = MemBio(pem);
  std::vector<X509Ptr> certs;
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) certs.emplace_back(x);
  if (certs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", path, "': no PEM certificate (BEGIN CERTIFICATE) in the file"));
  }
  return certs;
}

void WarnIfNotValidNow(const std::string& flag, const std::string& path, X509* cert) {
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) {
    std::fprintf(stderr, "warning: %s '%s': the certificate has expired; peers will refuse it\n",
                 flag.c_str(), path.c_str());
  } else if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0) {
    std::fprintf(stderr, "warning: %s '%s': the certificate is not valid yet\n", flag.c_str(),
                 path.c_str());
  }
}

// Reads --tls-cert/--tls-key and checks that the key belongs to the cert.
absl::Status LoadKeyPair(const SecurityFiles& files, std::string* cert_pem, std::string* key_pem) {
  auto cert = ReadFile("--tls-cert", files.cert);
  if (!cert.ok()) return cert.status();
  auto key = ReadFile("--tls-key", files.key);
  if (!key.ok()) return key.status();
  auto certs = ParseCerts("--tls-cert", files.cert, *cert);
  if (!certs.ok()) return certs.status();
  auto bio = MemBio(*key);
  std::unique_ptr<EVP_PKEY, KeyDeleter> pkey(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (pkey == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-key '", files.key,
                     "': no unencrypted PEM private key (BEGIN PRIVATE KEY) in the file"));
  }
  if (X509_check_private_key((*certs)[0].get(), pkey.get()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-key '", files.key, "' does not belong to --tls-cert '", files.cert, "'"));
  }
  WarnIfNotValidNow("--tls-cert", files.cert, (*certs)[0].get());
  *cert_pem = *std::move(cert);
  *key_pem = *std::move(key);
  return absl::OkStatus();
}

absl::StatusOr<std::string> LoadCa(const std::string& flag, const std::string& path) {
  auto pem = ReadFile(flag, path);
  if (!pem.ok()) return pem.status();
  auto certs = ParseCerts(flag, path, *pem);
  if (!certs.ok()) return certs.status();
  return pem;
}

std::string Sha256(const std::string& s) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d);
  return std::string(reinterpret_cast<char*>(d), sizeof d);
}

// The server-side bearer-token check, run by gRPC's auth filter before any
// handler. Health checks stay open (probes and load balancers).
struct TokenProcessor {
  std::vector<std::string> digests;  // SHA-256 of each accepted token

  static void Process(void* state, grpc_auth_context* /*context*/, const grpc_metadata* md,
                      size_t num_md, grpc_process_auth_metadata_done_cb cb, void* user_data) {
    const auto* self = static_cast<const TokenProcessor*>(state);
    absl::string_view path, auth;
    const grpc_metadata* auth_md = nullptr;
    for (size_t i = 0; i < num_md; ++i) {
      absl::string_view key(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(md[i].key)),
                            GRPC_SLICE_LENGTH(md[i].key));
      absl::string_view value(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(md[i].value)),
                              GRPC_SLICE_LENGTH(md[i].value));
      if (key == ":path") path = value;
      if (key == "authorization") {
        auth = value;
        auth_md = &md[i];
      }
    }
    if (absl::StartsWith(path, "/grpc.health.v1.Health/")) {
      cb(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
      return;
    }
    if (auth_md == nullptr) {
      cb(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_UNAUTHENTICATED,
         "missing bearer token: send the metadata 'authorization: Bearer <token>'");
      return;
    }
    absl::string_view token = auth;
    if (!absl::ConsumePrefix(&token, "Bearer ") && !absl::ConsumePrefix(&token, "bearer ")) {
      cb(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_UNAUTHENTICATED,
         "the 'authorization' metadata must be 'Bearer <token>'");
      return;
    }
    const std::string digest = Sha256(std::string(token));
    int match = 0;
    for (const std::string& d : self->digests) {
      match |= CRYPTO_memcmp(d.data(), digest.data(), digest.size()) == 0 ? 1 : 0;
    }
    if (match == 0) {
      cb(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_UNAUTHENTICATED, "invalid bearer token");
      return;
    }
    // The token is consumed: handlers never see it.
    cb(user_data, auth_md, 1, nullptr, 0, GRPC_STATUS_OK, nullptr);
  }
  static void Destroy(void* state) { delete static_cast<TokenProcessor*>(state); }
};

// The health-only listener: health checks pass, every other call is refused.
void HealthOnlyProcess(void* /*state*/, grpc_auth_context* /*context*/, const grpc_metadata* md,
                       size_t num_md, grpc_process_auth_metadata_done_cb cb, void* user_data) {
  for (size_t i = 0; i < num_md; ++i) {
    absl::string_view key(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(md[i].key)),
                          GRPC_SLICE_LENGTH(md[i].key));
    absl::string_view value(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(md[i].value)),
                            GRPC_SLICE_LENGTH(md[i].value));
    if (key == ":path" && absl::StartsWith(value, "/grpc.health.v1.Health/")) {
      cb(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
      return;
    }
  }
  cb(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_UNAUTHENTICATED,
     "this port serves grpc.health.v1.Health only");
}

// ServerCredentials over core credentials, so that a token processor can be
// attached to plaintext listeners too (grpc::InsecureServerCredentials()
// refuses one).
class CoreServerCredentials final : public grpc::ServerCredentials {
 public:
  explicit CoreServerCredentials(grpc_server_credentials* creds) : creds_(creds) {}
  ~CoreServerCredentials() override { grpc_server_credentials_release(creds_); }
  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {
    std::fprintf(stderr, "ced: SetAuthMetadataProcessor is not supported here\n");
    std::abort();
  }

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    return grpc_server_add_http2_port(server, addr.c_str(), creds_);
  }
  grpc_server_credentials* const creds_;
};

}  // namespace

void SetProcessSecurity(SecurityConfig config) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_config = new SecurityConfig(std::move(config));
}

SecurityConfig ProcessSecurity() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_config == nullptr ? SecurityConfig{} : *g_config;
}

absl::StatusOr<std::vector<std::string>> LoadTokens(const std::string& file,
                                                    const std::string& comma_list) {
  std::vector<std::string> tokens;
  if (!file.empty()) {
    auto text = ReadFile("--auth-tokens-file", file);
    if (!text.ok()) return text.status();
    for (absl::string_view line : absl::StrSplit(*text, '\n')) {
      line = absl::StripAsciiWhitespace(line);
      if (line.empty() || line[0] == '#') continue;
      tokens.emplace_back(line);
    }
    if (tokens.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auth-tokens-file '", file, "' holds no token"));
    }
  }
  for (absl::string_view t : absl::StrSplit(comma_list, ',', absl::SkipWhitespace())) {
    tokens.emplace_back(absl::StripAsciiWhitespace(t));
  }
  for (const std::string& t : tokens) {
    for (char c : t) {
      if (c < 0x21 || c > 0x7e) {
        return absl::InvalidArgumentError(
            "auth tokens: a token holds a space or a non-printable character");
      }
    }
  }
  return tokens;
}

SecurityConfig InternalServerSecurity(const SecurityConfig& process) {
  SecurityConfig c = process;
  c.client_ca_pem = c.tls_server() ? c.ca_pem : "";
  c.bearer_tokens.clear();
  c.health_address.clear();
  return c;
}

absl::StatusOr<SecurityConfig> LoadSecurity(const std::string& role, const SecurityFiles& files) {
  const bool server =
      role == "gateway" || role == "router" || role == "prefill" || role == "decode";
  const bool gateway = role == "gateway";
  SecurityConfig c;
  if (files.cert.empty() != files.key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key must be given together");
  }
  if (!gateway && !files.public_client_ca.empty()) {
    return absl::InvalidArgumentError("--public-client-ca is a flag of the gateway only");
  }
  if (!gateway && (!files.auth_tokens_file.empty() || !files.auth_tokens_env.empty()) &&
      role != "client") {
    return absl::InvalidArgumentError(
        "--auth-tokens-file / CED_AUTH_TOKENS are settings of the gateway only");
  }
  std::string cert, key;
  if (!files.cert.empty()) {
    if (absl::Status s = LoadKeyPair(files, &cert, &key); !s.ok()) return s;
  }
  std::string ca;
  if (!files.ca.empty()) {
    auto loaded = LoadCa("--tls-ca", files.ca);
    if (!loaded.ok()) return loaded.status();
    ca = *std::move(loaded);
  }
  if (server) {
    if (!ca.empty() && cert.empty()) {
      return absl::InvalidArgumentError(
          "--tls-ca needs --tls-cert and --tls-key: a server verifies its peers only over TLS");
    }
    c.server_cert_pem = cert;
    c.server_key_pem = key;
    if (gateway) {
      if (!files.public_client_ca.empty()) {
        if (cert.empty()) {
          return absl::InvalidArgumentError("--public-client-ca needs --tls-cert and --tls-key");
        }
        auto pca = LoadCa("--public-client-ca", files.public_client_ca);
        if (!pca.ok()) return pca.status();
        c.client_ca_pem = *std::move(pca);
      }
      auto tokens = LoadTokens(files.auth_tokens_file, files.auth_tokens_env);
      if (!tokens.ok()) return tokens.status();
      c.bearer_tokens = *std::move(tokens);
    } else {
      c.client_ca_pem = ca;
    }
  }
  c.tls_client = !ca.empty() || !cert.empty();
  c.ca_pem = ca;
  c.client_cert_pem = cert;
  c.client_key_pem = key;
  c.server_name = files.server_name;
  if (!files.health_listen.empty()) {
    if (!server) return absl::InvalidArgumentError("--health-listen is a flag of the services");
    if (absl::StatusOr<HostPort> hp = ParseHostPort(files.health_listen); !hp.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--health-listen: ", hp.status().message()));
    }
    c.health_address = files.health_listen;
  }
  return c;
}

std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const SecurityConfig& config) {
  if (!config.tls_server() && config.bearer_tokens.empty()) {
    return grpc::InsecureServerCredentials();
  }
  grpc_server_credentials* creds = nullptr;
  if (config.tls_server()) {
    grpc_ssl_pem_key_cert_pair pair{config.server_key_pem.c_str(), config.server_cert_pem.c_str()};
    const bool verify = !config.client_ca_pem.empty();
    creds = grpc_ssl_server_credentials_create_ex(
        verify ? config.client_ca_pem.c_str() : nullptr, &pair, 1,
        verify ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
               : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
        nullptr);
  } else {
    creds = grpc_insecure_server_credentials_create();
  }
  if (!config.bearer_tokens.empty()) {
    auto* state = new TokenProcessor;
    for (const std::string& t : config.bearer_tokens) state->digests.push_back(Sha256(t));
    grpc_auth_metadata_processor p{};
    p.process = &TokenProcessor::Process;
    p.destroy = &TokenProcessor::Destroy;
    p.state = state;
    grpc_server_credentials_set_auth_metadata_processor(creds, p);
  }
  return std::make_shared<CoreServerCredentials>(creds);
}

std::shared_ptr<grpc::ServerCredentials> MakeHealthOnlyServerCredentials() {
  grpc_server_credentials* creds = grpc_insecure_server_credentials_create();
  grpc_auth_metadata_processor p{};
  p.process = &HealthOnlyProcess;
  grpc_server_credentials_set_auth_metadata_processor(creds, p);
  return std::make_shared<CoreServerCredentials>(creds);
}

std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const SecurityConfig& config) {
  if (!config.tls_client) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = config.ca_pem;
  o.pem_private_key = config.client_key_pem;
  o.pem_cert_chain = config.client_cert_pem;
  return grpc::SslCredentials(o);
}

namespace {

class BearerInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerInterceptor(const std::string* value) : value_(value) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", *value_});
    }
    methods->Proceed();
  }

 private:
  const std::string* const value_;
};

class BearerInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerInterceptorFactory(std::string token) : value_("Bearer " + std::move(token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new BearerInterceptor(&value_);
  }

 private:
  const std::string value_;
};

}  // namespace

std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
MakeClientInterceptors(const SecurityConfig& config) {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> out;
  if (!config.bearer_token.empty()) {
    out.push_back(std::make_unique<BearerInterceptorFactory>(config.bearer_token));
  }
  return out;
}

bool TokenMatches(const std::vector<std::string>& tokens, const std::string& presented) {
  const std::string digest = Sha256(presented);
  int match = 0;
  for (const std::string& t : tokens) {
    const std::string d = Sha256(t);
    match |= CRYPTO_memcmp(d.data(), digest.data(), digest.size()) == 0 ? 1 : 0;
  }
  return match != 0;
}

}  // namespace ced::services
