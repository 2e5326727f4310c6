// Topology: routes inside and across nodes, ECMP weights, and that a Boost.Graph search agrees.
#include "sim/net/topology.h"

#include <boost/graph/breadth_first_search.hpp>
#include <gtest/gtest.h>

#include <map>

namespace foresight {
namespace {

ClusterSpec cluster(const std::string& name, int gpus) {
  auto c = load_cluster(name);
  EXPECT_TRUE(c.ok());
  EXPECT_TRUE(resize_cluster(*c, gpus, "test").ok());
  return *c;
}

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
    if (u.weight < 1.0) { up_weight += u.weight; ++spine_links; }
  EXPECT_EQ(spine_links, 2 * 8);          // 8 rails up and 8 down
  EXPECT_NEAR(up_weight, 2.0, 1e-12);     // weights 1/8 each: one path's worth each way
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
  boost::breadth_first_search(g, src, boost::visitor(boost::make_bfs_visitor(boost::record_distances(dist.data(), boost::on_tree_edge()))));
  // device -> nic -> leaf -> spine -> leaf -> nic -> device
  EXPECT_EQ(dist[dst], 6);
  const Route r = t.route(0, 240);
  EXPECT_EQ(r.usages.size(), 4u + 2 * 8);  // PCIe, NIC x2, PCIe, plus 8 ECMP links up and 8 down
}

}  // namespace
}  // namespace foresight
