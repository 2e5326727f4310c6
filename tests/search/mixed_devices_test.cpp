// Pipelines whose stages run on different accelerator types (a node with GPUs and NPUs): the
// placement checks, where ranks land, the analytic model against the simulator, layer splits by
// speed, and the search choosing devices per stage.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "sim/analytic/analytic_model.h"
#include "sim/des/simulator.h"
#include "sim/search/search.h"
#include "sim/spec/presets.h"
#include "tests/test_util.h"

namespace foresight {
namespace {

constexpr const char* kGpu = "h100-sxm5-80gb";
constexpr const char* kNpu = "ascend-910b";

// hetero-node: 4 nodes of 4 H100 + 4 Ascend 910B (+ 2 CPUs), 16 of each.
ClusterSpec hetero() { return *load_cluster("hetero-node"); }

Plan mixed_plan(std::vector<int> split = {}) {
  Plan p = testing::make_plan(4, 2, 4, 1, 64);
  p.recompute = Recompute::kFull;
  p.stage_devices = {kGpu, kNpu};
  p.layer_split = std::move(split);
  return p;
}

TEST(MixedDevices, PlacementIsChecked) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  const ClusterSpec c = hetero();
  EXPECT_TRUE(validate_plan_on(mixed_plan(), m, c, "plan.json").ok());
  auto message = [&](const Plan& p) {
    Status s = validate_plan_on(p, m, c, "plan.json");
    return s.ok() ? std::string("ok") : s.error().message();
  };
  Plan p = mixed_plan();
  p.stage_devices = {kGpu, "b200"};
  EXPECT_EQ(message(p),
            "plan.json: /stage_devices: \"b200\" (stage 1) is not an accelerator of node "
            "'hetero-cpu-gpu-npu' (it has: h100-sxm5-80gb, ascend-910b)");
  p.stage_devices = {kGpu};
  EXPECT_EQ(message(p), "plan.json: /stage_devices: has 1 entries for pp = 2 stages");
  p.stage_devices = {kNpu, kNpu};  // 32 ranks on 16 NPUs
  EXPECT_EQ(message(p),
            "plan.json: /stage_devices: the stages on ascend-910b need 32 devices (tp*cp*dp = 16 each), "
            "the cluster has 16");
  p = mixed_plan();
  p.schedule = Schedule::kDualPipe;
  p.global_batch = 64;
  EXPECT_NE(message(p).find("cannot be combined with dualpipe"), std::string::npos);
  p = mixed_plan();
  p.precision = Precision::kFp8;  // the Ascend 910B has no fp8 in its preset
  EXPECT_EQ(message(p), "plan.json: /stage_devices: stage 1: fp8 is not supported by ascend-910b");
}

TEST(MixedDevices, JsonRoundTrip) {
  Plan p = mixed_plan({22, 10});
  auto back = plan_from_json(plan_to_json(p), "x.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, p);
  EXPECT_EQ(layout_string(p), "tp4 pp2 dp4 [1 h100-sxm5-80gb 22 | 1 ascend-910b 10]");
}

// Node n's devices are numbered n*8 + 0..3 (GPUs) and n*8 + 4..7 (NPUs): stage 0's 16 ranks fill
// the GPUs node by node, stage 1's the NPUs.
TEST(MixedDevices, RanksLandOnTheirStagesDevices) {
  const std::vector<int> d = rank_devices(mixed_plan(), hetero());
  ASSERT_EQ(d.size(), 32u);
  for (int r = 0; r < 16; ++r) EXPECT_EQ(d[r], (r / 4) * 8 + r % 4) << r;
  for (int r = 16; r < 32; ++r) EXPECT_EQ(d[r], ((r - 16) / 4) * 8 + 4 + r % 4) << r;
  // One accelerator type: ranks are devices.
  const std::vector<int> same =
      rank_devices(testing::make_plan(8, 2, 8, 1, 64), testing::preset_cluster("dgx-h100-ndr", 128));
  for (int r = 0; r < 128; ++r) EXPECT_EQ(same[r], r);
}

// Each stage is priced on its own accelerator, the slowest stage sets the pace, and a split by
// speed beats the even one. The simulator runs the same placement and agrees.
TEST(MixedDevices, AnalyticAndSimulatorAgree) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  const ClusterSpec c = hetero();
  const AnalyticModel am(m, c);
  const Plan even = mixed_plan();
  const Plan balanced = mixed_plan(am.balanced_layer_split(even));
  // The H100 computes about three times faster than the 910B, but the TP all-reduces over the
  // node's PCIe cost both the same: about two layers on the GPU stage for one on the NPU stage.
  ASSERT_EQ(balanced.layer_split.size(), 2u);
  EXPECT_EQ(balanced.layer_split[0] + balanced.layer_split[1], m.layers);
  EXPECT_GT(balanced.layer_split[0], 3 * balanced.layer_split[1] / 2);
  const Prediction pe = am.evaluate(even), pb = am.evaluate(balanced);
  EXPECT_LT(pb.step_time_s, 0.8 * pe.step_time_s);
  for (const Plan& p : {even, balanced}) {
    auto sym = simulate(m, c, p, "plan", {});
    ASSERT_TRUE(sym.ok()) << sym.error().message();
    SimOptions full;
    full.full = true;
    auto all = simulate(m, c, p, "plan", full);
    ASSERT_TRUE(all.ok()) << all.error().message();
    EXPECT_NEAR(sym->prediction.step_time_s / all->prediction.step_time_s, 1.0, 1e-6);
    EXPECT_NEAR(sym->prediction.step_time_s / am.evaluate(p).step_time_s, 1.0, 0.05);
  }
  // MFU counts each rank's own peak.
  const double peak = (mfu_peak(Precision::kBf16, c.node.devices[0].device) +
                       mfu_peak(Precision::kBf16, c.node.devices[1].device)) /
                      2;
  EXPECT_NEAR(pb.mfu, pb.model_flops / (pb.step_time_s * pb.devices * peak), 1e-12);
}

// The search on a GPU+NPU cluster: it tries every stage on one type and pipelines across both,
// and its best mixed plan's layer split is the best of every split of that layout (brute force).
TEST(MixedDevices, SearchChoosesDevicesPerStage) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  const ClusterSpec c = hetero();
  SearchOptions o;
  o.global_batch = 64;
  o.space.offload_optimizer = {false};
  o.space.tp = {4};
  o.space.pp = {1, 2};
  o.space.cp = {1};
  o.space.micro_batch = {1};
  o.space.zero_stage = {1};
  o.space.recompute = {Recompute::kFull};
  o.space.schedules = {Schedule::k1F1B};
  o.space.sequence_parallel = {false};
  o.space.overlap_grad_reduce = {false};
  o.threads = 1;
  auto r = search(m, c, o);
  ASSERT_TRUE(r.ok()) << r.error().message();
  bool gpu_only = false, npu_only = false;
  const RankedPlan* best_mixed = nullptr;
  for (const RankedPlan& p : r->plans) {
    const auto& sd = p.plan.stage_devices;
    const bool mixed = std::adjacent_find(sd.begin(), sd.end(), std::not_equal_to<>()) != sd.end();
    if (sd.empty())
      gpu_only = true;
    else if (!mixed && sd.front() == kNpu)
      npu_only = true;
    else if (mixed && !best_mixed)
      best_mixed = &p;
  }
  EXPECT_TRUE(gpu_only);
  EXPECT_TRUE(npu_only);
  ASSERT_NE(best_mixed, nullptr);
  // Using both types beats the GPUs alone on this cluster.
  EXPECT_FALSE(r->plans.front().plan.stage_devices.empty());
  const AnalyticModel am(m, c);
  Plan p = best_mixed->plan;
  double best = 1e300;
  for (int first = 1; first < m.layers; ++first) {
    p.layer_split = {first, m.layers - first};
    if (am.memory(p).total > am.memory(p).capacity) continue;
    best = std::min(best, am.evaluate(p).step_time_s);
  }
  EXPECT_LE(best_mixed->prediction.step_time_s, 1.02 * best);
}

}  // namespace
}  // namespace foresight
