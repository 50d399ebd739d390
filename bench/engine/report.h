// The engine bench report: a JSON document for tools and a markdown page for
// people, rendered from that JSON (so the page can be rebuilt from the
// document alone). Pure functions.
//
// Fractions of a machine bound (FMA peak, memory roofline) divide each
// repetition's figure by the BEST probe sample of the run (the STREAM
// convention): on a noisy machine they are conservative.
#pragma once

#include <string>
#include <vector>

#include "bench/engine/decode_bench.h"
#include "bench/engine/machine.h"
#include "bench/engine/prefill_bench.h"
#include "bench/engine/replay_error_bench.h"
#include "bench/engine/resume_error_bench.h"
#include "engine/model/config.h"
#include "nlohmann/json.hpp"

namespace ced::bench {

struct RunContext {
  std::string command;   // the exact command line, with the environment that matters
  std::string date_utc;  // ISO 8601
  double wall_s = 0;     // whole run
  bool quick = false;
  std::string load_start, load_end;  // /proc/loadavg (1, 5, 15 min)
  MachineInfo machine;
  ModelConfig ced_config;
  // Where the prefill/decode models came from: empty = the synthetic presets
  // small / small-dec; else "CED_DIR, DEC_DIR" (--ced_model, --dec_model).
  std::string model_dirs;
  std::string kv_format;
  int block_size = 0;
};

struct BenchReport {
  RunContext context;
  bool has_prefill = false, has_decode = false;
  PrefillReport prefill;
  DecodeReport decode;
  std::vector<ReplayErrorRow> replay;
  std::vector<ResumeErrorRow> resume;  // section "resume" (report_resume.cc)
  std::vector<AtRestRow> at_rest;      // section "resume" too
  // Prefill rerun in a child process with another OpenBLAS kernel set: the
  // child's JSON document; null when not run.
  std::string alt_blas_core;
  nlohmann::ordered_json alt_report;
  // Prefill and decode rerun in child processes, one per other CPU kernel
  // variant this CPU supports (CED_CPU_ISA=<variant>): the children's JSON
  // documents, in variant order.
  std::vector<nlohmann::ordered_json> variant_reports;
  // blas_compare's output (the engine's GEMM per variant vs OpenBLAS and
  // oneDNN on the same shapes), run as a child process; empty when not run.
  std::string peer_gemm_command;
  std::string peer_gemm_table;
};

// "avx512" for OpenBLAS kernel sets built on AVX-512 FMAs (SkylakeX,
// Cooperlake, SapphireRapids), else "avx2".
std::string BlasIsa(const std::string& blas_core);
// "avx512", "avx2" or "generic": the CPU kernel variant this process runs.
std::string KernelIsa();

nlohmann::ordered_json BuildJson(const BenchReport& report);
// The "resume_error" rows and their markdown section (report_resume.cc).
nlohmann::ordered_json ResumeErrorJson(const std::vector<ResumeErrorRow>& rows);
nlohmann::ordered_json AtRestJson(const std::vector<AtRestRow>& rows);
// `doc`: the whole report (reads "resume_error" and "kv_at_rest").
void AppendResumeMarkdown(const nlohmann::ordered_json& doc, std::string* md);
std::string FormatMarkdown(const nlohmann::ordered_json& doc);

}  // namespace ced::bench
