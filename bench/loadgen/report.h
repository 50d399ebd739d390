// Output of the load generator: a JSON document and a markdown table over
// one or more runs (targets × rates). Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "bench/loadgen/runner.h"
#include "bench/loadgen/stats.h"
#include "bench/loadgen/workload.h"

namespace ced::loadgen {

// One run against one target at one load.
struct RunSummary {
  std::string label;   // the target's name (e.g. "ced", "dec")
  std::string target;  // host:port
  // From the gateway's ModelInfo (empty / 0 when unknown).
  std::string model_name;
  int num_layers = 0, num_encoder_layers = 0;
  bool decoder_only = false;
  double rate = 0;      // offered Poisson rate, requests/s (0 in closed loop)
  int concurrency = 0;  // closed-loop concurrency (0 in open loop)
  RunReport report;
  std::vector<RequestRecord> records;  // written to JSON only when asked
};

struct ReportContext {
  WorkloadOptions workload;  // prompts are summarised by count, not written
  RunOptions run;            // bounds and request settings (target unused)
  std::string prompt_file;   // empty for random-token prompts
  bool include_records = false;
};

// {"workload": {...}, "run": {...}, "slo": {...}, "runs": [{...}, ...]},
// latencies in milliseconds, rates per second.
std::string ReportJson(const ReportContext& context, const std::vector<RunSummary>& runs);

// A markdown table, one row per run; a second one splitting TTFT by the
// gateway's timings; then an errors line per run that had errors.
std::string ReportMarkdown(const std::vector<RunSummary>& runs);

// "tiny (CED 4+4)" / "tiny-dec (decoder-only 8)"; the name alone when the
// layers are unknown (the OpenAI API's /v1/models gives only the name); "?"
// without a name.
std::string ModelLabel(const std::string& model_name, int num_layers, int num_encoder_layers,
                       bool decoder_only);

}  // namespace ced::loadgen
