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

// tp and pp split the model: the probe only tries models the plan can split (heads and FFN width
// that tp divides, at least pp layers), so a plan that fits the full model finds it and more. The
// first probe used to be a 1-layer, 1-head model that tp 2 cannot split: "not even the smallest
// model fits".
TEST(Capacity, TensorAndPipelineParallelPlansFindTheModel) {
  const ModelSpec base = testing::preset_model("llama3-8b");
  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 8);
  for (auto [tp, pp] :
       {std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}, std::pair{8, 1}, std::pair{4, 2}}) {
    Plan p = testing::make_plan(tp, pp, 8 / (tp * pp), 1, 64);
    p.recompute = Recompute::kFull;
    p.zero_stage = 1;
    ASSERT_TRUE(validate_plan_on(p, base, c, "plan").ok());
    const MemoryBreakdown full = AnalyticModel(base, c).memory(p);
    ASSERT_TRUE(full.fits()) << tp << "x" << pp;  // predict fits the full model
    auto r = largest_model(base, c, p);
    ASSERT_TRUE(r.ok()) << tp << "x" << pp << ": " << r.error().message();
    EXPECT_GE(r->params, base.total_params()) << tp << "x" << pp;
    EXPECT_EQ(r->model.heads % tp, 0);
    EXPECT_TRUE(validate_plan_on(p, r->model, c, "plan").ok());
    // The boundary: 5% larger (made splittable the same way) no longer fits.
    const double s = static_cast<double>(r->model.layers) / base.layers;
    const MemoryBreakdown bigger = AnalyticModel(splittable_model(base, s * 1.05, p), c).memory(p);
    EXPECT_FALSE(bigger.fits()) << tp << "x" << pp;
  }
}

// A model the plan already splits is scale_model's; otherwise heads round up to tp's multiple at
// the base's head size, and every size only grows with the scale.
TEST(Capacity, SplittableModelRoundsUpOnlyWhenNeeded) {
  const ModelSpec base = testing::preset_model("llama3-8b");
  Plan p = testing::make_plan(1, 1, 1, 1, 8);
  for (double s : {1e-3, 0.1, 0.37, 1.0, 2.5}) {
    const ModelSpec a = scale_model(base, s), b = splittable_model(base, s, p);
    EXPECT_EQ(a.hidden, b.hidden);
    EXPECT_EQ(a.heads, b.heads);
    EXPECT_EQ(a.kv_heads, b.kv_heads);
    EXPECT_EQ(a.layers, b.layers);
    EXPECT_EQ(a.ffn_hidden, b.ffn_hidden);
  }
  p = testing::make_plan(8, 4, 1, 1, 8);
  const ModelSpec smallest = splittable_model(base, 1e-3, p);
  EXPECT_EQ(smallest.heads, 8);
  EXPECT_EQ(smallest.hidden, 8 * 128);
  EXPECT_EQ(smallest.layers, 4);
  EXPECT_EQ(smallest.heads % smallest.kv_heads, 0);
  EXPECT_EQ(smallest.ffn_hidden % 8, 0);
  EXPECT_EQ(splittable_model(base, 1.0, p).hidden, base.hidden);  // 32 heads: already split
  ModelSpec last = smallest;
  for (double s = 1e-3; s < 4; s *= 1.07) {
    const ModelSpec m = splittable_model(base, s, p);
    EXPECT_GE(m.hidden, last.hidden) << s;
    EXPECT_GE(m.layers, last.layers) << s;
    EXPECT_GE(m.heads, last.heads) << s;
    EXPECT_GE(m.ffn_hidden, last.ffn_hidden) << s;
    last = m;
  }
}

// Nothing fits: the error says why (the smallest model tried and its memory); a plan that cannot
// split any model of the family says that instead.
TEST(Capacity, NothingFitsSaysWhy) {
  const ModelSpec base = testing::preset_model("llama3-8b");
  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 8);
  Plan p = testing::make_plan(2, 1, 4, 512, 2048);  // 512 sequences of 8192 tokens per micro-batch
  auto r = largest_model(base, c, p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find(
                "not even the smallest model of llama3-8b's family (hidden 256, 1 layers, 2 heads"),
            std::string::npos)
      << r.error().message();
  EXPECT_NE(r.error().message().find("needs"), std::string::npos) << r.error().message();
  p = testing::make_plan(1, 1, 4, 1, 8);
  p.cp = 2;
  p.seq_len = 8191;  // does not split in 2
  EXPECT_FALSE(capacity_plan_check(base, c, p).ok());
  auto bad = largest_model(base, c, p);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("the plan cannot split any model of llama3-8b's family"),
            std::string::npos)
      << bad.error().message();
  EXPECT_NE(bad.error().message().find("/cp: 2 does not divide the sequence length (8191)"),
            std::string::npos)
      << bad.error().message();
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
  EXPECT_NEAR(am.evaluate(k).step_time_s, am.evaluate(none).step_time_s,
              1e-9 * am.evaluate(none).step_time_s);
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
  EXPECT_EQ(
      s.error().message(),
      "p.json: /recompute_layers: is set but recompute is none (say which recompute the first layers use)");
}

}  // namespace
}  // namespace foresight
