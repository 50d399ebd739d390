// The engine bench report: a markdown page for people and a JSON document
// for tools, from the raw samples of one run. Pure functions.
#pragma once

#include <string>
#include <vector>

#include "bench/engine/decode_bench.h"
#include "bench/engine/machine.h"
#include "bench/engine/prefill_bench.h"
#include "bench/engine/replay_error_bench.h"
#include "engine/model/config.h"

namespace ced::bench {

struct RunContext {
  std::string command;   // the exact command line
  std::string date_utc;  // ISO 8601
  double wall_s = 0;     // whole run
  bool quick = false;
  MachineInfo machine;
  ModelConfig ced_config, dec_config;
  std::string kv_format;
  int block_size = 0;
};

struct BenchReport {
  RunContext context;
  bool has_prefill = false, has_decode = false;
  PrefillReport prefill;
  DecodeReport decode;
  std::vector<ReplayErrorRow> replay;
};

std::string FormatMarkdown(const BenchReport& report);
std::string FormatJson(const BenchReport& report);

}  // namespace ced::bench
