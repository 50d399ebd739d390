// A blocking HTTP GET for tests (loopback only), over services::HttpGet.
#pragma once

#include <string>

#include "absl/time/time.h"
#include "services/common/http_get.h"

namespace ced::testing {

// Returns the body of GET http://host:port/path, or "" on any failure;
// `status` gets the status code (0 without a response).
inline std::string HttpGet(const std::string& host_port, const std::string& path,
                           int* status = nullptr) {
  const absl::StatusOr<services::HttpResponse> r =
      services::HttpGet(host_port, path, absl::Seconds(5));
  if (status != nullptr) *status = r.ok() ? r->status : 0;
  return r.ok() ? r->body : "";
}

}  // namespace ced::testing
