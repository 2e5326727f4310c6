// The error bands shown beside a prediction: a plan's classes as validation groups its cases, and
// the band of its sharding class from the built-in table, turned into a range of step times.
#include "sim/validate/error_band.h"

#include <gtest/gtest.h>

namespace foresight {
namespace {

TEST(ErrorBand, PlanClassesAsValidationGroupsCases) {
  Plan p;
  p.precision = Precision::kFp8;
  p.zero_stage = 3;
  auto c = plan_classes(p, 1024);
  EXPECT_EQ(c.at("precision"), "fp8");
  EXPECT_EQ(c.at("sharding"), "ZeRO-3/FSDP");
  EXPECT_EQ(c.at("scale"), "more than 512 GPUs");
  p.zero_stage = 1;
  EXPECT_EQ(plan_classes(p, 64).at("sharding"), "ZeRO-1/2");
  EXPECT_EQ(plan_classes(p, 64).at("scale"), "up to 64 GPUs");
  p.zero_stage = 0;
  EXPECT_EQ(plan_classes(p, 65).at("sharding"), "replicated");
  EXPECT_EQ(plan_classes(p, 65).at("scale"), "65 to 512 GPUs");
}

// The built-in table has a band for every sharding class; a range holds the prediction's own
// step only when the class's errors straddle zero, and runs from step / (1 + p90) to
// step / (1 + p10).
TEST(ErrorBand, RangeFromTheShardingClassBand) {
  for (int zero : {0, 1, 3}) {
    Plan p;
    p.zero_stage = zero;
    auto band = error_band(p, 64);
    ASSERT_TRUE(band.ok()) << band.error().message();
    EXPECT_EQ(band->dimension, "sharding");
    EXPECT_EQ(band->cls, plan_classes(p, 64).at("sharding"));
    EXPECT_GE(band->cases, 5);
    EXPECT_LE(band->p10_pct, band->p90_pct);
    EXPECT_GT(band->mape_pct, 0);
    EXPECT_FALSE(band->generated.empty());
    const auto [lo, hi] = band->measured_range(10.0);
    EXPECT_DOUBLE_EQ(lo, 10.0 / (1 + band->p90_pct / 100));
    EXPECT_DOUBLE_EQ(hi, 10.0 / (1 + band->p10_pct / 100));
    EXPECT_LE(lo, hi);
    EXPECT_EQ(lo <= 10.0 && 10.0 <= hi, band->p10_pct <= 0 && band->p90_pct >= 0);
  }
}

}  // namespace
}  // namespace foresight
