// `foresight capacity`: the largest model of a family that fits the plan's devices: everything on
// the device, the optimizer offloaded to the host (ZeRO-Offload), and the optimizer, parameters
// and activations offloaded (ZeRO-Infinity style; host memory checked too). Exit status: 0 when a
// model fits at some level, 1 when none fits at any (each level's reason printed), 2 when the plan
// cannot split any model of the family (e.g. cp not dividing the sequence length).
#include <fmt/core.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/plan_options.h"
#include "sim/analytic/capacity.h"
#include "sim/core/units.h"

namespace foresight::app {

namespace {

// The three offload levels tried, in order: 0 everything on the device, 1 the optimizer offloaded,
// 2 the optimizer, parameters and activations offloaded.
constexpr int kOffloadLevels = 3;

Plan plan_at_offload_level(const Plan& plan, int level) {
  Plan p = plan;
  p.offload_optimizer = level >= 1;
  p.offload_params = p.offload_activations = level >= 2;
  return p;
}

const char* offload_level_label(int level) {
  return level == 0   ? "on the device"
         : level == 1 ? "optimizer offloaded"
                      : "optimizer+params+activations off";
}

void print_capacity_header(const ResolvedInputs& in) {
  fmt::print(
      "largest model of {}'s family on {} x {} ({}), {} | micro-batch {} | recompute {} | ZeRO {} | {}\n",
      in.model.name, in.plan.gpus(), in.cluster.node.accelerator().name, in.cluster.name,
      layout_string(in.plan), in.plan.micro_batch, to_string(in.plan.recompute), in.plan.zero_stage,
      to_string(in.plan.precision));
}

// One offload level's answer as a JSON row: the largest model, or why none fits.
nlohmann::json capacity_row_json(const Plan& p, const Result<CapacityResult>& r) {
  const std::string offload = offload_string(p).empty() ? "none" : offload_string(p);
  if (!r)
    return {{"offload", offload}, {"offload_optimizer", p.offload_optimizer}, {"error", r.error().message()}};
  return {{"offload", offload},
          {"offload_optimizer", p.offload_optimizer},
          {"params", r->params},
          {"model", model_to_json(r->model)},
          {"memory_bytes", r->memory.total},
          {"capacity_bytes", r->memory.capacity},
          {"host_bytes", r->memory.host},
          {"host_capacity_bytes", r->memory.host_capacity}};
}

// One offload level's answer as a line of the table.
void print_capacity_row(int level, const Result<CapacityResult>& r) {
  const char* label = offload_level_label(level);
  if (!r) {
    fmt::print("  {:<34} {}\n", label, r.error().message());
    return;
  }
  fmt::print("  {:<34} {:6.2f}B parameters (hidden {}, {} layers, {} heads)   {} of {} on stage {}{}\n",
             label, r->params / 1e9, r->model.hidden, r->model.layers, r->model.heads,
             pretty_quantity(r->memory.total, Dimension::kBytes),
             pretty_quantity(r->memory.capacity, Dimension::kBytes), r->memory.stage,
             r->memory.host > 0
                 ? fmt::format(", host {} of {}", pretty_quantity(r->memory.host, Dimension::kBytes),
                               pretty_quantity(r->memory.host_capacity, Dimension::kBytes))
                 : std::string());
}

// Each offload level's largest model, printed as it is found (or gathered into the JSON); returns
// how many levels fit some model.
int report_offload_levels(const ResolvedInputs& in, bool json_out) {
  nlohmann::json rows = nlohmann::json::array();
  int fitted = 0;
  if (!json_out) print_capacity_header(in);
  for (int level = 0; level < kOffloadLevels; ++level) {
    const Plan p = plan_at_offload_level(in.plan, level);
    const auto r = largest_model(in.model, in.cluster, p);
    if (r) ++fitted;
    if (json_out)
      rows.push_back(capacity_row_json(p, r));
    else
      print_capacity_row(level, r);
  }
  if (json_out)
    fmt::print("{}\n", nlohmann::json{{"base", in.model.name},
                                      {"cluster", in.cluster.name},
                                      {"plan", plan_to_json(in.plan)},
                                      {"results", rows}}
                           .dump(2));
  return fitted;
}

}  // namespace

Command add_capacity_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("capacity",
                                 "the largest model of --model's family that fits the plan: on the device, "
                                 "with the optimizer offloaded, and with optimizer, parameters and "
                                 "activations offloaded");
  auto opts = std::make_shared<PlanOptions>();
  auto json_out = std::make_shared<bool>(false);
  add_plan_options(*cmd, *opts);
  cmd->add_flag("--json", *json_out, "print the result as JSON");
  return [opts, json_out]() -> int {
    if (!opts->gpus && !opts->has("/tp") && !opts->has("/pp") && !opts->has("/dp") && opts->plan_file.empty())
      opts->gpus = 1;  // one device
    auto in = resolve_inputs(*opts);
    if (!in) return input_error(in.error().message());
    // A plan that cannot split any model of the family is bad input (2), named with its reason.
    if (const Status split = capacity_plan_check(in->model, in->cluster, in->plan); !split)
      return input_error(split.error().message());
    // Nothing fits at any offload level: the memory check failed (1), said on stderr as well.
    if (report_offload_levels(*in, *json_out) == 0) {
      fmt::print(stderr,
                 "error: capacity: no model of {}'s family fits this plan on {}, with or without offload "
                 "(the reasons above)\n",
                 in->model.name, in->cluster.name);
      return 1;
    }
    return 0;
  };
}

}  // namespace foresight::app
