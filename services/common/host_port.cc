#include "services/common/host_port.h"

#include <cctype>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ced::services {

absl::StatusOr<HostPort> ParseHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("'", address, "' is not host:port"));
  }
  HostPort hp;
  hp.host = address.substr(0, colon);
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  uint32_t port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", address, "' has no valid port (0-65535)"));
  }
  hp.port = static_cast<uint16_t>(port);
  return hp;
}

absl::Status CheckPeerAddress(const std::string& flag, const std::string& address) {
  if (address.find("://") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, ": '", address, "' is a URL; give host:port (e.g. 127.0.0.1:50050)"));
  }
  const absl::StatusOr<HostPort> hp = ParseHostPort(address);
  if (!hp.ok())
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", hp.status().message()));
  if (hp->host.empty() || hp->port == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": '", address, "' needs a host and a port in 1-65535"));
  }
  // A host name, an IPv4 address or a bracketed IPv6 one: no paths, spaces
  // or brackets left inside (gRPC would report them as a failed DNS lookup).
  for (const char c : hp->host) {
    if (c == '/' || c == '[' || c == ']' || c == '@' ||
        std::isspace(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", address,
                                                     "' has a character a host cannot have ('",
                                                     std::string(1, c), "')"));
    }
  }
  return absl::OkStatus();
}

std::string FormatHostPort(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

}  // namespace ced::services
