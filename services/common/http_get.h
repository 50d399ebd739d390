// A minimal blocking HTTP/1.0 GET, for scraping /metrics and probing health
// endpoints on this machine from the benches and the tests. Thread-safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ced::services {

struct HttpResponse {
  int status = 0;  // the status line's code
  std::string body;
};

// GET http://`host_port``path` over IPv4; an empty, 0.0.0.0 or localhost host
// means 127.0.0.1. Blocks until the server closes the connection; each read
// waits at most `timeout`. UNAVAILABLE when it cannot connect or the reply
// has no header; any status code is a response.
absl::StatusOr<HttpResponse> HttpGet(const std::string& host_port, const std::string& path,
                                     absl::Duration timeout = absl::Seconds(10));

}  // namespace ced::services
