#include "absl/strings/str_cat.h"
#include "services/kv_transport/cuda/cuda_transport.h"
#include "services/kv_transport/inproc/inproc_transport.h"
#include "services/kv_transport/transport.h"
#include "services/kv_transport/ucx/ucx_factory.h"

namespace ced::kv_transport {

absl::StatusOr<std::unique_ptr<KvTransport>> CreateKvTransport(const TransportOptions& options) {
  if (options.kind == "ucx") return ucx::CreateUcxTransport(options);
  if (options.kind == "inproc") return InprocTransport::Create(options);
  if (IsCudaTransportKind(options.kind)) return CreateCudaKvTransport(options);
  return absl::InvalidArgumentError(absl::StrCat("transport option 'kind': unknown value '",
                                                 options.kind, "' (expected ucx, inproc or nccl)"));
}

}  // namespace ced::kv_transport
