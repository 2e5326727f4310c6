// The largest model that fits: a model family (a preset's shape scaled) against one plan's memory
// on one cluster -- the "largest trainable model per GPU" question, with and without offload.
//
//   Result<CapacityResult> r = largest_model(llama3_8b, cluster, plan);   // r->params ~ 4e9 ...
//
// Scaling keeps the base's aspect: a factor s multiplies the hidden size (rounded to 128), the
// layer count, the FFN width, and the head count at the base's head size (the KV-head ratio kept);
// vocabulary and sequence stay. Parameters grow about as s^3, memory monotonically with s, so a
// bisection on s finds the largest that fits (to 0.1%).
#pragma once

#include "sim/analytic/prediction.h"
#include "sim/core/status.h"
#include "sim/spec/hardware.h"
#include "sim/spec/model.h"
#include "sim/spec/plan.h"

namespace foresight {

struct CapacityResult {
  ModelSpec model;         // the largest that fits
  double params = 0;
  MemoryBreakdown memory;  // its fullest device
};

// The base scaled by `s` as above.
ModelSpec scale_model(const ModelSpec& base, double s);

// Errors: nothing of the family fits (not even a 1-layer, 128-wide model), or the plan is invalid
// for every size tried.
Result<CapacityResult> largest_model(const ModelSpec& base, const ClusterSpec& c, const Plan& p);

}  // namespace foresight
