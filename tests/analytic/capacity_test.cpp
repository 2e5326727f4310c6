// The largest model that fits: the family's scaling, the bisection's answer at the boundary, and
// optimizer offload raising it (the articles' 000 Sec. 3.3).
#include "sim/analytic/capacity.h"

#include <gtest/gtest.h>

#include "sim/analytic/analytic_model.h"
#include "tests/test_util.h"

namespace foresight {
namespace {

TEST(Capacity, ScalingKeepsTheShapeAndScaleOneIsTheBase) {
  const ModelSpec base = testing::preset_model("llama3-8b");
  const ModelSpec same = scale_model(base, 1.0);
  EXPECT_EQ(same.hidden, base.hidden);
  EXPECT_EQ(same.layers, base.layers);
  EXPECT_EQ(same.heads, base.heads);
  EXPECT_EQ(same.kv_heads, base.kv_heads);
  const ModelSpec twice = scale_model(base, 2.0);
  EXPECT_EQ(twice.hidden, 2 * base.hidden);
  EXPECT_EQ(twice.layers, 2 * base.layers);
  EXPECT_EQ(twice.heads % twice.kv_heads, 0);
  // About s^3 in the layers' parameters (the embeddings grow as s).
  EXPECT_NEAR(twice.total_params() / base.total_params(), 8, 1.5);
}

TEST(Capacity, LargestFitsAndOffloadRaisesIt) {
  const ModelSpec base = testing::preset_model("llama3-8b");
  const ClusterSpec c = testing::preset_cluster("dgx-a100-40gb-hdr", 1);
  Plan p = testing::make_plan(1, 1, 1, 1, 8);
  p.recompute = Recompute::kFull;
  p.seq_len = 2048;
  auto on_device = largest_model(base, c, p);
  ASSERT_TRUE(on_device.ok()) << on_device.error().message();
  EXPECT_LE(on_device->memory.total, on_device->memory.capacity);
  // A few percent larger no longer fits.
  const double s = static_cast<double>(on_device->model.hidden) / base.hidden;
  const ModelSpec bigger = scale_model(base, s * 1.05);
  const MemoryBreakdown m = AnalyticModel(bigger, c).memory(p);
  EXPECT_GT(m.total, m.capacity);
  // 18 bytes per parameter on the device (bf16 weights 2, fp32 gradients 4, Adam state 12)
  // against 6 with the optimizer on the host: a 40 GB A100 goes from about 2B to about 6B.
  p.offload_optimizer = true;
  auto offloaded = largest_model(base, c, p);
  ASSERT_TRUE(offloaded.ok());
  EXPECT_NEAR(on_device->params / 1e9, 2.0, 0.3);
  EXPECT_GT(offloaded->params / on_device->params, 2.5);
}

}  // namespace
}  // namespace foresight
