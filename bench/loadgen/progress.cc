#include "bench/loadgen/progress.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"

namespace ced::loadgen {
namespace {

constexpr int kBarWidth = 24;
constexpr absl::Duration kTtyPeriod = absl::Milliseconds(250);
constexpr absl::Duration kLogPeriod = absl::Seconds(5);

}  // namespace

double ProgressFraction(const Progress& p, const ProgressBounds& bounds) {
  if (p.issuing_done) return 1;
  double f = 0;
  if (bounds.duration_s > 0) f = std::max(f, p.elapsed_s / bounds.duration_s);
  if (bounds.max_requests > 0) {
    f = std::max(f, static_cast<double>(p.issued) / static_cast<double>(bounds.max_requests));
  }
  return std::clamp(f, 0.0, 1.0);
}

std::string FormatProgress(const Progress& p, const ProgressBounds& bounds, bool bar) {
  const double f = ProgressFraction(p, bounds);
  std::string line;
  if (bar) {
    const int filled = static_cast<int>(f * kBarWidth + 0.5);
    absl::StrAppend(&line, "[", std::string(filled, '#'), std::string(kBarWidth - filled, '.'),
                    "] ");
  }
  const double rate = p.elapsed_s > 0 ? (p.done - p.failed) / p.elapsed_s : 0;
  const double tok = p.elapsed_s > 0 ? p.output_tokens / p.elapsed_s : 0;
  absl::StrAppend(
      &line,
      absl::StrFormat(
          "%3.0f%%  %6.1f s  issued %d  done %d  in flight %d  errors %d  %.2f req/s  %.1f tok/s",
          f * 100, p.elapsed_s, p.issued, p.done, p.in_flight, p.failed, rate, tok));
  if (p.issuing_done && p.in_flight > 0) absl::StrAppend(&line, "  (draining)");
  return line;
}

ProgressPrinter::ProgressPrinter(std::function<Progress()> snapshot, ProgressBounds bounds,
                                 std::FILE* out, std::string label)
    : snapshot_(std::move(snapshot)),
      bounds_(bounds),
      out_(out),
      label_(std::move(label)),
      tty_(isatty(fileno(out)) == 1),
      thread_([this] { Loop(); }) {}

ProgressPrinter::~ProgressPrinter() {
  stop_.Notify();
  thread_.join();
  Print(/*last=*/true);
}

void ProgressPrinter::Loop() {
  while (!stop_.WaitForNotificationWithTimeout(tty_ ? kTtyPeriod : kLogPeriod)) Print(false);
}

void ProgressPrinter::Print(bool last) {
  const std::string line = FormatProgress(snapshot_(), bounds_, tty_);
  if (tty_) {
    // \r and clear-to-end-of-line: redraw in place.
    std::fprintf(out_, "\r\033[K%s%s%s", label_.c_str(), line.c_str(), last ? "\n" : "");
  } else {
    std::fprintf(out_, "%s%s\n", label_.c_str(), line.c_str());
  }
  std::fflush(out_);
}

}  // namespace ced::loadgen
