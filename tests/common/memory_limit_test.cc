// services::MemoryLimitMiB: what the workers check --kv-cache-mb against.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>

#include "services/common/worker_util.h"

namespace ced::services {
namespace {

TEST(MemoryLimitTest, PositiveAndAtMostThePhysicalMemoryOrTheCgroupLimit) {
  const int64_t physical_mb = (int64_t{sysconf(_SC_PHYS_PAGES)} * sysconf(_SC_PAGE_SIZE)) >> 20;
  const int64_t limit = MemoryLimitMiB();
  EXPECT_GT(limit, 0);
  EXPECT_LE(limit, physical_mb);
  // Where this process's control group sets a smaller limit, that is the one.
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    int64_t bytes = 0;
    if (in >> bytes && bytes > 0 && (bytes >> 20) < physical_mb) {
      EXPECT_LE(limit, bytes >> 20) << path;
    }
  }
}

}  // namespace
}  // namespace ced::services
