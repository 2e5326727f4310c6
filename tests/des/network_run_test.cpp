// The flow-level network against closed forms and against published NCCL measurements.
#include "sim/des/network_run.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"
#include <nlohmann/json.hpp>

#include <filesystem>

#include "sim/spec/json_reader.h"
#include "sim/validate/collective_case.h"

namespace foresight {
namespace {

ClusterSpec cluster(const std::string& name, int gpus) { return testing::preset_cluster(name, gpus); }

std::vector<int> iota(int from, int n, int stride = 1) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(from + i * stride);
  return v;
}

// Ring all-reduce on one node: 2(n-1)/n * S/B + 2(n-1) * alpha.
TEST(NetworkRun, RingAllReduceClosedForm) {
  const ClusterSpec c = cluster("dgx-a100-hdr", 8);
  const double S = 1 << 30, n = 8, B = 300e9 * 0.775, alpha = c.node.fabric.latency_s;
  auto t = run_collectives(c, {{CollectiveOp::kAllReduce, {iota(0, 8)}, S, Algorithm::kRing}});
  ASSERT_TRUE(t.ok());
  EXPECT_NEAR(t->at(0), 2 * (n - 1) / n * S / B + 2 * (n - 1) * alpha, 1e-9);
  EXPECT_NEAR(bus_bandwidth(CollectiveOp::kAllReduce, 8, S, t->at(0) - 2 * (n - 1) * alpha), B, 1);
}

// Two transfers through the same NIC share it: each takes twice as long as alone.
TEST(NetworkRun, TwoFlowsOnOneLinkGetHalfEach) {
  ClusterSpec c = cluster("dgx-a100-hdr", 16);
  c.node.nics = 4;  // GPUs 0 and 1 share NIC 0
  const double S = 1e9;
  auto alone = run_collectives(c, {{CollectiveOp::kSendRecv, {{0, 8}}, S, std::nullopt}});
  auto both = run_collectives(c, {{CollectiveOp::kSendRecv, {{0, 8}}, S, std::nullopt},
                                  {CollectiveOp::kSendRecv, {{1, 9}}, S, std::nullopt}});
  ASSERT_TRUE(alone.ok());
  ASSERT_TRUE(both.ok());
  const double lat = alone->at(0) - S / (25e9 * 0.96);
  EXPECT_NEAR(both->at(0) - lat, 2 * (alone->at(0) - lat), 1e-9);
  EXPECT_NEAR(both->at(1), both->at(0), 1e-12);
}

// A 4:1 oversubscribed spine makes traffic between leaf groups 4x slower.
TEST(NetworkRun, OversubscribedUpperTierIsFourTimesSlower) {
  ClusterSpec flat = cluster("dgx-a100-hdr", 8 * 40);
  ClusterSpec over = flat;
  over.tiers[1].oversubscription = 4.0;
  // Every node of leaf group 0 sends to its counterpart in group 1 on every rail at once.
  std::vector<std::vector<int>> pairs;
  for (int node = 0; node < 20; ++node)
    for (int g = 0; g < 8; ++g) pairs.push_back({node * 8 + g, (node + 20) * 8 + g});
  const double S = 1e9;
  auto a = run_collectives(flat, {{CollectiveOp::kSendRecv, pairs, S, std::nullopt}});
  auto b = run_collectives(over, {{CollectiveOp::kSendRecv, pairs, S, std::nullopt}});
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  MaxMinSystem sys;
  Topology topo(flat, sys);
  const double lat = topo.route(0, 160).latency_s;
  EXPECT_NEAR((b->at(0) - lat) / (a->at(0) - lat), 4.0, 1e-9);
  // Inside one leaf group the spine is not crossed: no slowdown.
  auto c1 = run_collectives(over, {{CollectiveOp::kSendRecv, {{0, 8}}, S, std::nullopt}});
  auto c0 = run_collectives(flat, {{CollectiveOp::kSendRecv, {{0, 8}}, S, std::nullopt}});
  EXPECT_NEAR(c1->at(0), c0->at(0), 1e-12);
}

TEST(NetworkRun, NvlsBeatsTheRingOnH100) {
  const ClusterSpec c = cluster("dgx-h100-ndr", 8);
  const double S = 8.0 * (1 << 30);
  auto ring = run_collectives(c, {{CollectiveOp::kAllReduce, {iota(0, 8)}, S, Algorithm::kRing}});
  auto chosen = run_collectives(c, {{CollectiveOp::kAllReduce, {iota(0, 8)}, S, std::nullopt}});
  EXPECT_LT(chosen->at(0), ring->at(0));
}

TEST(NetworkRun, EveryAlgorithmCompletes) {
  const ClusterSpec c = cluster("dgx-a100-hdr", 32);
  for (Algorithm a : {Algorithm::kRing, Algorithm::kTree, Algorithm::kHierarchical, Algorithm::kHalvingDoubling}) {
    auto t = run_collectives(c, {{CollectiveOp::kAllReduce, {iota(0, 32)}, 1e8, a}});
    ASSERT_TRUE(t.ok());
    EXPECT_GT(t->at(0), 0) << to_string(a);
    EXPECT_LT(t->at(0), 0.1) << to_string(a);
  }
  auto a2a = run_collectives(c, {{CollectiveOp::kAllToAll, {iota(0, 16)}, 1e8, std::nullopt}});
  ASSERT_TRUE(a2a.ok());
  EXPECT_GT(a2a->at(0), 0);
}

// ../shared/validation/collectives: every published NCCL figure within 15% (busbw).
TEST(NetworkRun, PublishedNcclMeasurementsWithin15Percent) {
  const std::string path = std::string(FORESIGHT_SHARED_DIR) + "/validation/collectives/nccl-published.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no validation data at " << path;
  auto doc = read_json_file(path);
  ASSERT_TRUE(doc.ok());
  ASSERT_TRUE(is_collectives_file(*doc));
  auto cases = collective_cases_from_json(*doc, path);
  ASSERT_TRUE(cases.ok()) << cases.error().message();
  ASSERT_GE(cases->size(), 5u);
  for (const auto& c : *cases) {
    const CollectiveResult r = run_collective_case(c);
    ASSERT_TRUE(r.ok) << c.id << ": " << r.failure;
    EXPECT_LE(std::abs(r.error_pct), 15.0) << c.id << " predicted " << r.predicted_busbw / 1e9 << " GB/s";
  }
}

}  // namespace
}  // namespace foresight
