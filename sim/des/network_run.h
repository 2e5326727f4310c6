// Runs collectives alone on the network model (no compute), all starting at time zero, and
// returns when each finishes: the simulator's network in isolation, for nccl-tests-style
// measurements (algbw, busbw) and for checking the flow model against closed forms.
//
//   ClusterSpec c = ...;                       // e.g. dgx-a100-hdr resized to 16 GPUs
//   auto t = run_collectives(c, {{CollectiveOp::kAllReduce, {{0,1,2,3,4,5,6,7}}, 1 << 30}});
//   double busbw = bus_bandwidth(CollectiveOp::kAllReduce, 8, 1 << 30, t->at(0));
#pragma once

#include <optional>
#include <vector>

#include "sim/core/status.h"
#include "sim/net/collective_flows.h"
#include "sim/spec/hardware.h"

namespace foresight {

struct CollectiveRun {
  CollectiveOp op = CollectiveOp::kAllReduce;
  std::vector<std::vector<int>> groups;  // one or more groups (devices), run as one collective
  double bytes = 0;
  std::optional<Algorithm> algorithm;
};

// Finish time of each collective, in seconds.
Result<std::vector<double>> run_collectives(const ClusterSpec& cluster,
                                            const std::vector<CollectiveRun>& runs);

// nccl-tests convention: algbw = bytes / time; busbw = algbw * factor, with factor 2(n-1)/n for
// all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 otherwise.
double bus_bandwidth(CollectiveOp op, int ranks, double bytes, double seconds);

}  // namespace foresight
