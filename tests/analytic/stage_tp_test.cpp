// Per-layer-group strategies: each pipeline stage with its own tensor-parallel degree
// (Plan::stage_tp), the same ranks per stage, the replicas and micro-batch sizes that follow.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "sim/analytic/analytic_model.h"
#include "sim/analytic/layer_cost.h"
#include "sim/des/simulator.h"
#include "sim/workload/workload.h"
#include "tests/engines.h"
#include "tests/test_util.h"

namespace foresight {
namespace {

Plan base() {
  Plan p = testing::make_plan(8, 4, 16, 8, 512);  // 512 GPUs, 4 micro-batches of 8 x 16 sequences
  p.zero_stage = 1;
  p.sequence_parallel = true;
  p.recompute = Recompute::kFull;
  return p;
}

TEST(StageTp, StageView) {
  Plan p = base();
  p.stage_tp = {1, 8, 8, 4};
  const Plan s0 = stage_view(p, 0), s3 = stage_view(p, 3);
  EXPECT_EQ(s0.tp, 1);
  EXPECT_EQ(s0.dp, 128);
  EXPECT_EQ(s0.micro_batch, 1);
  EXPECT_FALSE(s0.sequence_parallel);
  EXPECT_EQ(s0.micro_batches(), p.micro_batches());
  EXPECT_EQ(s3.tp, 4);
  EXPECT_EQ(s3.dp, 32);
  EXPECT_EQ(s3.micro_batch, 4);
  EXPECT_TRUE(s3.stage_tp.empty());
  EXPECT_EQ(stage_view(base(), 2), base());
  EXPECT_NE(layout_string(p).find("tp per stage 1,8,8,4"), std::string::npos) << layout_string(p);
}

TEST(StageTp, UniformIsThePlainPlan) {
  const ModelSpec m = testing::preset_model("gpt3-175b");
  const ClusterSpec c = testing::preset_cluster("dgx-a100-hdr", 512);
  Plan p = base();
  const Prediction plain = AnalyticModel(m, c).evaluate(p);
  p.stage_tp = {8, 8, 8, 8};
  const Prediction same = AnalyticModel(m, c).evaluate(p);
  EXPECT_DOUBLE_EQ(same.step_time_s, plain.step_time_s);
  EXPECT_DOUBLE_EQ(same.memory.total, plain.memory.total);
}

// The article's shape on GPT-3 175B: a data-parallel first group of 10 layers, the middle on
// TP 8, a pipeline-only last group of 5 layers.
TEST(StageTp, GroupsOfLayers) {
  const ModelSpec m = testing::preset_model("gpt3-175b");
  const ClusterSpec c = testing::preset_cluster("dgx-a100-hdr", 512);
  Plan p = base();
  // ZeRO-3 across pipeline stages shards only the optimizer's state (Plan::zero3_whole_step): a
  // tensor-parallel degree of 1 holds its stage's layers whole, weights and fp32 gradients, so
  // the tp-1 stages take two layers each.
  p.zero_stage = 3;
  p.layer_split = {2, 46, 46, 2};
  const AnalyticModel am(m, c);
  const Prediction uniform = am.evaluate(p);
  p.stage_tp = {1, 8, 8, 1};
  ASSERT_TRUE(validate_plan_on(p, m, c, "plan.json").ok())
      << validate_plan_on(p, m, c, "plan.json").error().message();
  const Prediction grouped = am.evaluate(p);
  // The middle stages are the slowest either way: the same tensor-parallel traffic per layer.
  EXPECT_GT(grouped.step_time_s, 0);
  EXPECT_NEAR(grouped.time.tp_comm, uniform.time.tp_comm, 0.02 * uniform.time.tp_comm);
  // Stage 0 at tp 1 holds its 2 layers and the embedding, its optimizer's state sharded over 128
  // replicas.
  const MemoryBreakdown mem = am.memory(p);
  EXPECT_TRUE(mem.fits()) << describe_memory(mem);
  // The simulator runs each stage at its own degree: its groups, kernels and micro-batches.
  testing::expect_engines_agree(m, c, p, 0.05, "grouped");
  p.layer_split = {3, 45, 45, 3};
  testing::expect_engines_agree(m, c, p, 0.05, "three layers at tp 1");
}

TEST(StageTp, SimulatorGroupsFollowEachStage) {
  const ModelSpec m = testing::preset_model("gpt3-175b");
  const ClusterSpec c = testing::preset_cluster("dgx-a100-hdr", 512);
  Plan p = base();
  p.zero_stage = 3;
  p.stage_tp = {1, 8, 8, 4};
  auto w = lower(m, c, p);
  ASSERT_TRUE(w.ok()) << w.error().message();
  EXPECT_EQ(w->stage_ranks(), 128);
  EXPECT_EQ(w->group_members(5, GroupKind::kTp), std::vector<int>{5});  // stage 0: tp 1
  EXPECT_EQ(w->group_members(5, GroupKind::kDp).size(), 128u);          // 128 replicas
  EXPECT_EQ(w->group_members(128 + 9, GroupKind::kTp).size(), 8u);      // stage 1: tp 8
  EXPECT_EQ(w->group_members(128 + 9, GroupKind::kTp).front(), 128 + 8);
  EXPECT_EQ(w->group_members(3 * 128 + 6, GroupKind::kTp),
            (std::vector<int>{388, 389, 390, 391}));  // stage 3: tp 4
  EXPECT_EQ(w->group_members(3 * 128 + 6, GroupKind::kDp).size(), 32u);
  EXPECT_EQ(w->counterpart(5, 1), 133);
}

TEST(StageTp, PlanChecks) {
  const ModelSpec m = testing::preset_model("gpt3-175b");
  Plan p = base();
  p.stage_tp = {1, 8, 8};
  auto s = validate_plan(p, m, 512, "plan.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("/stage_tp: has 3 entries for pp = 4"), std::string::npos)
      << s.error().message();
  p.stage_tp = {1, 8, 8, 1};
  p.micro_batch = 1;
  p.global_batch = 64;
  s = validate_plan(p, m, 512, "plan.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("cannot split"), std::string::npos) << s.error().message();
  p = base();
  p.stage_tp = {3, 8, 8, 8};
  EXPECT_FALSE(validate_plan(p, m, 512, "plan.json").ok());  // 96 heads are divisible by 3, 128 ranks are not
  p.stage_tp = {8, 8, 8, 8};
  p.schedule = Schedule::kDualPipe;
  EXPECT_FALSE(validate_plan(p, m, 512, "plan.json").ok());
  p = base();
  p.stage_tp = {2, 8, 8, 4};
  auto back = plan_from_json(plan_to_json(p), "x.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, p);
  auto bad = plan_from_json(nlohmann::json{{"global_batch", 8}, {"stage_tp", {1, 0}}}, "plan.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("/stage_tp/1"), std::string::npos) << bad.error().message();
}

}  // namespace
}  // namespace foresight
