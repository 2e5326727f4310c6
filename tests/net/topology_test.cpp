// Topology: routes inside and across nodes, ECMP weights, and that a Boost.Graph search agrees.
#include "sim/net/topology.h"

#include <gtest/gtest.h>

#include <boost/graph/breadth_first_search.hpp>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"

namespace foresight {
namespace {

ClusterSpec cluster(const std::string& name, int gpus) { return testing::preset_cluster(name, gpus); }

TEST(Topology, InsideANodeTwoNvlinkHops) {
  MaxMinSystem s;
  Topology t(cluster("dgx-a100-hdr", 16), s);
  const Route r = t.route(0, 5);
  EXPECT_FALSE(r.crosses_nodes);
  ASSERT_EQ(r.usages.size(), 2u);
  EXPECT_DOUBLE_EQ(s.capacity(r.usages[0].resource), 300e9 * 0.775);
}

TEST(Topology, AcrossNodesThroughTheRightNic) {
  MaxMinSystem s;
  Topology t(cluster("dgx-a100-hdr", 16), s);
  const Route r = t.route(3, 11);  // node 0 GPU 3 -> node 1 GPU 3: rail 3, same leaf
  EXPECT_TRUE(r.crosses_nodes);
  // PCIe up, NIC up, NIC down, PCIe down.
  ASSERT_EQ(r.usages.size(), 4u);
  EXPECT_DOUBLE_EQ(s.capacity(r.usages[1].resource), 25e9 * 0.96);
  EXPECT_GT(r.latency_s, 0.0);
}

TEST(Topology, CrossingTheSpineSpreadsOverRails) {
  MaxMinSystem s;
  Topology t(cluster("dgx-a100-40gb-hdr", 8 * 40), s);  // 40 nodes: 2 leaf groups of 20, not by rail
  const Route r = t.route(0, 8 * 30);                   // node 0 -> node 30: through the spine
  double up_weight = 0;
  int spine_links = 0;
  for (const Usage& u : r.usages)
    if (u.weight < 1.0) {
      up_weight += u.weight;
      ++spine_links;
    }
  EXPECT_EQ(spine_links, 2 * 8);       // 8 rails up and 8 down
  EXPECT_NEAR(up_weight, 2.0, 1e-12);  // weights 1/8 each: one path's worth each way
}

TEST(Topology, GraphSearchFindsTheSameHopCount) {
  MaxMinSystem s;
  Topology t(cluster("dgx-a100-40gb-hdr", 8 * 40), s);
  const TopoGraph& g = t.graph();
  // Device vertices are named rank<N>; find rank 0 and rank 240.
  int src = -1, dst = -1;
  for (auto v : boost::make_iterator_range(boost::vertices(g))) {
    if (g[v].name == "rank0") src = static_cast<int>(v);
    if (g[v].name == "rank240") dst = static_cast<int>(v);
  }
  ASSERT_GE(src, 0);
  ASSERT_GE(dst, 0);
  std::vector<int> dist(boost::num_vertices(g), -1);
  dist[src] = 0;
  boost::breadth_first_search(
      g, src,
      boost::visitor(boost::make_bfs_visitor(boost::record_distances(dist.data(), boost::on_tree_edge()))));
  // device -> nic -> leaf -> spine -> leaf -> nic -> device
  EXPECT_EQ(dist[dst], 6);
  const Route r = t.route(0, 240);
  EXPECT_EQ(r.usages.size(), 4u + 2 * 8);  // PCIe, NIC x2, PCIe, plus 8 ECMP links up and 8 down
}

// A rail-optimised SuperPOD (dgx-h100-ndr: scalable units of 32 nodes, 8 rails): a leaf per rail
// and unit; a message leaves on the destination's rail, crossing NVLink first where the source's
// NIC is another rail (PXN), and crosses the spine on that rail only.
TEST(Topology, RailOptimisedLeavesAndPxn) {
  MaxMinSystem s;
  Topology t(cluster("dgx-h100-ndr", 8 * 64), s);  // 2 units of 32 nodes
  int leaves = 0, spines = 0;
  for (auto v : boost::make_iterator_range(boost::vertices(t.graph()))) {
    const TopoVertex& tv = t.graph()[v];
    if (tv.kind == VertexKind::kSwitch) ++(tv.tier == 0 ? leaves : spines);
  }
  EXPECT_EQ(leaves, 2 * 8);
  EXPECT_EQ(spines, 8);
  auto all_whole = [](const Route& r) {
    for (const Usage& u : r.usages)
      if (u.weight != 1.0) return false;
    return true;
  };
  // Same unit, same rail: PCIe, NIC up, NIC down, PCIe.
  const Route same = t.route(3, 8 * 5 + 3);
  EXPECT_EQ(same.usages.size(), 4u);
  EXPECT_TRUE(all_whole(same));
  // Same unit, rail 0 to rail 3: NVLink to GPU 3 of node 0 first, then its NIC; no spine.
  const Route pxn = t.route(0, 8 * 5 + 3);
  ASSERT_EQ(pxn.usages.size(), 6u);
  EXPECT_TRUE(all_whole(pxn));
  EXPECT_EQ(pxn.usages[0].resource, t.device_up(0));
  EXPECT_EQ(pxn.usages[1].resource, t.device_down(3));
  EXPECT_GT(pxn.latency_s, same.latency_s);
  // Across units: the same, plus rail 3's spine link up and down (weight 1, not spread).
  const Route far = t.route(0, 8 * 40 + 3);
  ASSERT_EQ(far.usages.size(), 8u);
  EXPECT_TRUE(all_whole(far));
}

TEST(Topology, RailLeavesOnlyInTheFirstTier) {
  nlohmann::json j = {
      {"name", "c"},
      {"node", "dgx-h100"},
      {"nodes", 4},
      {"tiers", {{{"name", "leaf"}, {"span_nodes", 2}}, {{"name", "spine"}, {"topology", "rail"}}}}};
  const auto c = cluster_from_json(j, "c.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("/tiers/1/topology"), std::string::npos) << c.error().message();
  EXPECT_NE(c.error().message().find("first-tier"), std::string::npos) << c.error().message();
}

// 4x4x4 torus: node 0 = (0,0,0) to node 42 = (2,2,2) takes 2 hops per dimension; to node 3 =
// (3,0,0) one hop the short way round (wrap-around).
TEST(Topology, TorusDimensionOrderRouting) {
  MaxMinSystem s;
  Topology t(cluster("torus-3d", 512), s);
  auto torus_hops = [&](int a, int b) {
    int n = 0;
    for (const Usage& u : t.route(a * 8, b * 8).usages)
      if (s.capacity(u.resource) == 400e9 / 8 * 0.875) ++n;  // torus links (NIC links are 400G too)
    return n;
  };
  // NIC up + NIC down share the torus links' capacity, so subtract those two.
  EXPECT_EQ(torus_hops(0, 42) - 2, 6);
  EXPECT_EQ(torus_hops(0, 3) - 2, 1);
  EXPECT_EQ(torus_hops(0, 1) - 2, 1);
  ClusterSpec wrong = cluster("torus-3d", 256);
  EXPECT_FALSE(check_cluster_shape(wrong, "torus-3d").ok());
}

}  // namespace
}  // namespace foresight
