// Resolution and analytic evaluation of the Setup view's inputs.
#include "gui/models/plan_inputs.h"

#include "sim/analytic/analytic_model.h"
#include "sim/spec/job.h"

namespace foresight::gui {

namespace {

JobRequest request_for(const PlanInputs& in) {
  JobRequest r;
  r.model = in.model;
  r.cluster = in.cluster;
  r.plan = in.plan;
  r.overrides_source = "plan";
  r.gpus_label = "GPUs";
  return r;
}

}  // namespace

PlanInputs example_inputs() {
  const JobRequest example = default_job_request();
  PlanInputs in;
  in.model = example.model;
  in.cluster = example.cluster;
  // The built-in presets always resolve (a test holds it); the plan keeps its defaults otherwise.
  if (auto job = resolve_job(example)) in.plan = job->plan;
  return in;
}

Result<ResolvedPlan> resolve_plan(const PlanInputs& in) {
  FS_ASSIGN_OR_RETURN(Job job, resolve_job(request_for(in)));
  FS_RETURN_IF_ERROR(check_cluster_shape(job.cluster, "cluster"));
  return ResolvedPlan{std::move(job.model), std::move(job.cluster), std::move(job.plan)};
}

Evaluation evaluate_plan(const PlanInputs& in) {
  Evaluation e;
  e.inputs = in;
  auto r = resolve_plan(in);
  if (!r) {
    e.error = r.error().message();
    return e;
  }
  e.model = r->model;
  e.cluster = r->cluster;
  // The plan is evaluated once; a plan that does not fit still has its prediction drawn (how
  // much it overflows), and check_prediction -- the checks predict() makes after evaluating --
  // supplies the message.
  const AnalyticModel am(e.model, e.cluster);
  e.prediction = am.evaluate(r->plan);
  e.stages = am.stage_memories(r->plan);
  e.has_prediction = true;
  e.economics =
      economics(e.prediction, e.cluster, r->plan, effective_seq_len(r->plan, e.model), CostOptions{});
  if (Status checked = check_prediction(e.prediction, e.cluster, r->plan, "plan"); !checked)
    e.error = checked.error().message();
  return e;
}

}  // namespace foresight::gui
