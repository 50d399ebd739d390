#include "services/common/http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "services/common/host_port.h"

namespace ced::services {

absl::StatusOr<HttpResponse> HttpGet(const std::string& host_port, const std::string& path,
                                     absl::Duration timeout) {
  absl::StatusOr<HostPort> hp = ParseHostPort(host_port);
  if (!hp.ok()) return hp.status();
  std::string host = hp->host;
  if (host.empty() || host == "0.0.0.0" || host == "localhost") host = "127.0.0.1";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(hp->port);
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("'", host_port, "': not an IPv4 address"));
  }
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::UnavailableError("socket failed");
  timeval tv = absl::ToTimeval(timeout);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to ", host_port));
  }
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host, "\r\n\r\n");
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("GET ", host_port, path, ": write failed"));
  }
  std::string reply;
  char buf[16384];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) reply.append(buf, static_cast<size_t>(n));
  close(fd);
  const size_t body = reply.find("\r\n\r\n");
  if (body == std::string::npos || reply.size() < 12) {
    return absl::UnavailableError(absl::StrCat("GET ", host_port, path, ": no response"));
  }
  HttpResponse response;
  response.status = std::atoi(reply.c_str() + 9);  // "HTTP/1.x NNN"
  response.body = reply.substr(body + 4);
  return response;
}

}  // namespace ced::services
