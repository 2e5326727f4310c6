// One clock for the ranks of a measured step. Each rank of `foresight run` times its ops from its
// own start of the step, so in the gathered trace rank 1's all-reduce can end before rank 0's
// starts. The ranks took part in the same collectives, and every member leaves a collective
// together: the median difference of their end times is the offset between two ranks' clocks.
// Ranks of different pipeline stages share no collective; they are joined by their transfers, a
// receive ending no earlier than its send started: the sends each way bound the offset from both
// sides (the receive that waited longest for its data within a transfer's latency of it), and the
// offset is the middle of the two bounds (the one bound where only one direction ran).
//
//   std::vector<RankClock> c = align_rank_clocks(w, measured.ops);  // shifts the ops, returns how
//
// Offsets are against rank 0's clock; the shifted ops are then moved together so that none starts
// before 0 (a trace's timestamps are not negative).
#pragma once

#include <string>
#include <vector>

#include "sim/des/simulator.h"
#include "sim/workload/workload.h"

namespace foresight {

struct RankClock {
  int rank = 0;
  int reference = 0;     // the rank its offset was measured against (itself for rank 0)
  double offset_s = 0;   // added to the rank's times, they read rank 0's clock
  double applied_s = 0;  // what was added to its ops' times: the offset and the common move
  double spread_s = 0;   // collectives: their ends' median distance from it; transfers: half the bounds' gap
  int pairs = 0;         // collectives (or transfers) the offset rests on
  std::string by;        // "reference", "collectives", "pipeline transfers" or "none"
};

// Shifts `ops` (SimResult::ops of a measured step of `w`) onto one clock and returns each rank's
// offset, in rank order, for the ranks that have ops. A rank joined to no other by a collective or
// a transfer keeps its clock (by "none").
std::vector<RankClock> align_rank_clocks(const Workload& w, std::vector<OpRecord>& ops);

}  // namespace foresight
