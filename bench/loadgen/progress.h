// Progress of a running load: a bar redrawn in place when the stream is a
// terminal, otherwise one plain line every few seconds (logs stay readable).
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "bench/loadgen/runner.h"

namespace ced::loadgen {

// What "done" means for the bar: the run's bounds (0 = none).
struct ProgressBounds {
  double duration_s = 0;
  int64_t max_requests = 0;
};

// Fraction of the issuing phase completed, in [0, 1]: the larger of the
// elapsed share of the duration and the issued share of the count.
double ProgressFraction(const Progress& p, const ProgressBounds& bounds);

// One status line, e.g. "[#####.....]  50%  12.0 s  issued 24  done 20 ...".
// With `bar` false the bar is left out (plain log lines).
std::string FormatProgress(const Progress& p, const ProgressBounds& bounds, bool bar);

// Prints FormatProgress(snapshot()) to `out` from a thread of its own until
// destroyed (the destructor prints a last line and joins). `snapshot` must be
// thread-safe and outlive the printer.
class ProgressPrinter final {
 public:
  ProgressPrinter(std::function<Progress()> snapshot, ProgressBounds bounds, std::FILE* out,
                  std::string label);
  ~ProgressPrinter();

  ProgressPrinter(const ProgressPrinter&) = delete;
  ProgressPrinter& operator=(const ProgressPrinter&) = delete;

 private:
  void Loop();
  void Print(bool last);

  const std::function<Progress()> snapshot_;
  const ProgressBounds bounds_;
  std::FILE* const out_;
  const std::string label_;
  const bool tty_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace ced::loadgen
