// Group placement to bandwidth/latency, and the alpha-beta collective formulas.
#include "sim/analytic/collective.h"

#include <algorithm>
#include <cmath>

namespace foresight {

double torus_mean_hops(const std::vector<int>& dims) {
  double hops = 0;
  for (int k : dims) {
    double sum = 0;
    for (int i = 0; i < k; ++i) sum += std::min(i, k - i);
    hops += k > 0 ? sum / k : 0.0;
  }
  return hops;
}

GroupLink group_link(const ClusterSpec& c, int stride, int size, bool scattered) {
  GroupLink l;
  l.size = size;
  const NodeSpec& node = c.node;
  const int g = std::max(1, node.accelerators());
  const double intra = node.fabric.bandwidth * node.fabric.efficiency;
  if (size <= 1) {
    l.bus_bandwidth = intra > 0 ? intra : 1e30;
    return l;
  }
  // Ranks of the group inside one node, and how many nodes apart the group's ends are.
  const int per_node = stride >= g ? 1 : std::max(1, std::min(size, g / std::max(1, stride)));
  const long long span_ranks = static_cast<long long>(size - 1) * stride + 1;
  const long long span_nodes =
      scattered && span_ranks > g ? std::max<long long>(c.nodes, 2) : (span_ranks + g - 1) / g;
  if (span_nodes <= 1) {
    l.bus_bandwidth = intra;
    l.latency_s = node.fabric.latency_s;
    l.small_message_bytes = node.fabric.small_message_bytes;
    l.small_message_latency_s = node.fabric.small_message_latency_s;
    l.in_switch_reduction = node.in_switch_reduction && node.in_switch_efficiency > 0;
    l.in_switch_bandwidth = node.fabric.bandwidth * node.in_switch_efficiency;
    if (node.fabric.has_own_rates()) l.own_rates = &node.fabric;
    return l;
  }
  l.crosses_nodes = true;
  // Every accelerator of the node communicates at once; each gets its share of the NICs, and a
  // group with k ranks in a node uses k shares (NCCL runs one ring per NIC/rail).
  double inter = node.nic_bandwidth_per_device() * per_node;
  double latency = node.nic.latency_s + node.fabric.latency_s;
  for (const NetworkTier& t : c.tiers) {
    if (t.topology == "torus") {
      // A ring laid along the torus sends over one link per hop, which the node's accelerators
      // share (every group of the same shape runs at once, as for the tree tiers' NICs); scattered
      // nodes make each hop cross the mean distance, loading that many links.
      const double hops = scattered ? std::max(1.0, torus_mean_hops(t.dims)) : 1.0;
      inter = std::min(inter, t.link_bandwidth * node.nic.efficiency / g * per_node / hops);
      latency += t.latency_s * hops;
      break;
    }
    const double per_node_bw = t.bandwidth_per_node > 0
                                   ? t.bandwidth_per_node * node.nic.efficiency
                                   : node.nics * node.nic.bandwidth * node.nic.efficiency;
    inter = std::min(inter, per_node_bw / t.oversubscription / g * per_node);
    latency += t.latency_s;
    if (t.span_nodes == 0 || span_nodes <= t.span_nodes) break;  // the group fits under this tier
  }
  l.bus_bandwidth = std::min(intra > 0 ? intra : inter, inter);
  l.latency_s = latency;
  l.ranks_per_node = per_node;
  l.rank_nic_bandwidth = inter / per_node;
  l.intra_bandwidth = intra;
  l.nodes = (size + per_node - 1) / per_node;
  l.intra_latency_s = node.fabric.latency_s;
  return l;
}

namespace {
// Latency steps of an all-reduce: a ring takes 2(n-1); a double binary tree reduces up and
// broadcasts down, 2*ceil(log2 n). NCCL picks the tree where latency dominates; the bandwidth term
// is the same busbw either way, so the smaller step count is the one that applies.
double latency_steps(int n) {
  return std::min(2.0 * (n - 1), 2.0 * std::ceil(std::log2(static_cast<double>(n))));
}
}  // namespace

GroupLink GroupLink::as(CollectiveOp op) const {
  GroupLink l = *this;
  l.own_rates = nullptr;
  if (own_rates) {
    l.bus_bandwidth = own_rates->bandwidth_of(op) * own_rates->efficiency;
    l.small_message_bytes = own_rates->small_message_bytes_of(op);
    l.latency_s =
        own_rates->latency_of(op, l.small_message_bytes);  // at the small-message size: the large protocol's
    if (l.small_message_bytes > 0) l.small_message_latency_s = own_rates->latency_of(op, 0.0);
  }
  return l;
}

double collective_latency_steps(CollectiveOp op, int n) {
  if (n <= 1) return 0.0;
  switch (op) {
    case CollectiveOp::kAllReduce:
      return latency_steps(n);
    case CollectiveOp::kAllGather:
    case CollectiveOp::kReduceScatter:
      return n - 1.0;  // NCCL runs them as rings only: no tree shortens their n-1 steps
    default:
      return 1.0;
  }
}

double collective_latency(const GroupLink& l, CollectiveOp op, double bytes) {
  const int n = l.size;
  if (n <= 1) return 0.0;
  if (op == CollectiveOp::kAllReduce)
    return std::min(2.0 * (n - 1) * l.ring_alpha(bytes), latency_steps(n) * l.alpha(bytes));
  if (op == CollectiveOp::kAllGather || op == CollectiveOp::kReduceScatter)
    return collective_latency_steps(op, n) * l.ring_alpha(bytes);
  return collective_latency_steps(op, n) * l.alpha(bytes);
}

double collective_bus_factor(CollectiveOp op, int n) {
  switch (op) {
    case CollectiveOp::kAllReduce:
      return 2.0 * (n - 1) / n;
    case CollectiveOp::kAllGather:
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kAllToAll:
      return 1.0 * (n - 1) / n;
    default:
      return 1.0;
  }
}

namespace {
// `op`'s measured time on this group where its node's fabric has one (MeasuredTimes), else negative.
double measured_time(const GroupLink& l, CollectiveOp op, double bytes) {
  return l.own_rates ? l.own_rates->measured.time(op, l.size, bytes) : -1.0;
}

// All-gather and reduce-scatter: (n-1)/n of the data over the bus, a ring's n-1 steps.
double half_ring_time(const GroupLink& l, CollectiveOp op, double bytes) {
  const int n = l.size;
  if (n <= 1 || bytes <= 0) return 0.0;
  return 1.0 * (n - 1) / n * bytes / l.bus_bandwidth + collective_latency(l, op, bytes);
}

// The formulas copy the link only where it has own rates (the analytic model's hot path has none).
double own_half_ring_time(const GroupLink& l, CollectiveOp op, double bytes) {
  if (!l.has_own_rates()) return half_ring_time(l, op, bytes);
  const double t = measured_time(l, op, bytes);
  return t >= 0 ? t : half_ring_time(l.as(op), op, bytes);
}
}  // namespace

double allreduce_time(const GroupLink& l, double bytes) {
  const int n = l.size;
  if (n <= 1 || bytes <= 0) return 0.0;
  if (const double t = measured_time(l, CollectiveOp::kAllReduce, bytes); t >= 0) return t;
  // The ring's 2(n-1) steps at its hops' mean latency, or the tree's 2*ceil(log2 n) at the
  // network's (its depth is mostly between nodes).
  const double ring =
      2.0 * (n - 1) / n * bytes / l.bus_bandwidth + collective_latency(l, CollectiveOp::kAllReduce, bytes);
  if (!l.in_switch_reduction) return ring;
  // NVLS: busbw = 2(n-1)/n * line rate * measured efficiency, two latencies (up and down).
  const double nvls = bytes / l.in_switch_bandwidth + 2 * l.alpha(bytes);
  return std::min(ring, nvls);
}

double allgather_time(const GroupLink& l, double bytes) {
  return own_half_ring_time(l, CollectiveOp::kAllGather, bytes);
}

double reduce_scatter_time(const GroupLink& l, double bytes) {
  return own_half_ring_time(l, CollectiveOp::kReduceScatter, bytes);
}

double alltoall_time(const GroupLink& l, double bytes) {
  const int n = l.size;
  if (n <= 1 || bytes <= 0) return 0.0;
  if (l.has_own_rates() && !l.crosses_nodes)
    if (const double t = measured_time(l, CollectiveOp::kAllToAll, bytes); t >= 0) return t;
  // Direct all-to-all: the n-1 messages are in flight together, one latency deep.
  if (l.crosses_nodes && l.rank_nic_bandwidth > 0) {
    // Each rank sends the part for its node's other members over the fabric and the rest over
    // its own NIC share, both at once (every rank does the same: a ring's shared rails do not
    // apply).
    const int k = std::min(n, std::max(1, l.ranks_per_node));
    const double inside = l.intra_bandwidth > 0 ? 1.0 * (k - 1) / n * bytes / l.intra_bandwidth : 0.0;
    const double across = 1.0 * (n - k) / n * bytes / l.rank_nic_bandwidth;
    return std::max(inside, across) + l.alpha(bytes);
  }
  return 1.0 * (n - 1) / n * bytes / l.bus_bandwidth + l.alpha(bytes);
}

double sendrecv_time(const GroupLink& l, double bytes) {
  if (bytes <= 0) return 0.0;
  if (l.has_own_rates()) {
    const double t = measured_time(l, CollectiveOp::kSendRecv, bytes);
    return t >= 0 ? t : sendrecv_time(l.as(CollectiveOp::kSendRecv), bytes);
  }
  return bytes / l.bus_bandwidth + l.alpha(bytes);
}

}  // namespace foresight
