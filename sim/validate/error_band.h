// How far a prediction may be from the run it predicts, from the published runs of its class: the
// 10th and 90th percentiles of the analytic model's signed error over the validation cases that
// share the plan's sharding (or, where that class has too few runs, its precision, then its
// scale): validation/accuracy-classes.json, written by bench/accuracy_table.sh and embedded in
// the build. How data parallelism shards the model tells apart the stacks the model fits least
// (FSDP-style runs) from those it fits best, more than precision or scale do.
//
//   auto band = error_band(plan, 64);                 // sharding ZeRO-1/2: -28% .. +11%, 70 cases
//   auto [lo, hi] = band->measured_range(35.2);       // 31.7 s .. 48.9 s: where such runs measured
#pragma once

#include <map>
#include <string>
#include <utility>

#include "sim/core/status.h"
#include "sim/spec/plan.h"

namespace foresight {

// The classes validation groups its errors by, for a plan on `gpus` devices: "precision" (bf16,
// fp8, ...), "sharding" (replicated, ZeRO-1/2, ZeRO-3/FSDP) and "scale" (up to 64 GPUs, 65 to
// 512 GPUs, more than 512 GPUs).
std::map<std::string, std::string> plan_classes(const Plan& p, int gpus);

struct ErrorBand {
  std::string dimension, cls;  // "sharding", "ZeRO-1/2"
  int cases = 0;
  double mape_pct = 0;
  double p10_pct = 0, p90_pct = 0;  // signed error: (predicted - measured) / measured x 100
  std::string generated;            // when the table was written
  // Where runs of this class measured, for a predicted step: [step / (1 + p90), step / (1 + p10)].
  std::pair<double, double> measured_range(double predicted_s) const;
};

// The band of the plan's sharding class (else precision, else scale) in the built-in table; an
// error when the table is missing or none of the plan's classes has one.
Result<ErrorBand> error_band(const Plan& p, int gpus);

}  // namespace foresight
