#include "services/metrics/names.h"

#include "gtest/gtest.h"

namespace ced::metrics {
namespace {

TEST(MetricsValidateMetricNameTest, AcceptsValidNames) {
  for (const char* name : {"a", "ced_requests_total", "_x", ":colon:ok", "A9_:b", "x__y"}) {
    EXPECT_TRUE(ValidateMetricName(name).ok()) << name;
  }
}

TEST(MetricsValidateMetricNameTest, RejectsInvalidNames) {
  for (const char* name : {"", "9lives", "has-dash", "has space", "dot.ted", "__reserved", "é"}) {
    absl::Status status = ValidateMetricName(name);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name;
  }
  EXPECT_NE(ValidateMetricName("bad-name").message().find("bad-name"), std::string::npos);
}

TEST(MetricsValidateLabelNameTest, AcceptsValidNames) {
  for (const char* name : {"a", "outcome", "_x", "le", "Model_2"}) {
    EXPECT_TRUE(ValidateLabelName(name).ok()) << name;
  }
}

TEST(MetricsValidateLabelNameTest, RejectsInvalidNames) {
  for (const char* name : {"", "1a", "a:b", "a-b", "__name__", "a b"}) {
    EXPECT_EQ(ValidateLabelName(name).code(), absl::StatusCode::kInvalidArgument) << name;
  }
}

}  // namespace
}  // namespace ced::metrics
