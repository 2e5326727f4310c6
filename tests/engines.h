// Helpers for tests that run both executors on one plan: the simulated step against the analytic
// model's.
//
//   const SimResult d = testing::expect_engines_agree(model, cluster, plan, 0.05);
//   EXPECT_GT(d.prediction.time.offload, 0);
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "sim/analytic/analytic_model.h"
#include "sim/des/simulator.h"

namespace foresight::testing {

// Simulates the plan; a failed simulation fails the test (and returns an empty result).
inline SimResult simulated(const ModelSpec& m, const ClusterSpec& c, const Plan& p,
                           const SimOptions& o = {}) {
  auto r = simulate(m, c, p, "plan", o);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message());
  return r.ok() ? *r : SimResult{};
}

// Simulates the plan and expects its step time within `rel` (a fraction) of the analytic model's.
inline SimResult expect_engines_agree(const ModelSpec& m, const ClusterSpec& c, const Plan& p, double rel,
                                      const std::string& what = "") {
  const Prediction a = AnalyticModel(m, c).evaluate(p);
  SimResult d = simulated(m, c, p);
  EXPECT_NEAR(d.prediction.step_time_s, a.step_time_s, rel * a.step_time_s) << what;
  return d;
}

}  // namespace foresight::testing
