// Closed-form pipeline schedule times.
#include "sim/analytic/schedule.h"

#include <algorithm>

namespace foresight {

PipelineTime pipeline_time(Schedule s, double sum_stage, double max_stage, int stages, double micro_batches,
                           int virtual_stages) {
  const double p = stages, m = micro_batches, v = virtual_stages;
  PipelineTime t;
  t.busy = m * max_stage;
  if (stages <= 1) return t;
  switch (s) {
    case Schedule::kInterleaved1F1B:
      if (virtual_stages > 1) {
        t.bubble = (p - 1) / v * max_stage;
        break;
      }
      [[fallthrough]];
    case Schedule::kGpipe:
    case Schedule::k1F1B:
      t.bubble = sum_stage - max_stage;
      break;
    case Schedule::kZeroBubble:
      // The (p-1)(F+B-W) bubble needs at least p micro-batches in flight to hide the deferred
      // weight gradients; with fewer, the schedule is 1F1B's.
      t.bubble = micro_batches >= stages ? (sum_stage - max_stage) / 3.0 : sum_stage - max_stage;
      break;
    case Schedule::kDualPipe:
      t.bubble = std::max(0.0, p / 2 - 1) * max_stage / 3.0;
      break;
  }
  return t;
}

double pipeline_p2p_count(Schedule s, int stages, double micro_batches, int virtual_stages) {
  if (stages <= 1) return 0.0;
  const double v = (s == Schedule::kInterleaved1F1B) ? virtual_stages : 1;
  return micro_batches * v + stages - 1;
}

}  // namespace foresight
