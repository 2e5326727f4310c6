// Failures and checkpoints: Young's and Daly's closed forms, the Monte-Carlo run against Daly's
// expected efficiency, the Llama 3 failure rate, and light snapshots.
#include "sim/analytic/reliability.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/test_util.h"

namespace foresight {
namespace {

ReliabilityInputs base() {
  ReliabilityInputs in;
  in.devices = 16384;
  in.checkpoint_bytes = 4e12;   // 4 TB
  in.storage_bandwidth = 1e12;  // 1 TB/s: 4 s per checkpoint
  in.restart_s = 600;
  in.run_s = 60 * 86400.0;
  in.trials = 400;
  return in;
}

// Llama 3: 419 unexpected interruptions in 54 days on 16,384 GPUs -> a job MTBF of 3.09 hours.
TEST(Reliability, Llama3FailureRate) {
  auto r = reliability(base());
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_NEAR(r->mtbf_s / 3600, 54.0 * 24 / 419, 1e-9);
  // ... and about 419 * 60/54 failures over 60 days (plus the few that hit restarts).
  EXPECT_NEAR(r->failures_mean / (419.0 * 60 / 54), 1.0, 0.05);
}

TEST(Reliability, YoungAndDalyIntervals) {
  // Young: sqrt(2 delta M).
  EXPECT_DOUBLE_EQ(young_interval(8, 3600), std::sqrt(2.0 * 8 * 3600));
  // Daly: sqrt(2dM)(1 + sqrt(d/2M)/3 + d/(18M)) - d, and M itself when d >= 2M.
  const double d = 60, m = 7200, x = d / (2 * m);
  EXPECT_DOUBLE_EQ(daly_interval(d, m), std::sqrt(2 * d * m) * (1 + std::sqrt(x) / 3 + x / 9) - d);
  EXPECT_DOUBLE_EQ(daly_interval(3 * m, m), m);
  // For a small write cost Daly tends to Young.
  EXPECT_NEAR(daly_interval(1, 1e6) / young_interval(1, 1e6), 1.0, 1e-3);
}

// Daly's optimum maximises his own efficiency formula.
TEST(Reliability, DalyIntervalMaximisesEfficiency) {
  const double d = 30, m = 3 * 3600.0, restart = 600;
  const double best = daly_efficiency(daly_interval(d, m), d, restart, m);
  for (double f : {0.5, 0.8, 1.25, 2.0})
    EXPECT_LT(daly_efficiency(f * daly_interval(d, m), d, restart, m), best) << f;
}

// The Monte-Carlo run of the same process agrees with Daly's closed form, at the optimum and off it.
TEST(Reliability, MonteCarloMatchesDaly) {
  for (double interval : {0.0, 1800.0, 7200.0}) {
    ReliabilityInputs in = base();
    in.interval_s = interval;
    auto r = reliability(in);
    ASSERT_TRUE(r.ok());
    EXPECT_NEAR(r->efficiency_mc, r->efficiency_model, 0.003) << interval;
    EXPECT_LE(r->efficiency_p5, r->efficiency_mc);
    EXPECT_GE(r->efficiency_p95, r->efficiency_mc);
  }
}

// Light snapshots no failure can use only cost time; when every failure resumes from them, the
// work lost per failure shrinks to half a light interval and effective time rises.
TEST(Reliability, LightSnapshots) {
  ReliabilityInputs in = base();
  in.interval_s = 4 * 3600.0;  // full checkpoints rarely
  const ReliabilityResult none = *reliability(in);
  in.light_interval_s = 600;
  in.light_write_s = 2;
  in.soft_fraction = 0;
  const ReliabilityResult useless = *reliability(in);
  EXPECT_LT(useless.efficiency_mc, none.efficiency_mc);
  in.soft_fraction = 1;
  const ReliabilityResult all = *reliability(in);
  EXPECT_GT(all.efficiency_mc, none.efficiency_mc + 0.05);
  // Lost work per failure: about half a light interval (600 s work + 2 s write).
  EXPECT_NEAR(all.lost_work_s / all.failures_mean, 301, 30);
}

// The closed form of the simulated process: Daly's formula without light snapshots, and the
// Monte-Carlo mean (efficiency, lost work) with them, soft failures or not.
TEST(Reliability, ClosedFormMatchesMonteCarlo) {
  ReliabilityInputs in = base();
  in.interval_s = 1800;
  const ReliabilityResult daly = *reliability(in);
  EXPECT_NEAR(daly.efficiency_expected, daly.efficiency_model, 1e-12);
  EXPECT_TRUE(daly.monte_carlo);
  EXPECT_EQ(daly.efficiency, daly.efficiency_mc);
  in.interval_s = 4 * 3600.0;
  in.light_interval_s = 600;
  in.light_write_s = 2;
  for (double soft : {0.0, 0.5, 1.0}) {
    in.soft_fraction = soft;
    const ReliabilityResult r = *reliability(in);
    ASSERT_TRUE(r.monte_carlo);
    EXPECT_NEAR(r.efficiency_expected, r.efficiency_mc, 0.003) << soft;
    const ReliabilityExpected e = reliability_expected(in, r);
    EXPECT_NEAR(e.lost_work_per_s * in.run_s / r.lost_work_s, 1.0, 0.1) << soft;
    EXPECT_NEAR(e.failures_per_s * in.run_s / r.failures_mean, 1.0, 0.05) << soft;
  }
  // A light interval that does not divide the full one: a shorter last piece.
  in.light_interval_s = 700;
  in.soft_fraction = 0.7;
  const ReliabilityResult odd = *reliability(in);
  EXPECT_NEAR(odd.efficiency_expected, odd.efficiency_mc, 0.003);
}

// A run the Monte-Carlo cannot afford (2.7 billion years: 10^13 pieces per trial) takes the
// closed form at once, and says so.
TEST(Reliability, OverTheEventBudgetTheClosedForm) {
  ReliabilityInputs in = base();
  in.run_s = 1e12 * 86400;
  auto r = reliability(in);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_FALSE(r->monte_carlo);
  EXPECT_GT(r->events, in.max_events);
  EXPECT_TRUE(std::isnan(r->efficiency_mc));
  EXPECT_DOUBLE_EQ(r->efficiency, r->efficiency_expected);
  EXPECT_NEAR(r->efficiency, r->efficiency_model, 1e-12);
  EXPECT_NEAR(r->failures_mean, in.run_s / r->mtbf_s, 1e-6 * r->failures_mean);
  // Within the budget the Monte-Carlo run estimates the same number.
  const ReliabilityResult mc = *reliability(base());
  EXPECT_TRUE(mc.monte_carlo);
  EXPECT_LE(mc.events, kReliabilityEventBudget);
  EXPECT_NEAR(mc.efficiency, r->efficiency, 0.003);
  // A budget of 0 events: the closed form for any run; the lost work as the simulation finds it.
  in = base();
  in.max_events = 0;
  const ReliabilityResult closed = *reliability(in);
  EXPECT_FALSE(closed.monte_carlo);
  EXPECT_NEAR(closed.lost_work_s / mc.lost_work_s, 1.0, 0.1);
  // A failure rate so high that no piece of work completes: nothing useful, and no hang.
  in = base();
  in.failures_per_device_hour = 1;
  const ReliabilityResult hopeless = *reliability(in);
  EXPECT_FALSE(hopeless.monte_carlo);
  EXPECT_EQ(hopeless.efficiency, 0);
}

TEST(Reliability, BadInputIsAClearError) {
  for (double run : {0.0, -1.0, double{INFINITY}, double{NAN}}) {
    ReliabilityInputs in = base();
    in.run_s = run;
    EXPECT_EQ(reliability(in).error().message(), "reliability: run length: must be > 0 and finite") << run;
  }
  for (double rate : {0.0, 1e9, double{INFINITY}, double{NAN}}) {
    ReliabilityInputs in = base();
    in.failures_per_device_hour = rate;
    EXPECT_FALSE(reliability(in).ok()) << rate;
  }
  {
    ReliabilityInputs in = base();
    in.restart_s = NAN;
    EXPECT_EQ(reliability(in).error().message(), "reliability: times: must be >= 0 and finite");
  }
  ReliabilityInputs in = base();
  in.storage_bandwidth = 0;
  EXPECT_EQ(reliability(in).error().message(),
            "reliability: storage bandwidth: the cluster gives none (storage_bandwidth)");
  in = base();
  in.soft_fraction = 2;
  EXPECT_EQ(reliability(in).error().message(), "reliability: soft fraction: must be within 0..1");
}

// The plan's checkpoint: bf16 weights plus fp32 master weights and Adam moments, 14 bytes per
// parameter; the cluster's storage bandwidth.
TEST(Reliability, InputsFromAPlan) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 64);
  const ReliabilityInputs in = reliability_inputs(m, c, testing::make_plan(8, 1, 8, 1, 64), 2.0);
  EXPECT_EQ(in.devices, 64);
  EXPECT_DOUBLE_EQ(in.checkpoint_bytes, m.total_params() * 14);
  EXPECT_DOUBLE_EQ(in.storage_bandwidth, c.storage_bandwidth);
  EXPECT_DOUBLE_EQ(in.step_s, 2.0);
}

}  // namespace
}  // namespace foresight
