// Resolution and analytic evaluation of the Setup view's inputs.
#include "gui/models/plan_inputs.h"

#include "sim/analytic/analytic_model.h"
#include "sim/spec/presets.h"

namespace foresight::gui {

PlanInputs example_inputs() {
  PlanInputs in;
  in.model = "llama3-8b";
  in.cluster = "dgx-h100-ndr";
  Plan& p = in.plan;
  p.tp = 2;
  p.pp = 2;
  p.dp = 4;
  p.sequence_parallel = true;
  p.micro_batch = 1;
  p.global_batch = 64;
  p.zero_stage = 1;
  p.schedule = Schedule::k1F1B;
  return in;
}

Result<ResolvedPlan> resolve_plan(const PlanInputs& in) {
  ResolvedPlan r;
  auto src = resolve_spec(PresetKind::kModel, in.model);
  if (!src) return src.error().with_context("model");
  auto model = model_from_text(src->text, src->file);
  if (!model) return model.error().with_context("model");
  r.model = std::move(*model);
  auto cluster = load_cluster(in.cluster);
  if (!cluster) return cluster.error().with_context("cluster");
  r.cluster = std::move(*cluster);
  // Degrees multiply: check the product in 64 bits before the int arithmetic of Plan::gpus().
  constexpr long long kMaxDevices = 1 << 20;
  const Plan& p = in.plan;
  for (int d : {p.tp, p.pp, p.dp, p.cp})
    if (d < 1) return Error("plan: tp, pp, dp and cp must be >= 1");
  if (1LL * p.tp * p.pp * p.dp * p.cp > kMaxDevices)
    return Error("GPUs: tp*pp*dp*cp exceeds " + std::to_string(kMaxDevices) + " devices");
  FS_RETURN_IF_ERROR(resize_cluster(r.cluster, p.gpus(), "GPUs"));
  FS_RETURN_IF_ERROR(check_cluster_shape(r.cluster, "cluster"));
  FS_RETURN_IF_ERROR(validate_plan(p, r.model, r.cluster.total_accelerators(), "plan"));
  r.plan = p;
  return r;
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
  // predict() refuses a plan that does not fit; the Details view still wants to draw how much it
  // overflows, so the plan is evaluated directly, and predict() -- every check the CLI makes,
  // such as a precision the device lacks -- supplies the message.
  const AnalyticModel am(e.model, e.cluster);
  e.prediction = am.evaluate(r->plan);
  e.has_prediction = true;
  const int seq = effective_seq_len(r->plan, e.model);
  e.economics = economics(e.prediction, e.cluster, r->plan, seq, CostOptions{});
  if (auto checked = predict(e.model, e.cluster, r->plan, "plan"); !checked)
    e.error = checked.error().message();
  return e;
}

}  // namespace foresight::gui
