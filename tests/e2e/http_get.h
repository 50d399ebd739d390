// A minimal blocking HTTP/1.0 GET for tests (loopback only).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace ced::testing {

// Returns the body of GET http://host:port/path, or "" on any failure.
inline std::string HttpGet(const std::string& host_port, const std::string& path,
                           int* status = nullptr) {
  const auto colon = host_port.rfind(':');
  std::string host = host_port.substr(0, colon);
  if (host == "0.0.0.0" || host.empty() || host == "localhost") host = "127.0.0.1";
  const int port = std::stoi(host_port.substr(colon + 1));
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: " + host + "\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return "";
  }
  std::string resp;
  char buf[8192];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) resp.append(buf, n);
  close(fd);
  if (status != nullptr) *status = resp.size() > 12 ? std::atoi(resp.c_str() + 9) : 0;
  const auto body = resp.find("\r\n\r\n");
  return body == std::string::npos ? "" : resp.substr(body + 4);
}

}  // namespace ced::testing
