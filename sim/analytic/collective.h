// Alpha-beta costs of collectives on a group of ranks placed on a cluster, in the nccl-tests
// convention: a collective of S bytes on n ranks with bus bandwidth B takes
//   all-reduce      2(n-1)/n * S / B + latency
//   all-gather / reduce-scatter   (n-1)/n * S / B + latency     (S = the full, gathered size)
//   all-to-all      (n-1)/n * S / B + latency                   (S = bytes each rank sends in all)
//   send/recv       S / B + latency
//
//   GroupLink link = group_link(cluster, /*stride=*/8, /*size=*/64);   // a DP group across nodes
//   double t = allreduce_time(link, 1e9);
#pragma once

#include "sim/spec/hardware.h"

namespace foresight {

// What a group of ranks can achieve as a whole.
struct GroupLink {
  int size = 1;              // ranks in the group
  double bus_bandwidth = 0;  // bytes/s per rank in the busbw convention
  double latency_s = 0;      // alpha per algorithm step
  // Inside one node, collectives below this size take the fabric's small-message protocol and its
  // latency (LinkSpec::small_message_bytes); 0 where there is none or the group crosses nodes.
  double small_message_bytes = 0;
  double small_message_latency_s = 0;
  double alpha(double bytes) const {
    return bytes < small_message_bytes ? small_message_latency_s : latency_s;
  }
  bool crosses_nodes = false;
  // A group across nodes: its ranks in one node, and each rank's own share of the NICs (after the
  // tiers' limits) and of the node's fabric. bus_bandwidth is a ring's, which leaves the node
  // over all the node's members' rails at once; an all-to-all sends each rank's off-node part over
  // its own share.
  int ranks_per_node = 1;
  double rank_nic_bandwidth = 0, intra_bandwidth = 0;
  // A group across nodes: the nodes that hold its ranks, and the latency of a hop between two of
  // its ranks in one node (the fabric's).
  int nodes = 1;
  double intra_latency_s = 0;
  // The latency a step of a ring over this group pays: its hops alternate between the node's
  // fabric and the network (ranks_per_node - 1 inside for each one between nodes), and the data
  // flows around the ring pipelined, so each step costs the hops' mean. NCCL's tuning model
  // (src/graph/tuning.cc: (nsteps - nInterSteps) * intraLat + nInterSteps * interLat) counts a
  // ring the same way, and so does the simulator's ring (net/collective_flows.cpp).
  double ring_alpha(double bytes) const {
    if (!crosses_nodes || nodes >= size) return alpha(bytes);
    return ((size - nodes) * intra_latency_s + nodes * latency_s) / size;
  }
  bool in_switch_reduction = false;  // NVLS-style all-reduce available (single node only)
  double in_switch_bandwidth = 0;    // line rate x NVLS efficiency, per rank
  // Inside one node, where the fabric has collectives with their own rates (LinkSpec::
  // CollectiveRates) or measured times (LinkSpec::measured, which take the formulas' place where
  // they apply): that fabric, which they are read from (it points into the ClusterSpec given
  // to group_link, and is valid as long as it is); null where the fields above apply to every
  // collective, as for every preset (a pointer: the rates inline made the analytic model 11%
  // slower, zeroing them in every link).
  const LinkSpec* own_rates = nullptr;
  bool has_own_rates() const { return own_rates != nullptr; }
  // This link as `op` sees it: the op's own rates in place of the fields above, and none left.
  GroupLink as(CollectiveOp op) const;
};

// The link for a group of `size` ranks whose consecutive members are `stride` ranks apart, with
// ranks numbered node by node. All groups of the same shape are assumed to communicate at the same
// time (as DP groups do), so they share the node's NICs. Tiers the group crosses divide the
// bandwidth by their oversubscription.
// `scattered`: the job's nodes are in no particular order (Plan::node_order "shuffled"): a group
// that leaves its node crosses every tier, and on a torus each ring hop travels the mean distance
// between two nodes, sharing its links with the other rings' hops.
GroupLink group_link(const ClusterSpec& c, int stride, int size, bool scattered = false);
// Mean shortest distance, in links, between two random nodes of a torus with these dimensions.
double torus_mean_hops(const std::vector<int>& dims);

// Latency steps of `op` over n ranks, as the formulas below count them.
double collective_latency_steps(CollectiveOp op, int n);
// The latency part of `op`'s time over `l` (a message of `bytes`), as the formulas below count
// it: a ring's steps at its hops' mean (GroupLink::ring_alpha), an all-reduce's the cheaper of
// the ring's and the tree's.
double collective_latency(const GroupLink& l, CollectiveOp op, double bytes = 0);
// The bytes `op` moves over each rank's bus per byte of its size, as the formulas below count them
// (nccl-tests' busbw factor: an all-reduce 2(n-1)/n, an all-gather or reduce-scatter (n-1)/n, a
// send/recv 1).
double collective_bus_factor(CollectiveOp op, int n);

double allreduce_time(const GroupLink& l, double bytes);
double allgather_time(const GroupLink& l, double bytes);       // bytes: the gathered total
double reduce_scatter_time(const GroupLink& l, double bytes);  // bytes: the full input
double alltoall_time(const GroupLink& l, double bytes);        // bytes: what one rank sends in all
double sendrecv_time(const GroupLink& l, double bytes);

}  // namespace foresight
