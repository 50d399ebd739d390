#include "services/metrics/text_format.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace ced::metrics {
namespace {

TEST(MetricsFormatValueTest, SpecialValues) {
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
  EXPECT_EQ(FormatValue(0.0), "0");
  EXPECT_EQ(FormatValue(-0.0), "0");
}

TEST(MetricsFormatValueTest, IntegersHaveNoExponentOrFraction) {
  EXPECT_EQ(FormatValue(1), "1");
  EXPECT_EQ(FormatValue(-3), "-3");
  EXPECT_EQ(FormatValue(42), "42");
  EXPECT_EQ(FormatValue(1e6), "1000000");
  EXPECT_EQ(FormatValue(1073741824), "1073741824");
  EXPECT_EQ(FormatValue(9007199254740991.0), "9007199254740991");
}

TEST(MetricsFormatValueTest, FractionsUseShortestRoundTrip) {
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(0.005), "0.005");
  EXPECT_EQ(FormatValue(2.5), "2.5");
  EXPECT_EQ(FormatValue(-1.25), "-1.25");
  EXPECT_EQ(FormatValue(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatValue(2.5e-7), "2.5e-07");
  for (double v : {1.0 / 3.0, 123.456, 6.02214076e23, 1e-300, 3.14159}) {
    EXPECT_EQ(std::strtod(FormatValue(v).c_str(), nullptr), v) << FormatValue(v);
  }
}

TEST(MetricsEscapeTest, Help) {
  EXPECT_EQ(EscapeHelp("plain text"), "plain text");
  EXPECT_EQ(EscapeHelp("a\\b\nc \"quoted\""), "a\\\\b\\nc \"quoted\"");
}

TEST(MetricsEscapeTest, LabelValue) {
  EXPECT_EQ(EscapeLabelValue("ok"), "ok");
  EXPECT_EQ(EscapeLabelValue("a\\b\nc\"d"), "a\\\\b\\nc\\\"d");
  EXPECT_EQ(EscapeLabelValue(""), "");
}

TEST(MetricsAppendSampleLineTest, NoLabels) {
  std::string out;
  AppendSampleLine("x_total", {}, {}, "", "", 3, &out);
  EXPECT_EQ(out, "x_total 3\n");
}

TEST(MetricsAppendSampleLineTest, LabelsAndExtraLabel) {
  std::string out;
  AppendSampleLine("h_bucket", {"a", "b"}, {"1", "q\""}, "le", "0.5", 7, &out);
  EXPECT_EQ(out, "h_bucket{a=\"1\",b=\"q\\\"\",le=\"0.5\"} 7\n");
  out.clear();
  AppendSampleLine("h_bucket", {}, {}, "le", "+Inf", 2, &out);
  EXPECT_EQ(out, "h_bucket{le=\"+Inf\"} 2\n");
}

}  // namespace
}  // namespace ced::metrics
