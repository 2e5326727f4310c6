// The critical path of a simulated step: the chain of ops, walked back from the op that ends last,
// each preceded by the op whose end let it start -- a dependency of its program, the op before it
// on its stream, or, for a receive, the peer stage's send. Shortening an op off the path does not
// shorten the step; shortening one on it does, until another chain takes over.
//
//   SimOptions so;  so.record = true;
//   auto r = Simulator(w, so).run();
//   CriticalPath p = critical_path(w, *r);   // p.ops: indices into r->ops, in time order
//
// A collective's wait for its last member is inside its own time (it is not followed to the
// member that arrived last), and so is a data loader's.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "sim/des/simulator.h"
#include "sim/workload/workload.h"

namespace foresight {

struct CriticalPath {
  std::vector<std::size_t> ops;  // indices into SimResult::ops, first to last
  // The path's time by what it was doing (they add up to the last op's end): compute (and copies),
  // communication (collectives, sends), waiting (gaps between an op and the one it waited for:
  // the ends it waited on are not dependencies the program states, such as a stream's turn).
  double compute_s = 0, communication_s = 0, waiting_s = 0;
  double end_s = 0;
  int ranks = 0;  // distinct ranks the path crosses
};

// Empty when the result holds no op records (SimOptions::record off).
CriticalPath critical_path(const Workload& w, const SimResult& r);

}  // namespace foresight
