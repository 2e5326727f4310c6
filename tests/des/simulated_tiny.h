// A recorded simulated step of the tiny preset model on A100s (tp x pp x dp ranks, one sequence
// per micro-batch, eight micro-batches per replica), for tests that read its ops.
#pragma once

#include <gtest/gtest.h>

#include <utility>

#include "sim/des/simulator.h"
#include "sim/workload/workload.h"
#include "tests/test_util.h"

namespace foresight::testing {

struct Simulated {
  Workload w;
  SimResult r;
};

// `full`: every rank simulated (else one per stage, the symmetric shortcut).
inline Simulated simulate_tiny(int tp, int pp, int dp, bool full) {
  const ModelSpec m = preset_model("tiny");
  const ClusterSpec c = preset_cluster("dgx-a100-hdr", tp * pp * dp);
  auto w = lower(m, c, make_plan(tp, pp, dp, 1, 8 * dp));
  EXPECT_TRUE(w.ok()) << w.error().message();
  Simulator sim(*w, SimOptions{.full = full, .record = true});
  auto r = sim.run();
  EXPECT_TRUE(r.ok()) << r.error().message();
  return {std::move(*w), std::move(*r)};
}

}  // namespace foresight::testing
