// Pipeline schedules: bubble fractions equal the published closed forms.
#include "sim/analytic/schedule.h"

#include <gtest/gtest.h>

namespace foresight {
namespace {

TEST(Schedule, OneFOneBBubbleFraction) {
  for (int p : {2, 4, 8}) {
    for (int m : {1, 4, 16, 64}) {
      const double x = 0.37;
      const PipelineTime t = pipeline_time(Schedule::k1F1B, p * x, x, p, m, 1);
      // Narayanan et al. 2021: bubble / total = (p-1)/(m+p-1)
      EXPECT_NEAR(t.bubble / t.total(), (p - 1.0) / (m + p - 1.0), 1e-12) << p << " " << m;
      EXPECT_EQ(pipeline_time(Schedule::kGpipe, p * x, x, p, m, 1).total(), t.total());
    }
  }
}

TEST(Schedule, InterleavingDividesTheBubbleByV) {
  const int p = 8, m = 32;
  const double x = 1.0;
  const PipelineTime plain = pipeline_time(Schedule::k1F1B, p * x, x, p, m, 1);
  for (int v : {2, 3, 4}) {
    const PipelineTime inter = pipeline_time(Schedule::kInterleaved1F1B, p * x, x, p, m, v);
    EXPECT_NEAR(inter.bubble, plain.bubble / v, 1e-12);
    EXPECT_EQ(inter.busy, plain.busy);
  }
  EXPECT_EQ(pipeline_p2p_count(Schedule::kInterleaved1F1B, p, m, 2), m * 2 + p - 1);
  EXPECT_EQ(pipeline_p2p_count(Schedule::k1F1B, 1, m, 1), 0);
}

TEST(Schedule, ZeroBubbleAndDualPipeShrinkTheBubble) {
  const int p = 8, m = 32;
  const double x = 1.0;
  const double plain = pipeline_time(Schedule::k1F1B, p * x, x, p, m, 1).bubble;
  EXPECT_NEAR(pipeline_time(Schedule::kZeroBubble, p * x, x, p, m, 1).bubble, plain / 3, 1e-12);
  // (p-1)(F+B-W): with full recompute F = R = B = W, the weights a quarter of x: half the bubble.
  EXPECT_NEAR(pipeline_time(Schedule::kZeroBubble, p * x, x, p, m, 1, 0.25).bubble, plain / 2, 1e-12);
  // Fewer micro-batches than stages: 1F1B's.
  EXPECT_NEAR(pipeline_time(Schedule::kZeroBubble, p * x, x, p, p - 1, 1, 0.25).bubble, plain, 1e-12);
  // DualPipe, (p/2-1)(F&B + B - 3W) with F&B = F + B: F = W = x/3, B = 2x/3 gives (p/2-1) * 2x/3
  // (a timeline of deepseek-ai/DualPipe's DualPipe.step with those costs idles 6 units of F at
  // p 8, as this); full recompute (B = 3x/4 with the recompute, W = x/4) gives (p/2-1) * x.
  EXPECT_NEAR(pipeline_time(Schedule::kDualPipe, p * x, x, p, m, 1).bubble, (p / 2.0 - 1) * 2 * x / 3, 1e-12);
  EXPECT_NEAR(pipeline_time(Schedule::kDualPipe, p * x, x, p, m, 1, 0.25, 0.75).bubble, (p / 2.0 - 1) * x,
              1e-12);
  // A slower rank waits less: 10% slower, (p/2-1) * 2x/3 - (3p/2-1) * 0.1x.
  EXPECT_NEAR(pipeline_time(Schedule::kDualPipe, (p - 1) * x + 1.1 * x, 1.1 * x, p, m, 1).bubble,
              (p / 2.0 - 1) * 2 * x / 3 - (1.5 * p - 1) * 0.1 * x, 1e-12);
  EXPECT_EQ(pipeline_time(Schedule::kDualPipe, (p - 1) * x + 2 * x, 2 * x, p, m, 1).bubble, 0.0);
}

// The steady state's share of forwards merged with a backward (Plan::overlap_ep_comm), counted
// by hand from the schedules' orders.
TEST(Schedule, MergedPairsAreTheSteadyState) {
  Plan p;
  p.global_batch = 8;
  EXPECT_EQ(merged_pair_share(p), 0.0);  // not asked for
  p.overlap_ep_comm = true;
  EXPECT_DOUBLE_EQ(merged_pair_share(p), 7.0 / 8);  // one stage: F0, then F(i+1) with B(i)
  // Interleaved, p 4, v 2, 16 micro-batches (32 chunk forwards): warm-ups 11, 9, 7, 5 forwards
  // (Megatron-Core's 2(p-s-1) + (v-1)p, one more to merge), so 21..27 pairs, 24 on average.
  p.pp = 4;
  p.virtual_stages = 2;
  p.schedule = Schedule::kInterleaved1F1B;
  p.global_batch = 16;
  EXPECT_DOUBLE_EQ(merged_pair_share(p), 24.0 / 32);
  // DualPipe, p 4, 16 micro-batches: step 4 runs 5 + h rounds of two pairs (the middle ranks'
  // first apart), step 5 one pair each of p/2 - h - 1 rounds: 11 pairs on every rank.
  p.virtual_stages = 1;
  p.schedule = Schedule::kDualPipe;
  EXPECT_DOUBLE_EQ(merged_pair_share(p), 11.0 / 16);
}

TEST(Schedule, SingleStageHasNoBubble) {
  EXPECT_EQ(pipeline_time(Schedule::k1F1B, 2.0, 2.0, 1, 10, 1).bubble, 0.0);
}

}  // namespace
}  // namespace foresight
