// Topology-aware placement: the rank order (Megatron-Core's `order`) and the node order decide
// which devices a group spans; a naive placement (tensor parallelism across nodes, nodes in
// scheduler order on a torus) costs what both executors say it costs.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "sim/analytic/analytic_model.h"
#include "sim/analytic/collective.h"
#include "sim/des/simulator.h"
#include "tests/engines.h"
#include "tests/test_util.h"

namespace foresight {
namespace {

TEST(Placement, RankOrderStrides) {
  Plan p = testing::make_plan(8, 4, 16, 1, 64);
  p.cp = 2;
  EXPECT_EQ(p.rank_strides(), (std::array<int, 4>{1, 8, 16, 256}));
  p.rank_order = "dp-tp-cp-pp";
  EXPECT_EQ(p.rank_strides(), (std::array<int, 4>{16, 128, 1, 256}));
  EXPECT_TRUE(check_rank_order("pp-dp-cp-tp").ok());
  EXPECT_FALSE(check_rank_order("tp-dp-pp").ok());
  EXPECT_FALSE(check_rank_order("tp-tp-dp-pp").ok());
  auto s = check_rank_order("tp-cp-xp-pp");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("\"xp\""), std::string::npos) << s.error().message();
  auto back = plan_from_json(plan_to_json(p), "x.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, p);
  auto bad = plan_from_json(nlohmann::json{{"global_batch", 8}, {"node_order", "random"}}, "plan.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("/node_order"), std::string::npos);
  bad = plan_from_json(nlohmann::json{{"global_batch", 8}, {"rank_order", "tp-dp"}}, "plan.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("/rank_order"), std::string::npos);
}

TEST(Placement, RankDevices) {
  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 64);
  Plan p = testing::make_plan(8, 1, 8, 1, 64);
  const std::vector<int> megatron = rank_devices(p, c);
  for (int r = 0; r < 64; ++r) EXPECT_EQ(megatron[r], r);
  p.rank_order = "dp-tp-cp-pp";
  const std::vector<int> dp_first = rank_devices(p, c);
  // Rank r = tp + 8 dp now sits at position dp + 8 tp: a TP group spans 8 nodes, a DP group one.
  for (int r = 0; r < 64; ++r) EXPECT_EQ(dp_first[r], (r / 8) + 8 * (r % 8));
  p.rank_order = Plan{}.rank_order;
  p.node_order = "shuffled";
  const std::vector<int> shuffled = rank_devices(p, c);
  EXPECT_EQ(shuffled, rank_devices(p, c));  // deterministic
  EXPECT_EQ(std::set<int>(shuffled.begin(), shuffled.end()).size(), 64u);
  EXPECT_NE(shuffled, megatron);
  for (int r = 0; r < 64; ++r) EXPECT_EQ(shuffled[r] % 8, r % 8);  // devices keep their place in the node
  const std::vector<int> perm = node_permutation(p, 8);
  EXPECT_EQ(std::set<int>(perm.begin(), perm.end()).size(), 8u);
}

// Tensor parallelism across nodes (data parallelism inside them) against Megatron's order: the
// analytic model and the simulator, routing the same placement, see the same loss.
TEST(Placement, TensorParallelAcrossNodesCostsInBothExecutors) {
  const ModelSpec m = testing::preset_model("llama3-70b");
  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 64);
  Plan p = testing::make_plan(8, 1, 8, 1, 64);
  p.zero_stage = 1;
  p.sequence_parallel = true;
  p.recompute = Recompute::kFull;
  const Prediction good = AnalyticModel(m, c).evaluate(p);
  p.rank_order = "dp-tp-cp-pp";
  const Prediction naive = AnalyticModel(m, c).evaluate(p);
  EXPECT_GT(naive.time.tp_comm, 5 * good.time.tp_comm);
  EXPECT_GT(naive.step_time_s, 1.5 * good.step_time_s);
  testing::expect_engines_agree(m, c, p, 0.05);
}

// On a 4x4x4 torus the data-parallel rings of a linear placement follow torus lines (one link
// per hop, shared by the node's 8 rings); nodes in scheduler order make each hop cross 3 links on
// average. Both executors agree on both.
TEST(Placement, ScatteredNodesOnATorus) {
  EXPECT_DOUBLE_EQ(torus_mean_hops({4, 4, 4}), 3.0);
  EXPECT_DOUBLE_EQ(torus_mean_hops({5}), 6.0 / 5);
  const ModelSpec m = testing::preset_model("llama3-8b");
  const ClusterSpec c = testing::preset_cluster("torus-3d", 512);
  Plan p = testing::make_plan(8, 1, 64, 1, 64);
  p.zero_stage = 1;
  p.sequence_parallel = true;
  p.recompute = Recompute::kFull;
  const Prediction line = AnalyticModel(m, c).evaluate(p);
  p.node_order = "shuffled";
  const Prediction scattered = AnalyticModel(m, c).evaluate(p);
  EXPECT_NEAR(scattered.time.dp_comm / line.time.dp_comm, 3.0, 0.3);
  for (const char* order : {"linear", "shuffled"}) {
    p.node_order = order;
    const Prediction a = AnalyticModel(m, c).evaluate(p);
    auto d = simulate(m, c, p, "plan", {});
    ASSERT_TRUE(d.ok()) << d.error().message();
    EXPECT_NEAR(d->prediction.time.dp_comm, a.time.dp_comm, 0.1 * a.time.dp_comm) << order;
  }
}

TEST(Placement, NotWithStageDevices) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  auto c = load_cluster("hetero-node");
  ASSERT_TRUE(c.ok());
  Plan p = testing::make_plan(1, 2, 1, 1, 8);
  p.stage_devices = {c->node.devices[0].device.name, c->node.devices[0].device.name};
  p.rank_order = "dp-tp-cp-pp";
  auto s = validate_plan_on(p, m, *c, "plan.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("rank_order"), std::string::npos) << s.error().message();
}

}  // namespace
}  // namespace foresight
