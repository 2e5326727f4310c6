// What the Setup view edits (a model preset, a cluster preset and a plan) and what the Details
// view shows about it: the analytic Prediction, its economics, or the validation error.
//
//   PlanInputs in = example_inputs();          // llama3-70b on 64 H100s, tp8 pp2 dp4
//   Evaluation e = evaluate_plan(in);
//   if (!e.ok()) show(e.error);                 // "plan: /tp: 3 does not divide model heads (32)"
//   if (e.has_prediction) draw(e.prediction);   // also for a plan that does not fit
//
// Plain values, no Qt: the views receive them by signal and the tests build them directly.
#pragma once

#include <string>
#include <vector>

#include "sim/analytic/economics.h"
#include "sim/analytic/prediction.h"
#include "sim/core/status.h"
#include "sim/spec/hardware.h"
#include "sim/spec/model.h"
#include "sim/spec/plan.h"

namespace foresight::gui {

struct PlanInputs {
  std::string model = "llama3-70b";      // model preset name or file
  std::string cluster = "dgx-h100-ndr";  // cluster preset name or file
  Plan plan;                             // the job uses plan.gpus() accelerators
  bool operator==(const PlanInputs&) const = default;
};

// The built-in example the CLI starts from too (sim/spec/job.h's default_job_request): Llama 3
// 70B on 64 H100s, TP 8 with sequence parallelism, 2 pipeline stages, 4 data-parallel replicas
// with ZeRO-1, 256 sequences per step.
PlanInputs example_inputs();

// Specs loaded and the cluster sized to the plan's device count; the plan validated (resolve_job).
struct ResolvedPlan {
  ModelSpec model;
  ClusterSpec cluster;
  Plan plan;
};
// Errors name the field: "model: ...", "cluster: ...", "GPUs: ...", "plan: /tp: ...".
Result<ResolvedPlan> resolve_plan(const PlanInputs& in);

struct Evaluation {
  PlanInputs inputs;
  std::string error;            // empty: valid and fits
  bool has_prediction = false;  // the plan is valid (it may still not fit in memory)
  ModelSpec model;
  ClusterSpec cluster;
  Prediction prediction;
  std::vector<MemoryBreakdown> stages;  // each pipeline stage's memory (prediction.memory: the fullest)
  Economics economics;
  bool ok() const { return error.empty(); }
};

// The analytic model is closed-form (microseconds), so views may call this on the GUI thread.
Evaluation evaluate_plan(const PlanInputs& in);

}  // namespace foresight::gui
