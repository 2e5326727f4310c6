// Topology: routes inside and across nodes, ECMP weights, and that a Boost.Graph search agrees.
#include "sim/net/topology.h"

#include <gtest/gtest.h>

#include <boost/graph/breadth_first_search.hpp>
#include <map>

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
  Topology t(cluster("dgx-a100-hdr", 8 * 40), s);  // 40 nodes: 2 leaf groups of 20
  const Route r = t.route(0, 8 * 30);              // node 0 -> node 30: through the spine
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
  Topology t(cluster("dgx-a100-hdr", 8 * 40), s);
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
