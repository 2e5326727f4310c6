// Predicted against measured for the Compare view: compare.h's report plus both timelines.
//
//   Result<Comparison> c = load_comparison("pred.json", "meas.json");
//   c->report.step_time_error_pct;  c->predicted.lanes;  c->measured.bars
//
// The measured trace is Foresight's own (foresight run --trace, op by op), or a PyTorch profiler
// trace (Kineto's or the CPU-only export; foreign_trace.h), compared per kind of op per step.
#pragma once

#include <string>
#include <vector>

#include "gui/models/timeline.h"
#include "sim/compare/compare.h"
#include "sim/core/status.h"

namespace foresight::gui {

struct Comparison {
  CompareReport report;
  Timeline predicted, measured;
  // "foresight", or "pytorch (kineto)" / "pytorch (chrome-cpu)" for a profiler trace.
  std::string measured_source = "foresight";
  // What to know before trusting the numbers: a synthetic stand-in for a measurement (the
  // built-in example's), where a profiler trace contradicts the plan, names no rule maps.
  std::vector<std::string> notes;
  bool synthetic = false;  // the "measured" trace is not a measurement
};

// Loads both traces, aligns them op by op (compare_traces) or, for a PyTorch profiler trace, by
// kind (compare_foreign, after its first step when it has three or more), and reads them as
// timelines. Errors are compare's: different plans or models (naming the fields), no common rank,
// ops that differ; a profiler trace without step ranges.
Result<Comparison> load_comparison(const std::string& predicted_path, const std::string& measured_path);

}  // namespace foresight::gui
