// The KV tier metrics as a scrape shows them (services/kv_store/tier_metrics.h):
// host and disk tiers chained by KvTiers, the registry serialized after each
// step. Every read and write call to a tier is one observation of
// ced_kv_tier_read_seconds / ced_kv_tier_write_seconds under its tier.
#include "services/kv_store/tier_metrics.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "engine/kv/kv_tiers.h"
#include "gtest/gtest.h"
#include "services/metrics/registry.h"
#include "tests/kv_tiers/tier_test_util.h"

namespace ced::testing {
namespace {

// The value of `series` (name{labels}) in exposition text, or -1 when absent.
double Sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) == 0) {
      return std::strtod(line.c_str() + series.size() + 1, nullptr);
    }
  }
  return -1;
}

std::string Series(const std::string& name, const std::string& tier) {
  return name + "{tier=\"" + tier + "\"}";
}

TEST(KvTierMetricsTest, ReadsAndWritesOfEachTierAreTimed) {
  const KvBlockLayout l = TestLayout(1000);
  const int64_t block = static_cast<int64_t>(kKvBlockHeaderBytes + l.payload_bytes);
  const std::string dir = ::testing::TempDir() + "/kv_tier_metrics_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  KvTiersOptions o;
  o.layout = l;
  o.host_bytes = 2 * block;
  o.disk_dir = dir;
  o.disk_bytes = 10 * block;
  auto tiers = KvTiers::Create(o);
  ASSERT_TRUE(tiers.ok()) << tiers.status();
  KvTiers& t = **tiers;
  metrics::Registry registry;
  ASSERT_TRUE(services::RegisterKvTierMetrics(&registry, [&] { return t.stats(); }).ok());

  const std::string before = registry.Serialize();
  for (const char* tier : {"host", "disk"}) {
    EXPECT_EQ(Sample(before, Series("ced_kv_tier_read_seconds_count", tier)), 0) << tier;
    EXPECT_EQ(Sample(before, Series("ced_kv_tier_write_seconds_count", tier)), 0) << tier;
  }

  // Five spills: five host writes, whose evictions of 0, 1, 2 are three disk writes.
  const auto hs = Chain(l, 6, 3);
  for (int i = 0; i < 5; ++i) t.Spill(hs[i], Payload(l.payload_bytes, i));
  t.Flush();
  const std::string written = registry.Serialize();
  EXPECT_EQ(Sample(written, Series("ced_kv_tier_write_seconds_count", "host")), 5);
  EXPECT_EQ(Sample(written, Series("ced_kv_tier_write_seconds_count", "disk")), 3);
  for (const char* tier : {"host", "disk"}) {
    EXPECT_GT(Sample(written, Series("ced_kv_tier_write_seconds_sum", tier)), 0) << tier;
    EXPECT_EQ(Sample(written, Series("ced_kv_tier_read_seconds_count", tier)), 0) << tier;
  }

  // Blocks 0..5 are each asked of the host tier; 0, 1, 2 (spilled down) and
  // 5 (never stored) of the disk tier too: one read call per block and tier.
  ASSERT_EQ(t.FetchPrefix(hs).size(), 5u);
  const std::string read = registry.Serialize();
  EXPECT_EQ(Sample(read, Series("ced_kv_tier_read_seconds_count", "host")), 6);
  EXPECT_EQ(Sample(read, Series("ced_kv_tier_read_seconds_count", "disk")), 4);
  for (const char* tier : {"host", "disk"}) {
    EXPECT_GT(Sample(read, Series("ced_kv_tier_read_seconds_sum", tier)), 0) << tier;
    EXPECT_EQ(Sample(read, "ced_kv_tier_read_seconds_bucket{tier=\"" + std::string(tier) +
                               "\",le=\"+Inf\"}"),
              Sample(read, Series("ced_kv_tier_read_seconds_count", tier)))
        << tier;
  }
  EXPECT_NE(read.find("ced_kv_tier_read_seconds_bucket{tier=\"disk\",le=\"1e-05\"}"),
            std::string::npos)
      << "buckets start at 10 us:\n"
      << read;
  EXPECT_NE(read.find("ced_kv_tier_read_seconds_bucket{tier=\"disk\",le=\"10\"}"),
            std::string::npos)
      << "and end at 10 s";

  // A scrape with nothing new adds nothing.
  const std::string again = registry.Serialize();
  EXPECT_EQ(Sample(again, Series("ced_kv_tier_read_seconds_count", "host")), 6);
  EXPECT_EQ(Sample(again, Series("ced_kv_tier_read_seconds_sum", "disk")),
            Sample(read, Series("ced_kv_tier_read_seconds_sum", "disk")));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ced::testing
