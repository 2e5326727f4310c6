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
    nlohmann::json rows = nlohmann::json::array();
    int fitted = 0;  // offload levels at which some model fits
    if (!*json_out)
      fmt::print(
          "largest model of {}'s family on {} x {} ({}), {} | micro-batch {} | recompute {} | ZeRO {} | {}\n",
          in->model.name, in->plan.gpus(), in->cluster.node.accelerator().name, in->cluster.name,
          layout_string(in->plan), in->plan.micro_batch, to_string(in->plan.recompute), in->plan.zero_stage,
          to_string(in->plan.precision));
    for (int level = 0; level < 3; ++level) {
      Plan p = in->plan;
      p.offload_optimizer = level >= 1;
      p.offload_params = p.offload_activations = level >= 2;
      const char* label = level == 0   ? "on the device"
                          : level == 1 ? "optimizer offloaded"
                                       : "optimizer+params+activations off";
      const std::string offload = offload_string(p).empty() ? "none" : offload_string(p);
      auto r = largest_model(in->model, in->cluster, p);
      if (!r) {
        if (*json_out)
          rows.push_back({{"offload", offload},
                          {"offload_optimizer", p.offload_optimizer},
                          {"error", r.error().message()}});
        else
          fmt::print("  {:<34} {}\n", label, r.error().message());
        continue;
      }
      ++fitted;
      if (*json_out) {
        rows.push_back({{"offload", offload},
                        {"offload_optimizer", p.offload_optimizer},
                        {"params", r->params},
                        {"model", model_to_json(r->model)},
                        {"memory_bytes", r->memory.total},
                        {"capacity_bytes", r->memory.capacity},
                        {"host_bytes", r->memory.host},
                        {"host_capacity_bytes", r->memory.host_capacity}});
      } else {
        fmt::print("  {:<34} {:6.2f}B parameters (hidden {}, {} layers, {} heads)   {} of {} on stage {}{}\n",
                   label, r->params / 1e9, r->model.hidden, r->model.layers, r->model.heads,
                   pretty_quantity(r->memory.total, Dimension::kBytes),
                   pretty_quantity(r->memory.capacity, Dimension::kBytes), r->memory.stage,
                   r->memory.host > 0
                       ? fmt::format(", host {} of {}", pretty_quantity(r->memory.host, Dimension::kBytes),
                                     pretty_quantity(r->memory.host_capacity, Dimension::kBytes))
                       : std::string());
      }
    }
    if (*json_out)
      fmt::print("{}\n", nlohmann::json{{"base", in->model.name},
                                        {"cluster", in->cluster.name},
                                        {"plan", plan_to_json(in->plan)},
                                        {"results", rows}}
                             .dump(2));
    // Nothing fits at any offload level: the memory check failed (1), said on stderr as well.
    if (fitted == 0) {
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
