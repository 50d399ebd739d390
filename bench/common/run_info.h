// What a bench report records about its run (the command line, the load
// average) and how it is written. Thread-safe.
#pragma once

#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "services/cli/flags.h"

namespace ced::bench {

// The command line as typed, preceded by those of `env` that are set
// ("NAME=value"), with an absolute program path reduced to its file name
// (reports must not carry machine-specific paths).
std::string CommandLine(int argc, char** argv, std::initializer_list<const char*> env);

// /proc/cpuinfo's first "model name" (e.g. "AMD EPYC 9B45"), or "unknown".
std::string CpuModelName();

// /proc/loadavg's first three fields (1, 5, 15 min), or "unknown".
std::string LoadAverage();

// Writes `text` to `path` (truncating it), creating the parent folders; an
// error naming the path.
absl::Status WriteTextFile(const std::string& path, const std::string& text);

// cli::CheckWritable (services/cli/flags.h): a results path checked before
// the run that writes it.
using cli::CheckWritable;

}  // namespace ced::bench
