// Traces made in-process: simulate a plan with the discrete-event simulator and write its Chrome
// trace (what `foresight simulate --trace` does), and the example pair the screenshot mode and
// the tests use for the Timeline and Compare views.
//
//   auto t = simulate_to_trace(example_inputs(), "/tmp/step.json");   // t->ops bars to draw
//   auto pair = write_example_traces(example_inputs(), "/tmp/dir");   // predicted + "measured"
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "gui/models/plan_inputs.h"
#include "sim/core/status.h"
#include "sim/des/simulator.h"

namespace foresight::gui {

struct SimulatedTrace {
  PlanInputs inputs;  // what was simulated
  std::string path;
  std::size_t ops = 0;    // ops recorded (= complete events in the trace)
  std::size_t ranks = 0;  // ranks simulated (one per pipeline stage unless `full`)
  double step_s = 0;
  ClusterSpec cluster;                 // sized to the plan (the Topology view draws it)
  std::vector<LinkUse> busiest_links;  // SimResult::busiest_links
};

// Resolves, lowers and simulates `in` (recording every op) and writes the trace to `path`.
// A plan that does not fit in memory is an error, as in `foresight simulate`.
Result<SimulatedTrace> simulate_to_trace(const PlanInputs& in, const std::string& path, bool full = false);

struct ExampleTraces {
  std::string predicted, measured;
};

// Writes `dir`/predicted.json (the simulation of `in`) and `dir`/measured.json, a stand-in for a
// measured run so that the Compare view can be shown without hardware: the same plan simulated
// on a deliberately slower copy of the device and network (efficiencies scaled as listed in
// traces.cpp), marked "synthetic" in its metadata. A real measured trace comes from
// `foresight run --trace`.
Result<ExampleTraces> write_example_traces(const PlanInputs& in, const std::string& dir);

}  // namespace foresight::gui
