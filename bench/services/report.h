// The services bench report: a markdown page for people and a JSON document
// for tools, from the raw samples of one run. Pure functions.
#pragma once

#include <optional>
#include <string>

#include "bench/services/gateway_bench.h"
#include "bench/services/kv_bytes_bench.h"
#include "bench/services/transport_bench.h"
#include "bench/services/ttft_bench.h"

namespace ced::bench {

struct MachineFacts {
  std::string cpu_model;
  int logical_cores = 0;
  double mem_total_gib = 0;
  std::string kernel;
  std::string load_start, load_end;  // /proc/loadavg's first three fields
  std::string ucx_version;
  std::string ucx_tls_env;  // UCX_TLS of the bench's environment ("" = unset)
};
MachineFacts CollectMachineFacts();

struct ServicesReport {
  std::string command, date_utc;
  double wall_s = 0;
  bool quick = false;
  MachineFacts machine;
  std::optional<TransportReport> transport;
  std::optional<TtftReport> ttft;
  std::optional<GatewayReport> gateway;
  std::optional<KvBytesReport> kv_bytes;
};

std::string FormatMarkdown(const ServicesReport& report);
std::string FormatJson(const ServicesReport& report);

}  // namespace ced::bench
