// The discrete-event simulator: executes a Workload's op graphs on modelled devices and a
// flow-level network, and returns the same Prediction as the analytic model plus a timeline.
//
//   Result<Workload> w = lower(model, cluster, plan);
//   Simulator sim(*w, SimOptions{.full = false, .record = true});
//   Result<SimResult> r = sim.run();            // r->prediction.step_time_s, r->ops (timeline)
//
// Semantics: each rank has streams (compute, tp, pp, dp, ep, cp) that run their ops one at a time
// in issue order, like CUDA streams; an op starts when its stream is free and its dependencies
// are done. Compute ops take their modelled time. Collectives start when every member of the
// group has reached them and run as network actions (collective_flows.h) sharing links max-min
// fairly with everything else in flight; sends complete the matching recv on the peer rank.
//
// Symmetry (default): ranks of the same pipeline stage run identical programs, so one rank per
// stage is simulated and its collectives carry the flows of all its sibling groups, which keeps
// their contention. `full` simulates every rank.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/analytic/prediction.h"
#include "sim/core/status.h"
#include "sim/net/collective_flows.h"
#include "sim/net/topology.h"
#include "sim/workload/workload.h"

namespace foresight {

enum class NetworkModel {
  kFlow,       // flows share links max-min fairly: contention and oversubscription show up
  kAlphaBeta,  // each collective takes its time alone on the network (faster, no contention)
};

struct SimOptions {
  bool full = false;  // simulate every rank (no symmetry)
  NetworkModel network = NetworkModel::kFlow;
  bool record = false;                 // keep every op's start and end (for traces)
  std::optional<Algorithm> algorithm;  // force one collective algorithm (tests, what-ifs)
  // A prebuilt topology of the workload's cluster, shared read-only by many runs (plan search);
  // its MaxMinSystem must hold no actions. Null: each run builds its own.
  const Topology* topology = nullptr;
};

// One executed op of one simulated rank.
struct OpRecord {
  std::int32_t rank = 0;
  std::int32_t stage = 0;
  std::int32_t op = 0;
  double start_s = 0;
  double end_s = 0;
};

struct LinkUse {
  std::string name;  // "rank3->node0/switch", ...
  std::string kind;
  double bytes = 0;        // carried during the step
  double utilisation = 0;  // bytes / (capacity * step time)
};

struct SimResult {
  Prediction prediction;
  std::vector<OpRecord> ops;  // when SimOptions::record
  std::vector<int> simulated_ranks;
  std::vector<LinkUse> busiest_links;  // the 20 most utilised links
  std::uint64_t events = 0;
  std::uint64_t network_actions = 0;
  bool full = false;
};

class Simulator {
 public:
  Simulator(const Workload& w, SimOptions options);
  ~Simulator();
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;
  Result<SimResult> run();

 private:
  struct Impl;
  Impl* impl_;
};

// Lowers and simulates in one call; errors name `plan_file` like predict() does.
Result<SimResult> simulate(const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan,
                           const std::string& plan_file, const SimOptions& options);

}  // namespace foresight
