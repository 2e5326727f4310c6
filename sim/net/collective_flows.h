// Collectives decomposed into point-to-point flows by algorithm, as network actions for the
// max-min model. A collective is a sequence of phases; each phase is one action whose flows all
// carry the same bytes, so its usage on each link is the number of its flows crossing that link.
//
//   ring all-reduce on n ranks: one phase, flows r_i -> r_{i+1}, 2(n-1)/n * S bytes each,
//     latency 2(n-1) alpha                                   (nccl-tests: busbw = that rate)
//   double binary tree: parent <-> child flows of S bytes, 2*ceil(log2 n) alpha
//   hierarchical: intra-node reduce-scatter, inter-node ring all-reduce on S/k, intra-node all-gather
//   recursive halving-doubling: 2 log2 n phases of pairwise exchanges (n a power of two)
//   direct all-to-all: every ordered pair, S/n bytes each
//   in-switch (NVLS): each rank sends S up to the node switch and receives S back, 2 alpha
// The algorithm is chosen as NCCL's tuner does: the one with the least modelled time, from its
// latency and its bottleneck link, unless one is forced.
//
// `groups` may hold several groups of the same shape that run together (symmetric simulation of
// equivalent ranks). With `symmetric`, groups[0] is the representative: the plan keeps only the
// links its own flows use, each weighted by every flow (of any group) crossing it. By symmetry
// the other groups progress at the same rate on equivalent links, so this is exact, and a bundle
// stays as small as one group's footprint however many siblings it stands for.
#pragma once

#include <limits>
#include <optional>
#include <string_view>
#include <vector>

#include "sim/net/topology.h"

namespace foresight {

enum class Algorithm { kRing, kTree, kHierarchical, kHalvingDoubling, kDirect, kInSwitch, kPointToPoint };

std::string_view to_string(Algorithm a);

struct FlowPhase {
  std::vector<Usage> usages;  // summed over the phase's flows
  double bytes = 0;           // bytes each flow carries
  double latency_s = 0;       // alpha steps of the phase
  bool crosses_nodes = false;
  // Most bytes/s each flow may move whatever the links allow (see cold_data).
  double bound = std::numeric_limits<double>::infinity();
  // The phase's data moves at `speed` times the rate its links give it: a collective with its own
  // bandwidth inside a node (LinkSpec::CollectiveRates) against the fabric's, on links sized by
  // the fabric's. An executor's flow works off bytes / speed at the rate the max-min system
  // gives it, which bound / speed caps.
  double speed = 1.0;
  double work() const { return bytes / speed; }
  double work_bound() const { return bound / speed; }
};

struct CollectivePlan {
  Algorithm algorithm = Algorithm::kRing;
  std::vector<FlowPhase> phases;
  double estimate_s = 0;  // alone on the network
};

// Plans `op` of `bytes` (the full buffer; for all-to-all what each rank sends in all) over each
// group in `groups` (device ids in group order). For send/recv, each group is {src, dst}.
// `measured`: where the node's fabric has measured times for the group (LinkSpec::measured), the
// plan takes them (false for data the caches no longer hold, which takes the cold rates).
CollectivePlan plan_collective(const Topology& topo, CollectiveOp op,
                               const std::vector<std::vector<int>>& groups, double bytes,
                               std::optional<Algorithm> force = std::nullopt, bool symmetric = false,
                               bool measured = true);

// The plan for data the caches no longer hold (Op::cold): the phases inside a node move each flow
// at most at the fabric's cold_bandwidth for `op` (LinkSpec::cold_rate_of),
// where it has one.
void cold_data(const Topology& topo, CollectiveOp op, CollectivePlan& plan);

// Time of a plan when it is alone on the network: each phase's latency plus its bytes over the
// rate its most loaded link allows (capacity / usage weight).
double isolated_time(const MaxMinSystem& system, const CollectivePlan& plan);

}  // namespace foresight
