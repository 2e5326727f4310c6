// Decomposing collectives into flows, per algorithm, and choosing among algorithms.
#include "sim/net/collective_flows.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace foresight {

std::string_view to_string(Algorithm a) {
  switch (a) {
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kTree:
      return "tree";
    case Algorithm::kHierarchical:
      return "hierarchical";
    case Algorithm::kHalvingDoubling:
      return "halving_doubling";
    case Algorithm::kDirect:
      return "direct";
    case Algorithm::kInSwitch:
      return "in_switch";
    case Algorithm::kPointToPoint:
      return "p2p";
  }
  return "ring";
}

namespace {

// Accumulates flows into one phase, summing usage weights per link.
class PhaseBuilder {
 public:
  PhaseBuilder(const Topology& topo, double bytes) : topo_(topo) { phase_.bytes = bytes; }
  void flow(int src, int dst) {
    if (src == dst) return;
    const Route r = topo_.route(src, dst);
    for (const Usage& u : r.usages) weights_[u.resource] += u.weight;
    phase_.latency_s = std::max(phase_.latency_s, r.latency_s);
    phase_.crosses_nodes = phase_.crosses_nodes || r.crosses_nodes;
  }
  void link(int resource, double weight, double latency) {
    weights_[resource] += weight;
    phase_.latency_s = std::max(phase_.latency_s, latency);
  }
  // `steps`: how many latencies the phase costs.
  FlowPhase finish(double steps) {
    phase_.usages.reserve(weights_.size());
    for (const auto& [res, w] : weights_) phase_.usages.push_back({res, w});
    std::sort(phase_.usages.begin(), phase_.usages.end(),
              [](const Usage& a, const Usage& b) { return a.resource < b.resource; });
    phase_.latency_s *= steps;
    return std::move(phase_);
  }

 private:
  const Topology& topo_;
  FlowPhase phase_;
  std::unordered_map<int, double> weights_;
};

bool power_of_two(std::size_t n) { return n > 0 && (n & (n - 1)) == 0; }

// Ranks of a group grouped by node, in group order.
std::vector<std::vector<int>> by_node(const Topology& t, const std::vector<int>& g) {
  std::vector<std::vector<int>> nodes;
  std::unordered_map<int, std::size_t> index;
  for (int d : g) {
    auto [it, fresh] = index.emplace(t.node_of(d), nodes.size());
    if (fresh) nodes.emplace_back();
    nodes[it->second].push_back(d);
  }
  return nodes;
}

// Parallel rings ("channels"), as NCCL builds them: when a group has k ranks on each of several
// nodes, up to min(k, NICs) rings cross between nodes through different ranks and NICs, and each
// carries its share of the data. A group inside one node, or with one rank per node, uses one ring.
std::vector<std::vector<int>> ring_orders(const Topology& t, const std::vector<int>& g) {
  const auto nodes = by_node(t, g);
  const std::size_t k = nodes.front().size();
  bool uniform = nodes.size() > 1 && k > 1;
  for (const auto& n : nodes) uniform = uniform && n.size() == k;
  const int rings = uniform ? std::max(1, std::min(static_cast<int>(k), t.cluster().node.nics)) : 1;
  std::vector<std::vector<int>> orders;
  for (int j = 0; j < rings; ++j) {
    std::vector<int> order;
    const std::size_t shift = static_cast<std::size_t>(j) * k / rings;
    for (const auto& n : nodes)
      for (std::size_t i = 0; i < n.size(); ++i) order.push_back(n[(i + shift + 1) % n.size()]);
    orders.push_back(std::move(order));
  }
  if (!uniform) orders.assign(1, g);
  return orders;
}

CollectivePlan ring(const Topology& t, CollectiveOp op, const std::vector<std::vector<int>>& groups,
                    double bytes) {
  const double n = static_cast<double>(groups.front().size());
  double per_flow = 0, steps = 0;
  switch (op) {
    case CollectiveOp::kAllReduce:
      per_flow = 2 * (n - 1) / n * bytes;
      steps = 2 * (n - 1);
      break;
    case CollectiveOp::kAllGather:
    case CollectiveOp::kReduceScatter:
      per_flow = (n - 1) / n * bytes;
      steps = n - 1;
      break;
    case CollectiveOp::kBroadcast:
      per_flow = bytes;
      steps = n - 1;
      break;
    default:
      break;
  }
  const auto first = ring_orders(t, groups.front());
  PhaseBuilder b(t, per_flow / static_cast<double>(first.size()));
  for (const auto& g : groups)
    for (const auto& order : ring_orders(t, g))
      for (std::size_t i = 0; i < order.size(); ++i) b.flow(order[i], order[(i + 1) % order.size()]);
  FlowPhase ph = b.finish(1);
  // A step costs one hop's latency; hops differ (NVLink inside a node, the network between
  // nodes), so the ring pays the average hop latency per step.
  double around = 0;
  const auto& order = first.front();
  for (std::size_t i = 0; i < order.size(); ++i)
    around += t.route(order[i], order[(i + 1) % order.size()]).latency_s;
  ph.latency_s = steps * around / n;
  return {Algorithm::kRing, {std::move(ph)}, 0};
}

// A binary tree over `members` (heap order), both directions: reduce up, broadcast down.
void tree_flows(PhaseBuilder& b, const std::vector<int>& members) {
  for (std::size_t i = 1; i < members.size(); ++i) {
    const std::size_t parent = (i - 1) / 2;
    b.flow(members[i], members[parent]);
    b.flow(members[parent], members[i]);
  }
}

// NCCL's tree: a chain inside each node and, between nodes, a double binary tree (two trees, each
// carrying half the data, the leaves of one being the inner nodes of the other), one per channel.
CollectivePlan tree(const Topology& t, const std::vector<std::vector<int>>& groups, double bytes) {
  const auto nodes0 = by_node(t, groups.front());
  const double m = static_cast<double>(nodes0.size());
  const std::size_t k = nodes0.front().size();
  const int channels =
      nodes0.size() > 1 ? std::max(1, std::min(static_cast<int>(k), t.cluster().node.nics)) : 1;
  PhaseBuilder b(t, bytes / 2 / channels);
  for (const auto& g : groups) {
    const auto nodes = by_node(t, g);
    if (nodes.size() == 1) {  // one node: a plain binary tree over the ranks, both halves
      tree_flows(b, nodes[0]);
      tree_flows(b, nodes[0]);
      continue;
    }
    for (const auto& n : nodes)
      for (std::size_t i = 0; i + 1 < n.size(); ++i)
        for (int half = 0; half < 2 * channels; ++half) {
          b.flow(n[i + 1], n[i]);
          b.flow(n[i], n[i + 1]);
        }
    for (int c = 0; c < channels; ++c) {
      std::vector<int> leaders, mirrored;
      for (const auto& n : nodes) leaders.push_back(n[static_cast<std::size_t>(c) * n.size() / channels]);
      mirrored.assign(leaders.rbegin(), leaders.rend());
      tree_flows(b, leaders);
      tree_flows(b, mirrored);
    }
  }
  FlowPhase ph = b.finish(1);
  if (nodes0.size() == 1) {
    // One node: up and down a binary tree of the ranks.
    ph.latency_s *= 2.0 * std::ceil(std::log2(static_cast<double>(k)));
  } else {
    // Through the intra-node chain and up and down the tree of nodes.
    const double chain = k > 1 ? 2.0 * (k - 1) * t.route(nodes0[0][0], nodes0[0][1]).latency_s : 0.0;
    ph.latency_s = chain + 2.0 * std::ceil(std::log2(m)) * t.route(nodes0[0][0], nodes0[1][0]).latency_s;
  }
  return {Algorithm::kTree, {std::move(ph)}, 0};
}

std::optional<CollectivePlan> hierarchical(const Topology& t, const std::vector<std::vector<int>>& groups,
                                           double bytes) {
  // Needs k > 1 ranks on each of m > 1 nodes, the same k everywhere.
  const auto& g0 = groups.front();
  std::unordered_map<int, int> per_node;
  for (int d : g0) ++per_node[t.node_of(d)];
  const int k = per_node.begin()->second;
  const int m = static_cast<int>(per_node.size());
  if (k < 2 || m < 2) return std::nullopt;
  for (const auto& [node, c] : per_node)
    if (c != k) return std::nullopt;
  CollectivePlan plan{Algorithm::kHierarchical, {}, 0};
  const double kk = k, mm = m;
  // Split each group by node (local groups) and by local index (cross-node groups).
  auto split = [&](bool local) {
    std::vector<std::vector<int>> out;
    for (const auto& g : groups) {
      std::unordered_map<int, std::vector<int>> by;
      std::vector<int> order;
      std::unordered_map<int, int> seen;
      for (int d : g) {
        const int node = t.node_of(d);
        const int local_index = seen[node]++;
        const int key = local ? node : local_index;
        if (!by.count(key)) order.push_back(key);
        by[key].push_back(d);
      }
      for (int key : order) out.push_back(by[key]);
    }
    return out;
  };
  const auto locals = split(true), crosses = split(false);
  PhaseBuilder rs(t, (kk - 1) / kk * bytes);
  for (const auto& g : locals)
    for (std::size_t i = 0; i < g.size(); ++i) rs.flow(g[i], g[(i + 1) % g.size()]);
  plan.phases.push_back(rs.finish(kk - 1));
  PhaseBuilder ar(t, 2 * (mm - 1) / mm * bytes / kk);
  for (const auto& g : crosses)
    for (std::size_t i = 0; i < g.size(); ++i) ar.flow(g[i], g[(i + 1) % g.size()]);
  plan.phases.push_back(ar.finish(2 * (mm - 1)));
  PhaseBuilder ag(t, (kk - 1) / kk * bytes);
  for (const auto& g : locals)
    for (std::size_t i = 0; i < g.size(); ++i) ag.flow(g[i], g[(i + 1) % g.size()]);
  plan.phases.push_back(ag.finish(kk - 1));
  return plan;
}

std::optional<CollectivePlan> halving_doubling(const Topology& t, const std::vector<std::vector<int>>& groups,
                                               double bytes) {
  const std::size_t n = groups.front().size();
  if (!power_of_two(n) || n < 2) return std::nullopt;
  CollectivePlan plan{Algorithm::kHalvingDoubling, {}, 0};
  const int levels = static_cast<int>(std::log2(static_cast<double>(n)));
  // Reduce-scatter by recursive halving, then all-gather by recursive doubling.
  for (int pass = 0; pass < 2; ++pass) {
    for (int j = 0; j < levels; ++j) {
      const int level = pass == 0 ? j : levels - 1 - j;
      const std::size_t dist = std::size_t{1} << level;
      PhaseBuilder b(t, bytes / static_cast<double>(std::size_t{2} << (pass == 0 ? j : levels - 1 - j)));
      for (const auto& g : groups)
        for (std::size_t i = 0; i < n; ++i) b.flow(g[i], g[i ^ dist]);
      plan.phases.push_back(b.finish(1));
    }
  }
  return plan;
}

CollectivePlan direct(const Topology& t, const std::vector<std::vector<int>>& groups, double bytes) {
  const double n = static_cast<double>(groups.front().size());
  PhaseBuilder b(t, bytes / n);
  for (const auto& g : groups)
    for (int s : g)
      for (int d : g) b.flow(s, d);
  return {Algorithm::kDirect, {b.finish(1)}, 0};
}

std::optional<CollectivePlan> in_switch(const Topology& t, const std::vector<std::vector<int>>& groups,
                                        double bytes) {
  if (!t.cluster().node.in_switch_reduction || t.cluster().node.in_switch_efficiency <= 0)
    return std::nullopt;
  const auto& g0 = groups.front();
  for (int d : g0)
    if (t.node_of(d) != t.node_of(g0.front())) return std::nullopt;
  PhaseBuilder b(t, bytes);
  const NodeSpec& node = t.cluster().node;
  const double lat = node.fabric.latency_s;
  // Link capacities carry the ring efficiency; NVLS reaches its own measured fraction.
  const double w = node.fabric.efficiency / node.in_switch_efficiency;
  for (const auto& g : groups)
    for (int d : g) {
      b.link(t.device_up(d), w, lat);
      b.link(t.device_down(d), w, lat);
    }
  return CollectivePlan{Algorithm::kInSwitch, {b.finish(2)}, 0};
}

}  // namespace

void cold_data(const Topology& topo, CollectiveOp op, CollectivePlan& plan) {
  const double rate = topo.cluster().node.fabric.cold_rate_of(op);
  for (FlowPhase& ph : plan.phases)
    if (!ph.crosses_nodes) ph.bound = std::min(ph.bound, rate);
}

double isolated_time(const MaxMinSystem& system, const CollectivePlan& plan) {
  double total = 0;
  for (const FlowPhase& ph : plan.phases) {
    double rate = std::numeric_limits<double>::infinity();
    for (const Usage& u : ph.usages) rate = std::min(rate, system.capacity(u.resource) / u.weight);
    rate = std::min(rate, ph.work_bound());
    total += ph.latency_s + (std::isfinite(rate) && ph.bytes > 0 ? ph.work() / rate : 0.0);
  }
  return total;
}

namespace {
CollectivePlan plan_unreduced(const Topology& topo, CollectiveOp op,
                              const std::vector<std::vector<int>>& groups, double bytes,
                              std::optional<Algorithm> force);
// plan_collective before the measured times (the links and rates alone).
CollectivePlan plan_modelled(const Topology& topo, CollectiveOp op,
                             const std::vector<std::vector<int>>& groups, double bytes,
                             std::optional<Algorithm> force, bool symmetric);

// The phases that stay inside a node pay `op`'s latency per step on the fabric in place of the
// fabric's (the small-message protocol's below LinkSpec::small_message_bytes) and move at `op`'s
// own bandwidth (LinkSpec::bandwidth_of, latency_of); the analytic model's GroupLink::as and alpha do the
// same for groups inside a node.
CollectivePlan fabric_protocol(const Topology& topo, CollectiveOp op, CollectivePlan plan, double bytes) {
  const LinkSpec& f = topo.cluster().node.fabric;
  const double ratio = f.latency_s > 0 ? f.latency_of(op, bytes) / f.latency_s : 1.0;
  const double speed = f.bandwidth > 0 ? f.bandwidth_of(op) / f.bandwidth : 1.0;
  if (ratio == 1.0 && speed == 1.0) return plan;
  for (FlowPhase& ph : plan.phases)
    if (!ph.crosses_nodes) {
      ph.latency_s *= ratio;
      ph.speed = speed;
    }
  return plan;
}
}  // namespace

namespace {
// Where the node's fabric has a measured time for the group (LinkSpec::measured) and every phase
// stays inside the node: the phases' latencies and data scaled alike, so one group alone takes
// that time (the siblings' flows still share the links as planned).
void at_measured_time(const Topology& topo, CollectiveOp op, const std::vector<std::vector<int>>& groups,
                      double bytes, CollectivePlan& plan) {
  const MeasuredTimes& m = topo.cluster().node.fabric.measured;
  if (m.empty() || groups.empty() || plan.phases.empty()) return;
  const double t = m.time(op, static_cast<int>(groups.front().size()), bytes);
  if (t <= 0) return;
  for (const FlowPhase& ph : plan.phases)
    if (ph.crosses_nodes) return;
  const double alone =
      groups.size() == 1
          ? isolated_time(topo.system(), plan)
          : isolated_time(topo.system(), plan_unreduced(topo, op, {groups.front()}, bytes, plan.algorithm));
  if (!(alone > 0)) return;
  const double f = t / alone;
  for (FlowPhase& ph : plan.phases) {
    ph.latency_s *= f;
    ph.speed /= f;
  }
  plan.estimate_s = isolated_time(topo.system(), plan);
}
}  // namespace

CollectivePlan plan_collective(const Topology& topo, CollectiveOp op,
                               const std::vector<std::vector<int>>& groups, double bytes,
                               std::optional<Algorithm> force, bool symmetric, bool measured) {
  CollectivePlan plan = plan_modelled(topo, op, groups, bytes, force, symmetric);
  if (measured) at_measured_time(topo, op, groups, bytes, plan);
  return plan;
}

namespace {
CollectivePlan plan_modelled(const Topology& topo, CollectiveOp op,
                             const std::vector<std::vector<int>>& groups, double bytes,
                             std::optional<Algorithm> force, bool symmetric) {
  if (!symmetric || groups.size() <= 1) return plan_unreduced(topo, op, groups, bytes, force);
  // The representative alone decides the algorithm and which links matter...
  const CollectivePlan alone = plan_unreduced(topo, op, {groups.front()}, bytes, force);
  CollectivePlan all = plan_unreduced(topo, op, groups, bytes, alone.algorithm);
  // ...and every sibling's flows on those links weigh in.
  for (std::size_t i = 0; i < all.phases.size() && i < alone.phases.size(); ++i) {
    std::vector<Usage> kept;
    const auto& mine = alone.phases[i].usages;  // sorted by resource
    for (const Usage& u : all.phases[i].usages) {
      auto it = std::lower_bound(mine.begin(), mine.end(), u.resource,
                                 [](const Usage& a, int r) { return a.resource < r; });
      if (it != mine.end() && it->resource == u.resource) kept.push_back(u);
    }
    all.phases[i].usages = std::move(kept);
  }
  all.estimate_s = isolated_time(topo.system(), all);
  return all;
}
}  // namespace

namespace {
CollectivePlan plan_unreduced(const Topology& topo, CollectiveOp op,
                              const std::vector<std::vector<int>>& groups, double bytes,
                              std::optional<Algorithm> force) {
  std::vector<CollectivePlan> candidates;
  const std::size_t n = groups.empty() ? 0 : groups.front().size();
  if (n < 2 || bytes <= 0) return CollectivePlan{Algorithm::kRing, {}, 0};
  auto consider = [&](Algorithm a, auto make) {
    if (force && *force != a) return;
    if (auto p = make()) candidates.push_back(fabric_protocol(topo, op, std::move(*p), bytes));
  };
  switch (op) {
    case CollectiveOp::kSendRecv: {
      PhaseBuilder b(topo, bytes);
      for (const auto& g : groups) b.flow(g[0], g[1]);
      return fabric_protocol(topo, op, {Algorithm::kPointToPoint, {b.finish(1)}, 0}, bytes);
    }
    case CollectiveOp::kAllToAll:
      return fabric_protocol(topo, op, direct(topo, groups, bytes), bytes);
    case CollectiveOp::kAllReduce:
      // NCCL chooses among ring, tree and NVLS; the others only when asked for.
      consider(Algorithm::kRing, [&] { return std::optional(ring(topo, op, groups, bytes)); });
      // NCCL's trees span nodes: a chain inside each node, double binary trees between nodes.
      // Inside one node the chain pays the ring's latency at less bandwidth, so NCCL's tuner keeps
      // the ring there; the tree is a candidate for a group across nodes (or when asked for).
      consider(Algorithm::kTree, [&] {
        return force || by_node(topo, groups.front()).size() > 1 ? std::optional(tree(topo, groups, bytes))
                                                                 : std::optional<CollectivePlan>();
      });
      consider(Algorithm::kInSwitch, [&] { return in_switch(topo, groups, bytes); });
      if (force) {
        consider(Algorithm::kHierarchical, [&] { return hierarchical(topo, groups, bytes); });
        consider(Algorithm::kHalvingDoubling, [&] { return halving_doubling(topo, groups, bytes); });
      }
      break;
    default:
      consider(Algorithm::kRing, [&] { return std::optional(ring(topo, op, groups, bytes)); });
      break;
  }
  if (candidates.empty()) return fabric_protocol(topo, op, ring(topo, op, groups, bytes), bytes);
  // Least estimated time wins; on a tie the earlier candidate (ring, NCCL's default) stays. As in
  // NCCL's tuner, a tree is credited with its lower latency but not with moving fewer bytes: its
  // bandwidth term is the ring's divided by 0.92 (NCCL tuning.cc applies that factor to tree
  // bandwidth), so trees win where latency dominates -- many ranks, small messages.
  double ring_bandwidth_term = -1;
  for (const auto& c : candidates)
    if (c.algorithm == Algorithm::kRing) {
      double lat = 0;
      for (const auto& ph : c.phases) lat += ph.latency_s;
      ring_bandwidth_term = isolated_time(topo.system(), c) - lat;
    }
  std::size_t best = 0;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    CollectivePlan& c = candidates[i];
    c.estimate_s = isolated_time(topo.system(), c);
    if (c.algorithm == Algorithm::kTree && ring_bandwidth_term >= 0) {
      double lat = 0;
      for (const auto& ph : c.phases) lat += ph.latency_s;
      c.estimate_s = lat + ring_bandwidth_term / 0.92;
    }
    if (c.estimate_s < candidates[best].estimate_s) best = i;
  }
  return std::move(candidates[best]);
}
}  // namespace

}  // namespace foresight
