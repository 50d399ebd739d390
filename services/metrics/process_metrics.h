// Process metrics (Linux /proc/self), refreshed at every scrape through a collect hook.
#pragma once

#include "absl/status/status.h"
#include "services/metrics/registry.h"

namespace ced::metrics {

// Registers these families in `registry` and a collect hook that refreshes them:
//   ced_process_resident_memory_bytes  (gauge)   resident set size
//   ced_process_virtual_memory_bytes   (gauge)   virtual memory size
//   ced_process_cpu_seconds_total      (counter) user + system CPU time
//   ced_process_start_time_seconds     (gauge)   start time, seconds since the Unix epoch
//   ced_process_open_fds               (gauge)   open file descriptors
//   ced_process_threads                (gauge)   number of threads
// Call it once per registry. Errors: the registration errors of Registry
// (e.g. a name already used with another type). Values that cannot be read stay unchanged.
// `registry` is not owned and must outlive its scrapes.
absl::Status RegisterProcessMetrics(Registry* registry);

}  // namespace ced::metrics
