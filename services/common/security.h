// Transport security and authentication of the ced services: TLS / mutual
// TLS for every gRPC listener and channel, and bearer tokens at the gateway.
//
// A process has one identity: `ced serve --role=...` loads it once from
// --tls-cert/--tls-key/--tls-ca (or CED_TLS_CERT/KEY/CA) and installs it with
// SetProcessSecurity(); every RunningServer and MakeChannel() of the process
// then uses it. The default (nothing set) is plaintext without tokens.
//
//   internal servers (router, prefill, decode): TLS with the cert/key; with a
//     CA, clients MUST present a certificate that the CA signed (mTLS), so
//     every internal RPC (Register, Deregister, Route, Reserve, Cancel, ...)
//     needs the internal identity.
//   public server (gateway): TLS with the cert/key; client certificates only
//     when a public client CA is given; bearer tokens when tokens are given.
//   channels: TLS when a CA or a cert is set; the server is verified against
//     the CA (the address host, or `server_name`, must be in its SANs) and the
//     cert/key is presented as the client certificate.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_interceptor.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ced::services {

struct SecurityConfig {
  // Server side. Empty cert: plaintext listener.
  std::string server_cert_pem, server_key_pem;
  // Non-empty: TLS clients must present a certificate signed by this CA.
  std::string client_ca_pem;
  // Non-empty: every call except grpc.health.v1.Health needs the metadata
  // "authorization: Bearer <one of these>" (else UNAUTHENTICATED).
  std::vector<std::string> bearer_tokens;

  // Client side (MakeChannel). TLS when `tls_client` is set.
  bool tls_client = false;
  std::string ca_pem;                           // empty: the system roots
  std::string client_cert_pem, client_key_pem;  // presented when set
  std::string server_name;                      // non-empty: expected name in server certs
  std::string bearer_token;                     // sent on every call (MakeClientInterceptors)

  // Non-empty: RunningServer also listens here in plaintext for
  // grpc.health.v1.Health only (every other method: UNAUTHENTICATED), for
  // probes that cannot speak TLS (kubelet's native gRPC probes).
  std::string health_address;

  bool tls_server() const { return !server_cert_pem.empty(); }
};

// Installs / returns the process's configuration (thread-safe; set it before
// starting servers or making channels).
void SetProcessSecurity(SecurityConfig config);
SecurityConfig ProcessSecurity();

// Where a process's security comes from: file paths (flags or environment).
struct SecurityFiles {
  std::string cert, key, ca;     // --tls-cert, --tls-key, --tls-ca
  std::string public_client_ca;  // --public-client-ca (gateway only)
  std::string server_name;       // --tls-server-name
  std::string auth_tokens_file;  // --auth-tokens-file (gateway only)
  std::string auth_tokens_env;   // CED_AUTH_TOKENS: comma-separated
  std::string health_listen;     // --health-listen
};

// Reads and checks the files (PEM certificates, the key matching the
// certificate, the token file) into a config for a server of `role`
// ("gateway" is the public one; "router", "prefill", "decode" internal;
// "client" / "cluster": channels only). Errors name the flag at fault.
absl::StatusOr<SecurityConfig> LoadSecurity(const std::string& role, const SecurityFiles& files);

// The configuration of an internal listener in a process whose own is
// `process` (a gateway that embeds the router): the same certificate, peers
// must present one the internal CA (`ca_pem`) signed, no bearer tokens, no
// health-only listener. Equals what LoadSecurity("router", ...) makes of the
// same files.
SecurityConfig InternalServerSecurity(const SecurityConfig& process);

// Credentials for a listener / a channel under `config`.
std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const SecurityConfig& config);
// Plaintext credentials that let only grpc.health.v1.Health calls through.
std::shared_ptr<grpc::ServerCredentials> MakeHealthOnlyServerCredentials();
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(const SecurityConfig& config);

// Interceptors that add "authorization: Bearer <token>" to every call when
// `config` has a client token (works over plaintext channels too, unlike
// gRPC's call credentials); empty otherwise.
std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
MakeClientInterceptors(const SecurityConfig& config);

// True when `presented` equals one of `tokens`. Takes the same time whatever
// the tokens' contents (digests compared with CRYPTO_memcmp, every token
// checked).
bool TokenMatches(const std::vector<std::string>& tokens, const std::string& presented);

// Tokens from a file (one per line; blank lines and '#' comments skipped) and
// a comma-separated list; errors name the source.
absl::StatusOr<std::vector<std::string>> LoadTokens(const std::string& file,
                                                    const std::string& comma_list);

}  // namespace ced::services
