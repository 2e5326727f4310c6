// The cluster as a graph: accelerators, their node's switch (NVSwitch-class fabric), NICs, and the
// switches of each network tier, joined by directed links with capacity and latency. Links are
// the resources of the max-min model (maxmin.h); a route is the set of links a message uses, with
// weights below 1 where ECMP spreads it over equal-cost paths.
//
//   Topology t = build_topology(cluster);       // cluster sized with resize_cluster
//   Route r = t.route(0, 8);                     // device 0 (node 0) to device 8 (node 1)
//   // r.usages: gpu0->nic0, nic0->leaf0, leaf0->nic8', ..., r.latency_s
//
// Layout: ranks are numbered node by node; device i of node n is rank n*g + i and uses NIC
// i * nics / g. Each tier groups `span_nodes` nodes under one switch layer; a tier above it has
// `rails` parallel switches, so crossing it offers that many equal-cost paths.
// A "rail" first tier (NetworkTier::topology) is built as a rail-optimised fat tree is cabled:
// each group has one leaf per rail (NIC k of every node of the group on leaf k), and leaf k joins
// only the tier above's rail-k switch. A message between two nodes leaves on the destination's
// rail: where the source device's NIC is another rail, it first crosses the node's fabric to the
// device on that rail (NCCL's PXN, NCCL_P2P_PXN_LEVEL's default), so it never needs a spine to
// change rails.
#pragma once

#include <array>
#include <boost/graph/adjacency_list.hpp>
#include <string>
#include <vector>

#include "sim/net/maxmin.h"
#include "sim/spec/hardware.h"

namespace foresight {

enum class VertexKind { kDevice, kNodeSwitch, kNic, kSwitch };

struct TopoVertex {
  VertexKind kind = VertexKind::kDevice;
  int node = -1;  // the node it belongs to (devices, node switches, NICs)
  int tier = -1;  // the network tier (switches)
  std::string name;
};

struct TopoLink {
  int resource = 0;      // index in the MaxMinSystem
  double bandwidth = 0;  // bytes/s (already scaled by the link's measured efficiency)
  double latency_s = 0;
  std::string kind;  // nvlink, pcie, infiniband, ...
};

using TopoGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, TopoVertex, TopoLink>;

struct Route {
  std::vector<Usage> usages;
  double latency_s = 0;
  bool crosses_nodes = false;
};

class Topology {
 public:
  // Builds the graph and registers one max-min resource per directed link in `system`.
  Topology(const ClusterSpec& cluster, MaxMinSystem& system);

  int devices() const { return devices_; }
  int devices_per_node() const { return per_node_; }
  int node_of(int device) const { return device / per_node_; }
  const TopoGraph& graph() const { return g_; }
  const ClusterSpec& cluster() const { return cluster_; }
  const MaxMinSystem& system() const { return system_; }

  // The links from device `src` to device `dst` (weights 1, or 1/k over k ECMP paths).
  Route route(int src, int dst) const;
  // Links out of / into a device's node switch (in-switch reduction uses only these).
  int device_up(int device) const { return dev_up_[device]; }
  int device_down(int device) const { return dev_down_[device]; }

 private:
  int add_vertex(VertexKind kind, int node, int tier, std::string name);
  int add_link(int from, int to, double bandwidth, double latency, const std::string& kind);

  ClusterSpec cluster_;
  MaxMinSystem& system_;
  TopoGraph g_;
  int devices_ = 0, per_node_ = 1, nodes_ = 1, nics_ = 0;
  bool rail_ = false;                           // a rail-optimised first tier (one leaf per rail and group)
  std::vector<int> dev_up_, dev_down_;          // device <-> node switch
  std::vector<int> dev_nic_up_, dev_nic_down_;  // device <-> its NIC (PCIe)
  std::vector<int> nic_up_, nic_down_;          // NIC <-> its leaf switch, per node*nics + nic
  // Per tier t >= 1: links between each group of tier t-1 and the `rails` switches of tier t.
  struct TierLinks {
    int span = 0;  // nodes per group of this tier (0: all)
    int rails = 1;
    std::vector<int> up, down;  // [lower_group * rails + rail]
    double latency_s = 0;
  };
  std::vector<TierLinks> tiers_;
  // Torus: per node and dimension, the links to the +1 and -1 neighbours (-1 when absent).
  std::vector<int> torus_dims_;
  std::vector<std::array<int, 6>> torus_out_;
  double torus_latency_ = 0;
  // The constructor's steps: each node's switch, devices and NICs (returns the NICs' vertices);
  // the first tier's switches, one per group of nodes or, rail-optimised, one per group and rail
  // (returns them); the tiers above, each group of the tier below joined to its parent group's
  // rails; or instead a torus.
  std::vector<int> build_nodes(double nic_bw);
  std::vector<int> build_tier0(const std::vector<int>& nic_vertex, double nic_bw);
  void build_tiers(std::vector<int> lower_vertex, double nic_bw);
  void build_torus(const NetworkTier& t, const std::vector<int>& nic_vertex, double nic_bw);
  void torus_route(int ns, int nd, Route& r) const;
  std::vector<int> tier_span_;  // nodes per group, per tier (0 = all)
};

}  // namespace foresight
