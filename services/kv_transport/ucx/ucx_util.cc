#include "services/kv_transport/ucx/ucx_util.h"

#include <netdb.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ced::kv_transport::ucx {

absl::StatusOr<HostPort> ParseHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("address '", address, "' is not host:port"));
  }
  HostPort hp;
  hp.host = address.substr(0, colon);
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  uint32_t port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("address '", address, "': bad port"));
  }
  hp.port = static_cast<uint16_t>(port);
  return hp;
}

std::string FormatHostPort(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<SockAddr> Resolve(const HostPort& hp, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* result = nullptr;
  const std::string port = std::to_string(hp.port);
  const int rc =
      getaddrinfo(hp.host.empty() ? nullptr : hp.host.c_str(), port.c_str(), &hints, &result);
  if (rc != 0 || result == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve '", hp.host, "': ", gai_strerror(rc)));
  }
  SockAddr out;
  out.length = static_cast<socklen_t>(std::min<size_t>(result->ai_addrlen, sizeof(out.storage)));
  std::memcpy(&out.storage, result->ai_addr, out.length);
  freeaddrinfo(result);
  return out;
}

uint16_t PortOf(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  }
  if (addr.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  }
  return 0;
}

bool MayUseSharedMemory(const std::string& tls) {
  if (!tls.empty() && tls[0] == '^') return true;
  for (absl::string_view name : absl::StrSplit(tls, ',')) {
    name = absl::StripAsciiWhitespace(name);
    if (name == "all" || name == "shm" || name == "sm" || name == "mm" || name == "posix" ||
        name == "sysv") {
      return true;
    }
  }
  return false;
}

absl::Status UcsError(absl::StatusCode code, const std::string& what, ucs_status_t status) {
  return absl::Status(code, absl::StrCat(what, ": ", ucs_status_string(status)));
}

void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void EncodeAckHeader(uint64_t send_id, absl::StatusCode code, uint32_t message_bytes,
                     uint8_t out[kAckHeaderBytes]) {
  PutU64(out, send_id);
  PutU64(out + 8, static_cast<uint64_t>(static_cast<uint32_t>(code)) |
                      static_cast<uint64_t>(message_bytes) << 32);
}

AckHeader DecodeAckHeader(const uint8_t in[kAckHeaderBytes]) {
  AckHeader ack;
  ack.send_id = GetU64(in);
  const uint64_t rest = GetU64(in + 8);
  const uint32_t code = static_cast<uint32_t>(rest);
  ack.code = code <= static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)
                 ? static_cast<absl::StatusCode>(code)
                 : absl::StatusCode::kUnknown;
  ack.message_bytes = std::min<uint32_t>(static_cast<uint32_t>(rest >> 32), kMaxAckMessageBytes);
  return ack;
}

}  // namespace ced::kv_transport::ucx
