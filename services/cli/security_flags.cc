#include "services/cli/security_flags.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "services/common/host_port.h"

namespace ced::cli {
namespace {

struct SecurityFlag {
  FlagSpec spec;
  const char* env;
  bool gateway_only = false;
  bool client_only = false;
  bool server_only = false;
};

const std::vector<SecurityFlag>& AllFlags() {
  static const auto* flags = new std::vector<SecurityFlag>{
      {{"tls-cert", "", "TLS certificate (PEM) of this process; env CED_TLS_CERT"},
       "CED_TLS_CERT"},
      {{"tls-key", "", "private key (PEM) of --tls-cert; env CED_TLS_KEY"}, "CED_TLS_KEY"},
      {{"tls-ca", "", "CA (PEM) that verifies peers: internal servers require client certs "
                      "signed by it, clients verify servers with it; env CED_TLS_CA"},
       "CED_TLS_CA"},
      {{"tls-server-name", "", "name expected in server certificates instead of the address "
                               "host; env CED_TLS_SERVER_NAME"},
       "CED_TLS_SERVER_NAME"},
      {{"public-client-ca", "", "gateway: require client certificates signed by this CA on the "
                                "public listener; env CED_PUBLIC_CLIENT_CA"},
       "CED_PUBLIC_CLIENT_CA", /*gateway_only=*/true},
      {{"auth-tokens-file", "", "gateway: bearer tokens, one per line; every call but health "
                                "checks needs one (also env CED_AUTH_TOKENS=a,b); env "
                                "CED_AUTH_TOKENS_FILE"},
       "CED_AUTH_TOKENS_FILE", /*gateway_only=*/true},
      {{"auth-token", "", "bearer token sent to the gateway; env CED_AUTH_TOKEN"},
       "CED_AUTH_TOKEN", false, /*client_only=*/true},
      {{"health-listen", "", "also serve grpc.health.v1.Health (only) in plaintext here, for "
                             "probes without TLS; env CED_HEALTH_LISTEN"},
       "CED_HEALTH_LISTEN", false, false, /*server_only=*/true},
  };
  return *flags;
}

bool Applies(const SecurityFlag& f, const std::string& role) {
  if (f.client_only) return role == "client";
  if (f.server_only) return role != "client" && role != "cluster";
  if (f.gateway_only) return role == "gateway" || role == "cluster";
  return true;
}

}  // namespace

std::vector<FlagSpec> SecurityFlagSpecs(const std::string& role) {
  std::vector<FlagSpec> out;
  for (const SecurityFlag& f : AllFlags()) {
    if (Applies(f, role)) out.push_back(f.spec);
  }
  return out;
}

absl::Status ExtractSecurityFlags(const std::string& role, std::vector<std::string>* args,
                                  std::map<std::string, std::string>* values) {
  std::vector<std::string> rest;
  std::map<std::string, bool> given;
  for (size_t i = 0; i < args->size(); ++i) {
    const std::string& a = (*args)[i];
    bool taken = false;
    for (const SecurityFlag& f : AllFlags()) {
      if (!Applies(f, role)) continue;
      const std::string flag = "--" + f.spec.name;
      if (a == flag) {
        if (i + 1 >= args->size()) {
          return absl::InvalidArgumentError(absl::StrCat("flag ", flag, " needs a value"));
        }
        (*values)[f.spec.name] = (*args)[++i];
      } else if (a.rfind(flag + "=", 0) == 0) {
        (*values)[f.spec.name] = a.substr(flag.size() + 1);
      } else {
        continue;
      }
      given[f.spec.name] = true;
      taken = true;
      break;
    }
    if (!taken) rest.push_back(a);
  }
  for (const SecurityFlag& f : AllFlags()) {
    if (!Applies(f, role) || given[f.spec.name]) continue;
    const char* env = std::getenv(f.env);
    (*values)[f.spec.name] = env != nullptr ? env : "";
  }
  *args = std::move(rest);
  return absl::OkStatus();
}

absl::Status InstallSecurity(const std::string& role,
                             const std::map<std::string, std::string>& values) {
  auto get = [&](const std::string& name) {
    auto it = values.find(name);
    return it == values.end() ? std::string() : it->second;
  };
  services::SecurityFiles files;
  files.cert = get("tls-cert");
  files.key = get("tls-key");
  files.ca = get("tls-ca");
  files.server_name = get("tls-server-name");
  files.health_listen = get("health-listen");
  if (role == "gateway") {
    files.public_client_ca = get("public-client-ca");
    files.auth_tokens_file = get("auth-tokens-file");
    const char* env = std::getenv("CED_AUTH_TOKENS");
    files.auth_tokens_env = env != nullptr ? env : "";
  }
  // `ced cluster` itself is only a client of the router.
  auto config = services::LoadSecurity(role == "cluster" ? "client" : role, files);
  if (!config.ok()) return config.status();
  if (role == "client") {
    const std::string token = get("auth-token");
    for (char c : token) {
      if (c < 0x21 || c > 0x7e) {
        return absl::InvalidArgumentError(
            "--auth-token: the token holds a space or a non-printable character");
      }
    }
    config->bearer_token = token;
  }
  services::SetProcessSecurity(*std::move(config));
  return absl::OkStatus();
}

std::string FlagValue(const std::vector<std::string>& args, const std::string& name,
                      const std::string& default_value) {
  std::string value = default_value;
  const std::string flag = "--" + name;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == flag && i + 1 < args.size()) {
      value = args[++i];
    } else if (args[i].rfind(flag + "=", 0) == 0) {
      value = args[i].substr(flag.size() + 1);
    }
  }
  return value;
}

std::string ConfineUcxToInterfaceOf(const std::string& listen_address) {
  if (std::getenv("UCX_NET_DEVICES") != nullptr) return "";
  absl::StatusOr<services::HostPort> hp = services::ParseHostPort(listen_address);
  if (!hp.ok()) return "";  // the listener itself reports a bad address
  std::string host = hp->host;
  if (host == "localhost") host = "127.0.0.1";
  in_addr v4{};
  in6_addr v6{};
  const bool is_v4 = inet_pton(AF_INET, host.c_str(), &v4) == 1;
  const bool is_v6 = !is_v4 && inet_pton(AF_INET6, host.c_str(), &v6) == 1;
  if (!is_v4 && !is_v6) return "";  // a name, or empty: left to UCX
  if ((is_v4 && v4.s_addr == htonl(INADDR_ANY)) || (is_v6 && IN6_IS_ADDR_UNSPECIFIED(&v6))) {
    return "";  // every interface was asked for
  }
  std::string device;
  if ((is_v4 && (ntohl(v4.s_addr) >> 24) == 127) || (is_v6 && IN6_IS_ADDR_LOOPBACK(&v6))) {
    device = "lo";
  } else {
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) return "";
    for (ifaddrs* a = list; a != nullptr && device.empty(); a = a->ifa_next) {
      if (a->ifa_addr == nullptr) continue;
      if (is_v4 && a->ifa_addr->sa_family == AF_INET &&
          reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr == v4.s_addr) {
        device = a->ifa_name;
      } else if (is_v6 && a->ifa_addr->sa_family == AF_INET6 &&
                 std::memcmp(&reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, &v6,
                             sizeof v6) == 0) {
        device = a->ifa_name;
      }
    }
    freeifaddrs(list);
  }
  if (!device.empty()) setenv("UCX_NET_DEVICES", device.c_str(), /*overwrite=*/0);
  return device;
}

std::string SecurityHelp(const std::string& role) {
  const std::string all = FormatHelp("", "", SecurityFlagSpecs(role));
  const std::string head = "Flags:\n";
  return "\nSecurity flags:\n" + all.substr(all.find(head) + head.size());
}

}  // namespace ced::cli
