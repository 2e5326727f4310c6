// Predicted against measured for the Compare view: compare.h's report plus both timelines.
//
//   Result<Comparison> c = load_comparison("pred.json", "meas.json");
//   c->report.step_time_error_pct;  c->predicted.lanes;  c->measured.bars
#pragma once

#include <string>

#include "gui/models/timeline.h"
#include "sim/compare/compare.h"
#include "sim/core/status.h"

namespace foresight::gui {

struct Comparison {
  CompareReport report;
  Timeline predicted, measured;
};

// Loads both traces, aligns them op by op (compare_traces) and reads them as timelines. Errors are
// compare's: different plans or models, no common rank, ops that differ.
Result<Comparison> load_comparison(const std::string& predicted_path, const std::string& measured_path);

}  // namespace foresight::gui
