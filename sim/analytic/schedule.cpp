// Closed-form pipeline schedule times.
#include "sim/analytic/schedule.h"

#include <algorithm>

namespace foresight {

PipelineTime pipeline_time(Schedule s, double sum_stage, double max_stage, int stages, double micro_batches,
                           int virtual_stages, double weight_share, double backward_share) {
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
      t.bubble = (sum_stage - max_stage) *
                 (micro_batches >= stages ? std::clamp(1.0 - 2.0 * weight_share, 0.0, 1.0) : 1.0);
      break;
    case Schedule::kDualPipe: {
      // The uniform bubble at the other ranks' mean time x_o, less what the slowest rank's extra
      // time soaks up: it runs about 3p/2 - 1 micro-batches in the fill and the drain (steps 1-3
      // and 5-8 of DualPipe.step), each max - x_o longer, while it waits on faster ranks. An exact
      // timeline of DualPipe.step with the end ranks 10% slower idles them 0.45-0.6 of the
      // uniform bubble (p 8-16), this 0.5-0.65.
      const double others = (sum_stage - max_stage) / (p - 1);
      const double uniform = (p / 2 - 1) * others *
                             std::max(0.0, 1.0 + backward_share - 3.0 * std::clamp(weight_share, 0.0, 1.0));
      t.bubble = std::max(0.0, uniform - (1.5 * p - 1) * (max_stage - others));
    } break;
  }
  return t;
}

double pipeline_p2p_count(Schedule s, int stages, double micro_batches, int virtual_stages) {
  if (stages <= 1) return 0.0;
  const double v = (s == Schedule::kInterleaved1F1B) ? virtual_stages : 1;
  return micro_batches * v + stages - 1;
}

double merged_pair_share(const Plan& p) {
  const std::int64_t m = p.micro_batches();
  if (!p.overlap_ep_comm || m < 1) return 0.0;
  const int pp = p.pp;
  double pairs = 0;  // summed over the stages
  for (int s = 0; s < pp; ++s) {
    if (p.schedule == Schedule::kDualPipe) {
      const int half = pp / 2, h = std::min(s, pp - 1 - s);
      const std::int64_t step4 = std::max<std::int64_t>(0, m / 2 - pp + h + 1);
      const bool middle = h == half - 1;
      pairs += static_cast<double>(std::max<std::int64_t>(0, 2 * step4 - (middle && step4 > 0 ? 1 : 0)) +
                                   (half - h - 1));
    } else {
      const std::int64_t total = m * p.chunks();
      const std::int64_t warmup = std::min<std::int64_t>(total, 2 * (pp - s - 1) + (p.chunks() - 1) * pp + 1);
      pairs += static_cast<double>(total - std::min(total, warmup)) / static_cast<double>(p.chunks());
    }
  }
  return pairs / (static_cast<double>(pp) * static_cast<double>(m));
}

}  // namespace foresight
