// The largest model that fits: the family's scaling, the bisection's answer at the boundary, and
// optimizer offload raising it (the articles' 000 Sec. 3.3); recomputing only some layers.
#include "sim/analytic/capacity.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "sim/analytic/analytic_model.h"
#include "sim/des/simulator.h"
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

namespace foresight {
namespace {

// Recomputing only the first k layers of each stage (Megatron's block method): k = all is full
// recompute, k = 0 is none; memory falls and time rises with k; the fewest k that fits is found
// exactly; the simulator runs the same choice.
TEST(RecomputeLayers, BetweenNoneAndFull) {
  const ModelSpec m = testing::preset_model("llama3-70b");
  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 64);
  Plan full = testing::make_plan(8, 4, 2, 1, 128);
  full.recompute = Recompute::kFull;
  full.zero_stage = 1;
  Plan none = full;
  none.recompute = Recompute::kNone;
  const AnalyticModel am(m, c);
  const int per_stage = m.layers / 4;
  Plan k = full;
  k.recompute_layers = per_stage;
  EXPECT_DOUBLE_EQ(am.evaluate(k).step_time_s, am.evaluate(full).step_time_s);
  EXPECT_DOUBLE_EQ(am.memory(k).activations, am.memory(full).activations);
  k.recompute_layers = 0;
  EXPECT_NEAR(am.evaluate(k).step_time_s, am.evaluate(none).step_time_s, 1e-9 * am.evaluate(none).step_time_s);
  double last_mem = 1e300, last_time = 0;
  for (int layers = 0; layers <= per_stage; layers += 5) {
    k.recompute_layers = layers;
    const double mem = am.memory(k).total, time = am.evaluate(k).step_time_s;
    EXPECT_LT(mem, last_mem) << layers;
    EXPECT_GT(time, last_time) << layers;
    last_mem = mem;
    last_time = time;
  }
  const int fewest = fewest_recompute_layers(m, c, full);
  ASSERT_GT(fewest, 0);  // no recompute does not fit here
  k.recompute_layers = fewest;
  EXPECT_LE(am.memory(k).total, am.memory(k).capacity);
  k.recompute_layers = fewest - 1;
  EXPECT_GT(am.memory(k).total, am.memory(k).capacity);
  // The simulator recomputes exactly those layers, and agrees with the analytic model.
  k.recompute_layers = 4;
  auto w = lower(m, c, k);
  ASSERT_TRUE(w.ok());
  int recomputed_qkv = 0;
  const OpGraph& g = w->stages[1].graph();
  for (auto v : boost::make_iterator_range(boost::vertices(g)))
    if (g[v].phase == Phase::kRecompute && std::string(g[v].name) == "qkv") ++recomputed_qkv;
  EXPECT_EQ(recomputed_qkv, 4 * static_cast<int>(k.micro_batches()));
  auto sim = simulate(m, c, k, "plan", {});
  ASSERT_TRUE(sim.ok()) << sim.error().message();
  EXPECT_NEAR(sim->prediction.step_time_s / am.evaluate(k).step_time_s, 1.0, 0.03);
  // The plan file round-trips it, and it needs a recompute policy.
  auto back = plan_from_json(plan_to_json(k), "p.json");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->recompute_layers, 4);
  none.recompute_layers = 3;
  Status s = validate_plan(none, m, 0, "p.json");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message(),
            "p.json: /recompute_layers: is set but recompute is none (say which recompute the first layers use)");
}

}  // namespace
}  // namespace foresight
