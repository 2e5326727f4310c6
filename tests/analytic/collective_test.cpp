// Collective costs: the nccl-tests closed forms on the links a group really uses.
#include "sim/analytic/collective.h"

#include <gtest/gtest.h>

#include <cmath>

namespace foresight {
namespace {

ClusterSpec dgx() {
  auto c = load_cluster("dgx-a100-hdr");
  EXPECT_TRUE(c.ok());
  return c.ok() ? *c : ClusterSpec{};
}

TEST(Collective, RingAllReduceInsideANode) {
  const ClusterSpec c = dgx();
  const GroupLink l = group_link(c, 1, 8);
  EXPECT_FALSE(l.crosses_nodes);
  const double bus = 300e9 * 0.775;  // NVLink line rate x measured ring efficiency
  EXPECT_DOUBLE_EQ(l.bus_bandwidth, bus);
  const double n = 8, bytes = 1 << 30, alpha = l.latency_s;
  // 2(n-1)/n * S/B + steps * alpha, steps = min(ring 2(n-1), tree 2*ceil(log2 n)) = 6 for n = 8
  EXPECT_NEAR(allreduce_time(l, bytes), 2 * (n - 1) / n * bytes / bus + 6 * alpha, 1e-12);
  // Two ranks: the ring's 2(n-1) = 2 steps.
  const GroupLink two = group_link(c, 1, 2);
  EXPECT_NEAR(allreduce_time(two, bytes), bytes / bus + 2 * alpha, 1e-12);
  // All-gather and reduce-scatter are rings only (NCCL has no tree for them): n-1 steps each, so
  // together a ring all-reduce, which the tree's fewer steps beat.
  EXPECT_NEAR(allgather_time(l, bytes) + reduce_scatter_time(l, bytes),
              2 * (n - 1) / n * bytes / bus + 2 * (n - 1) * alpha, 1e-12);
  EXPECT_GT(allgather_time(l, bytes) + reduce_scatter_time(l, bytes), allreduce_time(l, bytes));
}

TEST(Collective, AcrossNodesTheNicsAreTheLimit) {
  const ClusterSpec c = dgx();
  // A DP group with TP=8: one rank per node, so one NIC (rail) per group.
  const GroupLink one = group_link(c, 8, 16);
  EXPECT_TRUE(one.crosses_nodes);
  EXPECT_DOUBLE_EQ(one.bus_bandwidth, 25e9 * 0.96);
  // A group of 64 contiguous ranks: 8 per node, all 8 NICs: 192 GB/s busbw, as NCCL measures
  // (nccl issue 812: ~24 GB/s per HDR NIC, 192 GB/s busbw on DGX A100 nodes).
  const GroupLink all = group_link(c, 1, 64);
  EXPECT_NEAR(all.bus_bandwidth, 192e9, 1e6);
  // Latency grows with the tiers crossed: 64 nodes span leaf and spine.
  const GroupLink wide = group_link(c, 8, 64);
  EXPECT_GT(wide.latency_s, one.latency_s);
}

TEST(Collective, OversubscriptionDividesCrossTierBandwidth) {
  ClusterSpec c = dgx();
  c.tiers[1].oversubscription = 4.0;
  const GroupLink inside_leaf = group_link(c, 8, 16);  // 16 nodes < 20 per leaf
  const GroupLink across = group_link(c, 8, 64);       // 64 nodes: crosses the spine
  EXPECT_DOUBLE_EQ(inside_leaf.bus_bandwidth, 25e9 * 0.96);
  EXPECT_DOUBLE_EQ(across.bus_bandwidth, 25e9 * 0.96 / 4);
}

// An all-to-all across nodes sends each rank's off-node part over its own NIC share (the ring's
// eight rails per node do not apply): 16 contiguous ranks on two DGX nodes send half of every
// message over one HDR NIC each, the other members' part over NVLink at the same time.
TEST(Collective, AllToAllAcrossNodesUsesEachRanksOwnNic) {
  const ClusterSpec c = dgx();
  const GroupLink l = group_link(c, 1, 16);
  ASSERT_TRUE(l.crosses_nodes);
  EXPECT_EQ(l.ranks_per_node, 8);
  EXPECT_DOUBLE_EQ(l.rank_nic_bandwidth, 25e9 * 0.96);
  const double bytes = 1 << 28;
  EXPECT_NEAR(alltoall_time(l, bytes), 8.0 / 16 * bytes / (25e9 * 0.96) + l.latency_s, 1e-12);
  // Over four times the ring formula's time on this group's bus bandwidth (all eight rails):
  // 8/16 of the bytes on one rail against 15/16 on eight.
  EXPECT_GT(alltoall_time(l, bytes), 4 * (15.0 / 16 * bytes / l.bus_bandwidth));
  // Inside one node nothing changes.
  const GroupLink in = group_link(c, 1, 8);
  EXPECT_NEAR(alltoall_time(in, bytes), 7.0 / 8 * bytes / in.bus_bandwidth + in.latency_s, 1e-12);
}

// A ring across nodes alternates NVLink hops and network hops: with eight ranks in each node, a
// step costs seven parts the fabric's latency and one the network's (NCCL's tuning model counts
// (nsteps - nInterSteps) * intraLat + nInterSteps * interLat); with one rank per node every hop
// crosses the network.
TEST(Collective, RingStepsAcrossNodesPayTheirHopsMeanLatency) {
  const ClusterSpec c = dgx();
  const GroupLink full = group_link(c, 1, 512);  // 64 whole nodes
  ASSERT_TRUE(full.crosses_nodes);
  EXPECT_EQ(full.nodes, 64);
  const double intra = c.node.fabric.latency_s, inter = full.latency_s;
  ASSERT_GT(inter, intra);
  const double mean = (448 * intra + 64 * inter) / 512;
  EXPECT_NEAR(full.ring_alpha(0), mean, 1e-15);
  const double bytes = 1 << 30;
  EXPECT_NEAR(allgather_time(full, bytes), 511.0 / 512 * bytes / full.bus_bandwidth + 511 * mean, 1e-12);
  EXPECT_NEAR(reduce_scatter_time(full, bytes), allgather_time(full, bytes), 1e-12);
  // An all-reduce takes the cheaper of the ring (its 2(n-1) steps at the mean) and the tree.
  EXPECT_NEAR(collective_latency(full, CollectiveOp::kAllReduce),
              std::min(2 * 511 * mean, 2 * std::ceil(std::log2(512.0)) * inter), 1e-15);
  // One rank per node: all network hops, as before.
  const GroupLink rails = group_link(c, 8, 64);
  EXPECT_EQ(rails.nodes, 64);
  EXPECT_DOUBLE_EQ(rails.ring_alpha(0), rails.latency_s);
  EXPECT_NEAR(collective_latency(rails, CollectiveOp::kAllGather), 63 * rails.latency_s, 1e-15);
}

TEST(Collective, SmallGroupsAndEmptyMessagesCostNothing) {
  const GroupLink l = group_link(dgx(), 1, 1);
  EXPECT_EQ(allreduce_time(l, 1e9), 0.0);
  EXPECT_EQ(alltoall_time(group_link(dgx(), 1, 8), 0), 0.0);
}

}  // namespace
}  // namespace foresight
