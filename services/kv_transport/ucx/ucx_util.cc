#include "services/kv_transport/ucx/ucx_util.h"

#include <netdb.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ced::kv_transport::ucx {

absl::StatusOr<SockAddr> Resolve(const services::HostPort& hp, bool passive) {
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

namespace {

// "#   lane[1]:  2:sysv/memory.0 md[1]  -> md[1]/sysv/sysdev[255] am am_bw#0 keepalive"
void ParseLane(absl::string_view line, std::set<std::string>* am, std::set<std::string>* am_bw,
               std::set<std::string>* rndv) {
  std::vector<absl::string_view> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
  std::string transport;
  for (absl::string_view w : words) {
    const auto colon = w.find(':');
    if (colon != absl::string_view::npos && w.find('/') != absl::string_view::npos &&
        transport.empty() && !absl::StartsWith(w, "lane")) {
      transport = std::string(absl::StripSuffix(w.substr(colon + 1), ".0"));
    }
  }
  if (transport.empty()) return;
  for (absl::string_view w : words) {
    if (w == "am") am->insert(transport);
    if (absl::StartsWith(w, "am_bw")) am_bw->insert(transport);
    if (absl::StartsWith(w, "rma_bw")) rndv->insert(transport);
  }
}

}  // namespace

EpLanes DescribeLanes(ucp_ep_h ep) {
  char* text = nullptr;
  size_t size = 0;
  FILE* stream = open_memstream(&text, &size);
  EpLanes lanes;
  if (stream == nullptr) return lanes;
  ucp_ep_print_info(ep, stream);
  std::fclose(stream);
  std::set<std::string> am, am_bw, rndv;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text, size), '\n')) {
    if (line.find("lane[") != absl::string_view::npos) ParseLane(line, &am, &am_bw, &rndv);
    const auto pos = line.find("am_send:");
    if (pos != absl::string_view::npos) {
      lanes.am_protocols = std::string(absl::StripAsciiWhitespace(line.substr(pos + 8)));
    }
  }
  std::free(text);
  lanes.am = absl::StrJoin(am, " + ");
  // Without RMA lanes UCX runs the rendezvous protocol over the bulk
  // active-message lanes.
  lanes.rndv = rndv.empty() ? absl::StrJoin(am_bw, " + ") : absl::StrJoin(rndv, " + ");
  lanes.rndv_rma = !rndv.empty();
  return lanes;
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

void EncodeAckHeader(const AckHeader& ack, uint8_t out[kAckHeaderBytes]) {
  PutU64(out, ack.send_id);
  PutU64(out + 8, ack.conn_id);
  PutU64(out + 16, ack.conn_secret);
  PutU64(out + 24, static_cast<uint64_t>(static_cast<uint32_t>(ack.code)) |
                       static_cast<uint64_t>(ack.message_bytes) << 32);
  PutU64(out + 32, ack.flags);
}

AckHeader DecodeAckHeader(const uint8_t in[kAckHeaderBytes]) {
  AckHeader ack;
  ack.send_id = GetU64(in);
  ack.conn_id = GetU64(in + 8);
  ack.conn_secret = GetU64(in + 16);
  const uint64_t rest = GetU64(in + 24);
  const uint32_t code = static_cast<uint32_t>(rest);
  ack.code = code <= static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)
                 ? static_cast<absl::StatusCode>(code)
                 : absl::StatusCode::kUnknown;
  ack.message_bytes = std::min<uint32_t>(static_cast<uint32_t>(rest >> 32), kMaxAckMessageBytes);
  ack.flags = static_cast<uint32_t>(GetU64(in + 32));
  return ack;
}

}  // namespace ced::kv_transport::ucx
