// Units inside values: parsing, exact round trips, and errors that say what was expected.
#include "sim/core/units.h"

#include <gtest/gtest.h>

namespace foresight {
namespace {

double parse(std::string_view s, Dimension d) {
  auto r = parse_quantity(s, d);
  EXPECT_TRUE(r.ok()) << s << ": " << (r.ok() ? "" : r.error().message());
  return r.ok() ? r.value() : -1;
}

TEST(Units, ParsesBitsAndBytesPerSecond) {
  EXPECT_DOUBLE_EQ(parse("400Gbps", Dimension::kBandwidth), 400e9 / 8);
  EXPECT_DOUBLE_EQ(parse("50GB/s", Dimension::kBandwidth), 50e9);
  EXPECT_DOUBLE_EQ(parse("900GBps", Dimension::kBandwidth), 900e9);
  EXPECT_DOUBLE_EQ(parse("1 GiB/s", Dimension::kBandwidth), 1073741824.0);
}

TEST(Units, ParsesSizesDurationsAndRates) {
  EXPECT_DOUBLE_EQ(parse("80GiB", Dimension::kBytes), 80.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(parse("141GB", Dimension::kBytes), 141e9);
  EXPECT_DOUBLE_EQ(parse("2us", Dimension::kSeconds), 2e-6);
  EXPECT_DOUBLE_EQ(parse("1.5ms", Dimension::kSeconds), 1.5e-3);
  EXPECT_DOUBLE_EQ(parse("2h", Dimension::kSeconds), 7200.0);
  EXPECT_DOUBLE_EQ(parse("989TFLOPS", Dimension::kFlopRate), 989e12);
  EXPECT_DOUBLE_EQ(parse("312TFLOP/s", Dimension::kFlopRate), 312e12);
  EXPECT_DOUBLE_EQ(parse("700W", Dimension::kPower), 700.0);
}

TEST(Units, ErrorsSayWhatWasExpected) {
  auto bare = parse_quantity("400", Dimension::kBandwidth);
  ASSERT_FALSE(bare.ok());
  EXPECT_NE(bare.error().message().find("has no unit"), std::string::npos) << bare.error().message();
  auto unknown = parse_quantity("400Gbits", Dimension::kBandwidth);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message().find("unknown unit 'Gbits'"), std::string::npos);
  auto wrong_dim = parse_quantity("2us", Dimension::kBytes);
  ASSERT_FALSE(wrong_dim.ok());
  EXPECT_NE(wrong_dim.error().message().find("a size"), std::string::npos);
  EXPECT_FALSE(parse_quantity("-3GB", Dimension::kBytes).ok());
  EXPECT_FALSE(parse_quantity("", Dimension::kBytes).ok());
  EXPECT_FALSE(parse_quantity("GB", Dimension::kBytes).ok());
  EXPECT_FALSE(parse_quantity("1e999GB", Dimension::kBytes).ok());
}

TEST(Units, FormatRoundTripsExactly) {
  const double values[] = {0.0, 1.0, 80.0 * 1073741824.0, 141e9, 3.35e12 / 3, 2e-6, 989.4e12, 0.1 + 0.2};
  for (Dimension d : {Dimension::kBytes, Dimension::kSeconds, Dimension::kBandwidth, Dimension::kFlopRate}) {
    for (double v : values) {
      const std::string text = format_quantity(v, d);
      auto back = parse_quantity(text, d);
      ASSERT_TRUE(back.ok()) << text;
      EXPECT_EQ(back.value(), v) << text;
    }
  }
  EXPECT_EQ(format_quantity(80.0 * 1073741824.0, Dimension::kBytes), "80GiB");
  EXPECT_EQ(format_quantity(50e9, Dimension::kBandwidth), "50GB/s");
}

}  // namespace
}  // namespace foresight
