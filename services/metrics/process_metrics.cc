#include "services/metrics/process_metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/common/status.h"

namespace ced::metrics {
namespace {

struct ProcStat {
  double cpu_seconds = 0;
  double start_seconds_since_boot = 0;
  double virtual_bytes = 0;
  double resident_bytes = 0;
  double threads = 0;
};

bool ReadFile(const char* path, std::string* contents) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream buffer;
  buffer << in.rdbuf();
  *contents = buffer.str();
  return true;
}

// Parses /proc/self/stat (see proc(5)); fields after the parenthesised command name.
bool ReadProcStat(ProcStat* stat) {
  std::string text;
  if (!ReadFile("/proc/self/stat", &text)) return false;
  const size_t close_paren = text.rfind(')');
  if (close_paren == std::string::npos) return false;
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(text).substr(close_paren + 1), ' ', absl::SkipEmpty());
  // fields[0] is field 3 (state); field N is fields[N - 3].
  auto field = [&](int n, double* out) {
    const size_t index = static_cast<size_t>(n - 3);
    return index < fields.size() && absl::SimpleAtod(fields[index], out);
  };
  double utime = 0, stime = 0, threads = 0, start = 0, vsize = 0, rss_pages = 0;
  if (!field(14, &utime) || !field(15, &stime) || !field(20, &threads) || !field(22, &start) ||
      !field(23, &vsize) || !field(24, &rss_pages)) {
    return false;
  }
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  stat->cpu_seconds = (utime + stime) / ticks;
  stat->threads = threads;
  stat->start_seconds_since_boot = start / ticks;
  stat->virtual_bytes = vsize;
  stat->resident_bytes = rss_pages * page;
  return true;
}

bool ReadBootTime(double* boot_time) {
  std::string text;
  if (!ReadFile("/proc/stat", &text)) return false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, "btime ")) return absl::SimpleAtod(line, boot_time);
  }
  return false;
}

bool CountOpenFds(double* count) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return false;
  int n = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  closedir(dir);
  *count = n - 1;  // Minus the descriptor opendir itself holds.
  return true;
}

struct ProcessMetrics {
  Gauge* resident = nullptr;
  Gauge* virtual_memory = nullptr;
  Counter* cpu = nullptr;
  Gauge* start_time = nullptr;
  Gauge* open_fds = nullptr;
  Gauge* threads = nullptr;
  std::mutex mu;  // Serialises refreshes so concurrent scrapes add each CPU delta once.

  void Refresh() {
    std::lock_guard lock(mu);
    ProcStat stat;
    if (ReadProcStat(&stat)) {
      resident->Set(stat.resident_bytes);
      virtual_memory->Set(stat.virtual_bytes);
      threads->Set(stat.threads);
      cpu->Increment(stat.cpu_seconds - cpu->Value());  // Negative deltas are ignored.
      double boot_time = 0;
      if (ReadBootTime(&boot_time)) start_time->Set(boot_time + stat.start_seconds_since_boot);
    }
    double fds = 0;
    if (CountOpenFds(&fds)) open_fds->Set(fds);
  }
};

}  // namespace

absl::Status RegisterProcessMetrics(Registry* registry) {
  if (registry == nullptr)
    return absl::InvalidArgumentError("RegisterProcessMetrics: null registry");
  auto metrics = std::make_shared<ProcessMetrics>();
  ASSIGN_OR_RETURN(auto* resident, registry->AddGauge("ced_process_resident_memory_bytes",
                                                      "Resident memory size in bytes."));
  ASSIGN_OR_RETURN(auto* virtual_memory, registry->AddGauge("ced_process_virtual_memory_bytes",
                                                            "Virtual memory size in bytes."));
  ASSIGN_OR_RETURN(auto* cpu, registry->AddCounter("ced_process_cpu_seconds_total",
                                                   "Total user and system CPU time in seconds."));
  ASSIGN_OR_RETURN(
      auto* start_time,
      registry->AddGauge("ced_process_start_time_seconds",
                         "Start time of the process since the Unix epoch in seconds."));
  ASSIGN_OR_RETURN(auto* open_fds,
                   registry->AddGauge("ced_process_open_fds", "Number of open file descriptors."));
  ASSIGN_OR_RETURN(auto* threads, registry->AddGauge("ced_process_threads",
                                                     "Number of OS threads in the process."));
  metrics->resident = &resident->WithLabelValues({});
  metrics->virtual_memory = &virtual_memory->WithLabelValues({});
  metrics->cpu = &cpu->WithLabelValues({});
  metrics->start_time = &start_time->WithLabelValues({});
  metrics->open_fds = &open_fds->WithLabelValues({});
  metrics->threads = &threads->WithLabelValues({});
  metrics->Refresh();
  registry->AddCollectHook([metrics] { metrics->Refresh(); });
  return absl::OkStatus();
}

}  // namespace ced::metrics
