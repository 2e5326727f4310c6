// Building the cluster graph and routing on it.
#include "sim/net/topology.h"

#include <algorithm>

namespace foresight {

int Topology::add_vertex(VertexKind kind, int node, int tier, std::string name) {
  return static_cast<int>(boost::add_vertex(TopoVertex{kind, node, tier, std::move(name)}, g_));
}

int Topology::add_link(int from, int to, double bandwidth, double latency, const std::string& kind) {
  const int resource = system_.add_resource(bandwidth);
  boost::add_edge(from, to, TopoLink{resource, bandwidth, latency, kind}, g_);
  return resource;
}

Topology::Topology(const ClusterSpec& cluster, MaxMinSystem& system) : cluster_(cluster), system_(system) {
  const NodeSpec& node = cluster.node;
  per_node_ = std::max(1, node.accelerator_slots());  // every accelerator group (rank_devices maps ranks)
  nodes_ = std::max(1, cluster.nodes);
  devices_ = per_node_ * nodes_;
  nics_ = node.nics;
  rail_ = !cluster.tiers.empty() && cluster.tiers[0].topology == "rail" && nics_ > 0;
  const double nic_bw = node.nic.bandwidth * node.nic.efficiency;

  // Tier spans, lowest first; the top tier spans everything.
  for (const NetworkTier& t : cluster.tiers)
    tier_span_.push_back(t.span_nodes > 0 ? std::min(t.span_nodes, nodes_) : nodes_);
  if (tier_span_.empty() && nodes_ > 1) tier_span_.push_back(nodes_);
  if (!tier_span_.empty()) tier_span_.back() = nodes_;

  const std::vector<int> nic_vertex = build_nodes(nic_bw);
  if (tier_span_.empty() || nics_ == 0) return;
  if (!cluster.tiers.empty() && cluster.tiers[0].topology == "torus") {
    build_torus(cluster.tiers[0], nic_vertex, nic_bw);
    return;
  }
  build_tiers(build_tier0(nic_vertex, nic_bw), nic_bw);
}

std::vector<int> Topology::build_nodes(double nic_bw) {
  const NodeSpec& node = cluster_.node;
  const double fabric_bw = node.fabric.bandwidth * node.fabric.efficiency;
  const double pcie_bw =
      node.host_link.bandwidth > 0 ? node.host_link.bandwidth * node.host_link.efficiency : nic_bw;
  dev_up_.resize(devices_);
  dev_down_.resize(devices_);
  dev_nic_up_.assign(devices_, -1);
  dev_nic_down_.assign(devices_, -1);
  std::vector<int> device_vertex(devices_), nic_vertex;
  for (int n = 0; n < nodes_; ++n) {
    const int sw = add_vertex(VertexKind::kNodeSwitch, n, -1, "node" + std::to_string(n) + "/switch");
    for (int i = 0; i < per_node_; ++i) {
      const int d = n * per_node_ + i;
      device_vertex[d] = add_vertex(VertexKind::kDevice, n, -1, "rank" + std::to_string(d));
      dev_up_[d] = add_link(device_vertex[d], sw, fabric_bw, node.fabric.latency_s, node.fabric.kind);
      dev_down_[d] = add_link(sw, device_vertex[d], fabric_bw, node.fabric.latency_s, node.fabric.kind);
    }
    for (int k = 0; k < nics_; ++k)
      nic_vertex.push_back(
          add_vertex(VertexKind::kNic, n, -1, "node" + std::to_string(n) + "/nic" + std::to_string(k)));
    for (int i = 0; i < per_node_ && nics_ > 0; ++i) {
      const int d = n * per_node_ + i;
      const int nic = nic_vertex[n * nics_ + i * nics_ / per_node_];
      dev_nic_up_[d] =
          add_link(device_vertex[d], nic, pcie_bw, node.host_link.latency_s, node.host_link.kind);
      dev_nic_down_[d] =
          add_link(nic, device_vertex[d], pcie_bw, node.host_link.latency_s, node.host_link.kind);
    }
  }
  return nic_vertex;
}

std::vector<int> Topology::build_tier0(const std::vector<int>& nic_vertex, double nic_bw) {
  // Tier 0: one (aggregated) switch per group of span nodes, every NIC of the group attached; or,
  // rail-optimised, one per group and rail, NIC k of each node on the group's leaf k.
  const NodeSpec& node = cluster_.node;
  const NetworkTier* t0 = cluster_.tiers.empty() ? nullptr : &cluster_.tiers[0];
  const double over0 = t0 ? t0->oversubscription : 1.0;
  const double lat0 = t0 ? t0->latency_s : 0.0;
  const int groups0 = (nodes_ + tier_span_[0] - 1) / tier_span_[0];
  const int leaves = rail_ ? nics_ : 1;
  std::vector<int> leaf_vertex(static_cast<std::size_t>(groups0) * leaves);
  for (int gi = 0; gi < groups0; ++gi)
    for (int k = 0; k < leaves; ++k)
      leaf_vertex[gi * leaves + k] = add_vertex(
          VertexKind::kSwitch, -1, 0,
          "tier0/group" + std::to_string(gi) + (rail_ ? "/rail" + std::to_string(k) : std::string()));
  nic_up_.resize(static_cast<std::size_t>(nodes_) * nics_);
  nic_down_.resize(nic_up_.size());
  for (int n = 0; n < nodes_; ++n) {
    for (int k = 0; k < nics_; ++k) {
      const int v = nic_vertex[n * nics_ + k];
      const int leaf = leaf_vertex[(n / tier_span_[0]) * leaves + (rail_ ? k : 0)];
      nic_up_[n * nics_ + k] = add_link(v, leaf, nic_bw / over0, node.nic.latency_s + lat0, node.nic.kind);
      nic_down_[n * nics_ + k] = add_link(leaf, v, nic_bw / over0, node.nic.latency_s + lat0, node.nic.kind);
    }
  }
  return leaf_vertex;
}

void Topology::build_tiers(std::vector<int> lower_vertex, double nic_bw) {
  // Higher tiers: each lower group connects to the `rails` switches of its parent group.
  const NodeSpec& node = cluster_.node;
  int lower_span = tier_span_[0];
  for (std::size_t t = 1; t < tier_span_.size(); ++t) {
    const NetworkTier& tier = cluster_.tiers[t];
    TierLinks tl;
    tl.span = tier_span_[t];
    tl.rails = std::max(1, nics_);
    tl.latency_s = tier.latency_s;
    const double per_node =
        tier.bandwidth_per_node > 0 ? tier.bandwidth_per_node * node.nic.efficiency : nics_ * nic_bw;
    const int groups = (nodes_ + tl.span - 1) / tl.span;
    std::vector<int> upper(static_cast<std::size_t>(groups) * tl.rails);
    for (int gi = 0; gi < groups; ++gi)
      for (int r = 0; r < tl.rails; ++r)
        upper[gi * tl.rails + r] = add_vertex(
            VertexKind::kSwitch, -1, static_cast<int>(t),
            "tier" + std::to_string(t) + "/group" + std::to_string(gi) + "/rail" + std::to_string(r));
    // Rail-optimised leaves (tier 1 only): the lower end of rail r's links is the group's leaf r.
    const bool by_rail = rail_ && t == 1;
    const int lower_groups = static_cast<int>(lower_vertex.size()) / (by_rail ? tl.rails : 1);
    tl.up.resize(static_cast<std::size_t>(lower_groups) * tl.rails);
    tl.down.resize(tl.up.size());
    for (int lg = 0; lg < lower_groups; ++lg) {
      const int nodes_in = std::min(lower_span, nodes_ - lg * lower_span);
      const double cap = nodes_in * per_node / tier.oversubscription / tl.rails;
      const int parent = lg * lower_span / tl.span;
      for (int r = 0; r < tl.rails; ++r) {
        const int lower = lower_vertex[by_rail ? lg * tl.rails + r : lg];
        tl.up[lg * tl.rails + r] =
            add_link(lower, upper[parent * tl.rails + r], cap, tier.latency_s, tier.kind);
        tl.down[lg * tl.rails + r] =
            add_link(upper[parent * tl.rails + r], lower, cap, tier.latency_s, tier.kind);
      }
    }
    tiers_.push_back(std::move(tl));
    // The next tier sees each group of this one as a single endpoint.
    lower_vertex.assign(groups, 0);
    for (int gi = 0; gi < groups; ++gi) lower_vertex[gi] = upper[gi * std::max(1, nics_)];
    lower_span = tier_span_[t];
  }
}

void Topology::build_torus(const NetworkTier& t, const std::vector<int>& nic_vertex, double nic_bw) {
  torus_dims_ = t.dims;
  torus_latency_ = t.latency_s;
  const NodeSpec& node = cluster_.node;
  std::vector<int> router(nodes_);
  for (int n = 0; n < nodes_; ++n)
    router[n] = add_vertex(VertexKind::kSwitch, n, 0, "node" + std::to_string(n) + "/torus-router");
  nic_up_.resize(static_cast<std::size_t>(nodes_) * nics_);
  nic_down_.resize(nic_up_.size());
  for (int n = 0; n < nodes_; ++n)
    for (int k = 0; k < nics_; ++k) {
      nic_up_[n * nics_ + k] =
          add_link(nic_vertex[n * nics_ + k], router[n], nic_bw, node.nic.latency_s, node.nic.kind);
      nic_down_[n * nics_ + k] =
          add_link(router[n], nic_vertex[n * nics_ + k], nic_bw, node.nic.latency_s, node.nic.kind);
    }
  torus_out_.assign(nodes_, {-1, -1, -1, -1, -1, -1});
  const double bw = t.link_bandwidth * node.nic.efficiency;
  for (int n = 0; n < nodes_; ++n) {
    int stride = 1;
    for (std::size_t d = 0; d < torus_dims_.size(); ++d) {
      const int size = torus_dims_[d];
      const int coord = (n / stride) % size;
      if (size > 1) {
        const int plus = n + ((coord + 1) % size - coord) * stride;
        const int minus = n + ((coord + size - 1) % size - coord) * stride;
        torus_out_[n][2 * d] = add_link(router[n], router[plus], bw, t.latency_s, t.kind);
        if (minus != plus)
          torus_out_[n][2 * d + 1] = add_link(router[n], router[minus], bw, t.latency_s, t.kind);
        else
          torus_out_[n][2 * d + 1] = torus_out_[n][2 * d];
      }
      stride *= size;
    }
  }
}

// Dimension-order routing: fix x, then y, then z, each the short way round (ties go +).
void Topology::torus_route(int ns, int nd, Route& r) const {
  int cur = ns, stride = 1;
  for (std::size_t d = 0; d < torus_dims_.size(); ++d) {
    const int size = torus_dims_[d];
    const int from = (cur / stride) % size, to = (nd / stride) % size;
    const int forward = (to - from + size) % size;
    const bool plus = forward <= size - forward;
    const int hops = plus ? forward : size - forward;
    for (int h = 0; h < hops; ++h) {
      const int c = (cur / stride) % size;
      r.usages.push_back({torus_out_[cur][2 * d + (plus ? 0 : 1)], 1.0});
      cur += (((c + (plus ? 1 : size - 1)) % size) - c) * stride;
      r.latency_s += torus_latency_;
    }
    stride *= size;
  }
}

Route Topology::route(int src, int dst) const {
  Route r;
  if (src == dst) return r;
  const int ns = node_of(src), nd = node_of(dst);
  const NodeSpec& node = cluster_.node;
  if (ns == nd) {
    r.usages = {{dev_up_[src], 1.0}, {dev_down_[dst], 1.0}};
    r.latency_s = node.fabric.latency_s;
    return r;
  }
  r.crosses_nodes = true;
  const int rail_d = (dst % per_node_) * nics_ / per_node_;
  int from = src;  // the device whose NIC the message leaves by
  if (rail_ && (src % per_node_) * nics_ / per_node_ != rail_d) {
    // PXN: over the node's fabric to the first device on the destination's rail.
    from = ns * per_node_ + (rail_d * per_node_ + nics_ - 1) / nics_;
    r.usages = {{dev_up_[src], 1.0}, {dev_down_[from], 1.0}};
    r.latency_s += node.fabric.latency_s;
  }
  const int nic_s = ns * nics_ + (from % per_node_) * nics_ / per_node_;
  const int nic_d = nd * nics_ + rail_d;
  r.usages.push_back({dev_nic_up_[from], 1.0});
  r.usages.push_back({nic_up_[nic_s], 1.0});
  if (!torus_dims_.empty()) {
    r.latency_s = node.host_link.latency_s + node.nic.latency_s;
    torus_route(ns, nd, r);
    r.usages.push_back({nic_down_[nic_d], 1.0});
    r.usages.push_back({dev_nic_down_[dst], 1.0});
    return r;
  }
  r.latency_s += node.host_link.latency_s + node.nic.latency_s +
                 (cluster_.tiers.empty() ? 0.0 : cluster_.tiers[0].latency_s);
  // Climb until both nodes share a group; ECMP spreads evenly over the rails of each tier crossed.
  // Rail-optimised, the first tier above the leaves is crossed on the message's rail only.
  int lower_span = tier_span_[0];
  std::vector<Usage> down;
  for (std::size_t t = 0; t < tiers_.size(); ++t) {
    const TierLinks& tl = tiers_[t];
    if (ns / lower_span == nd / lower_span) break;
    const int gs = ns / lower_span, gd = nd / lower_span;
    if (rail_ && t == 0) {
      r.usages.push_back({tl.up[gs * tl.rails + rail_d], 1.0});
      down.push_back({tl.down[gd * tl.rails + rail_d], 1.0});
    } else {
      const double w = 1.0 / tl.rails;
      for (int k = 0; k < tl.rails; ++k) {
        r.usages.push_back({tl.up[gs * tl.rails + k], w});
        down.push_back({tl.down[gd * tl.rails + k], w});
      }
    }
    r.latency_s += tl.latency_s;
    lower_span = tl.span;
  }
  r.usages.insert(r.usages.end(), down.rbegin(), down.rend());
  r.usages.push_back({nic_down_[nic_d], 1.0});
  r.usages.push_back({dev_nic_down_[dst], 1.0});
  return r;
}

}  // namespace foresight
