// Closed-form pipeline schedules: how long m micro-batches take to flow through the stages.
//
//   PipelineTime t = pipeline_time(Schedule::k1F1B, /*sum=*/4 * x, /*max=*/x, /*stages=*/4,
//                                  /*micro_batches=*/8, /*virtual=*/1);
//   // t.busy = 8x, t.bubble = 3x: bubble fraction (p-1)/(m+p-1) = 3/11
#pragma once

#include "sim/spec/plan.h"

namespace foresight {

struct PipelineTime {
  double busy = 0;    // m * (slowest stage's forward + backward per micro-batch)
  double bubble = 0;  // fill and drain beyond that
  double total() const { return busy + bubble; }
};

// `sum_stage` and `max_stage`: the per-micro-batch forward+backward time summed over stages and of
// the slowest stage (all of a rank's chunks together for interleaving).
//   GPipe / 1F1B:  total = sum + (m-1)*max              (uniform: (m+p-1)*x)
//   interleaved:   total = (m + (p-1)/v) * max          (Narayanan et al. 2021, Sec. 2.2.2)
//   ZB-H1:         bubble = (p-1)(F+B-W) = (p-1) * x * (1 - 2w)   (Qi et al. 2024, Sec. 3.1; m >= p)
//                  w: the weight gradients' share of x (1/3 when F = B = W; B counts the
//                  recompute and exposed collectives of the backward proper)
//   DualPipe:      bubble = (p/2-1)(F&B + B - 3W)       (DeepSeek-V3 report, Table 2)
//                  = (p/2-1) * x * (1 + b - 3w): a merged pair F&B hides the all-to-alls, not
//                  one chunk's compute under the other's, so it costs F + B = x; b: the full
//                  backward's share of x (B, input and weight gradients; 2/3 when F = B/2);
//                  x: the other ranks' mean x_o; less (3p/2-1)(max - x_o), the slowest rank's
//                  extra time over the micro-batches of the fill and the drain
PipelineTime pipeline_time(Schedule s, double sum_stage, double max_stage, int stages, double micro_batches,
                           int virtual_stages, double weight_share = 1.0 / 3.0,
                           double backward_share = 2.0 / 3.0);

// Point-to-point transfers on the critical path, counted per direction: (m*v + p - 1) for an
// interleaved schedule, (m + p - 1) otherwise; zero for one stage.
double pipeline_p2p_count(Schedule s, int stages, double micro_batches, int virtual_stages);

// With Plan::overlap_ep_comm: the share of a stage's forward chunks that run merged with a
// backward (the steady state), averaged over the stages; 0 when the plan does not merge. The
// rest, the warm-up's forwards and the cool-down's backwards, run alone.
//   interleaved:  1 - mean warm-up / (m*v), warm-up = 2(p-s-1) + (v-1)p + 1 (Megatron-Core adds
//                 one forward so that every pair's halves are independent)
//   pp 1:         (m-1)/m
//   DualPipe:     the pairs of its steps 4 and 5 (deepseek-ai/DualPipe's DualPipe.step; the
//                 middle ranks run the first pair of step 4 apart)
double merged_pair_share(const Plan& p);

}  // namespace foresight
