// The prefill worker's test-only fault spec: parsed strictly, errors name
// the offending item, rules match by request-id substring in order.
#include "services/prefill/fault_injection.h"

#include "gtest/gtest.h"

namespace ced::services {
namespace {

TEST(FaultInjectionSpecTest, EmptyMeansNoFaults) {
  auto f = ParsePrefillFaults("");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_FALSE(f->any());
  EXPECT_EQ(f->Find("anything"), nullptr);
}

TEST(FaultInjectionSpecTest, RulesMatchInOrder) {
  auto f = ParsePrefillFaults(
      "match=slow,send_delay_ms=700;match=bad,corrupt_checksum,truncate;ignore_cancel");
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->rules.size(), 3u);
  EXPECT_TRUE(f->any_corrupt());
  const PrefillFaultRule* slow = f->Find("req-slow-1");
  ASSERT_NE(slow, nullptr);
  EXPECT_EQ(slow->send_delay_ms, 700);
  EXPECT_FALSE(slow->corrupt_checksum);
  const PrefillFaultRule* bad = f->Find("bad-2");
  ASSERT_NE(bad, nullptr);
  EXPECT_TRUE(bad->corrupt_checksum);
  EXPECT_TRUE(bad->truncate);
  // The last rule has no match: it applies to every other request.
  const PrefillFaultRule* other = f->Find("plain");
  ASSERT_NE(other, nullptr);
  EXPECT_TRUE(other->ignore_cancel);
}

TEST(FaultInjectionSpecTest, BadItemsAreNamed) {
  for (const char* spec : {"send_delay_ms=-1", "chunk_delay_ms=abc", "send_delay_ms=600001",
                           "corrupt_checksum=1", "explode", "match=x,truncate=yes"}) {
    auto f = ParsePrefillFaults(spec);
    ASSERT_FALSE(f.ok()) << spec;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << spec;
    const std::string key = std::string(spec).substr(std::string(spec).rfind(',') + 1);
    EXPECT_NE(f.status().message().find(key.substr(0, key.find('='))), std::string::npos)
        << spec << ": " << f.status().message();
  }
}

}  // namespace
}  // namespace ced::services
