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

#include "sim/analytic/analytic_model.h"
#include "sim/analytic/prediction.h"
#include "sim/core/status.h"
#include "sim/spec/hardware.h"
#include "sim/spec/model.h"
#include "sim/spec/plan.h"

namespace foresight {

struct CapacityResult {
  ModelSpec model;  // the largest that fits
  double params = 0;
  MemoryBreakdown memory;  // its fullest device
};

// The base scaled by `s` as above.
ModelSpec scale_model(const ModelSpec& base, double s);

// The fewest layers per stage (per chunk) that must recompute, under the plan's recompute policy,
// for the plan to fit (Plan::recompute_layers): memory falls as layers recompute, and every
// recomputed layer costs the same, so the fewest that fit is the fastest such plan (exact for
// uniform layers). -1 when even recomputing every layer does not fit, or the plan recomputes
// nothing. `min_free`: the share of the fullest device's memory that must stay free as well (the
// search's allocator margin, SearchOptions::min_headroom); 0: fitting is enough.
int fewest_recompute_layers(const ModelSpec& m, const ClusterSpec& c, const Plan& p);
// The most layers one chunk of a pipeline stage holds (the largest useful recompute_layers).
int most_layers_per_chunk(const Plan& p, int layers);
int fewest_recompute_layers(const AnalyticModel& am, const Plan& p, double min_free = 0);

// The base scaled by `s` and made splittable by the plan, as largest_model probes it: the head
// count rounded up to a multiple of tp (and of every stage_tp; the hidden size grown to keep the
// head size), the FFN width to a multiple of it too, KV heads that divide the heads and divide or
// are divided by tp, at least pp layers (a multiple of pp*virtual_stages when interleaved; the
// layer_split's total when given). A model the plan already splits is scale_model's unchanged, and
// every size is non-decreasing in s (the bisection stays valid).
ModelSpec splittable_model(const ModelSpec& base, double s, const Plan& p);

// Whether the plan can split the family at all (the smallest splittable model; the answer is the
// same for every size): the plan's own error otherwise (cp not dividing the sequence, ...).
Status capacity_plan_check(const ModelSpec& base, const ClusterSpec& c, const Plan& p);

// Errors: the plan cannot split the family (capacity_plan_check), or nothing of the family fits
// (not even the smallest splittable model: its size and memory are named).
Result<CapacityResult> largest_model(const ModelSpec& base, const ClusterSpec& c, const Plan& p);

}  // namespace foresight
