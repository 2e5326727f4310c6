// `foresight simulate`: the discrete-event simulator on one plan; same options as predict.
#include <fmt/core.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/plan_options.h"
#include "sim/analytic/economics.h"
#include "sim/core/output_file.h"
#include "sim/des/simulator.h"
#include "sim/des/trace.h"

namespace foresight::app {

Command add_simulate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("simulate", "simulate one training step with the discrete-event simulator");
  auto opts = std::make_shared<PlanOptions>();
  auto json_out = std::make_shared<bool>(false);
  auto full = std::make_shared<bool>(false);
  auto trace = std::make_shared<std::string>();
  auto algorithm = std::make_shared<std::string>();
  auto network = std::make_shared<std::string>("flow");
  auto cost_flags = std::make_shared<CostFlags>();
  add_plan_options(*cmd, *opts);
  add_cost_options(*cmd, *cost_flags);
  cmd->add_flag("--json", *json_out, "print the Prediction as JSON");
  cmd->add_flag("--full", *full, "simulate every rank instead of one per pipeline stage");
  cmd->add_option("--trace", *trace, "write a Chrome trace (opens in Perfetto) to this file");
  cmd->add_option("--network", *network,
                  "flow (max-min sharing, contention) or alpha-beta (isolated costs, faster)")
      ->check(CLI::IsMember({"flow", "alpha-beta"}))
      ->capture_default_str();
  cmd->add_option("--algorithm", *algorithm,
                  "force a collective algorithm: ring, tree, hierarchical, halving_doubling, in_switch");
  return [=]() -> int {
    apply_default_job(*opts);
    auto cost = cost_options(*cost_flags);
    if (!cost) return input_error(cost.error().message());
    auto in = resolve_inputs(*opts);
    if (!in) return input_error(in.error().message());
    SimOptions so;
    so.full = *full;
    so.record = !trace->empty();
    so.network = *network == "alpha-beta" ? NetworkModel::kAlphaBeta : NetworkModel::kFlow;
    if (!algorithm->empty()) {
      bool found = false;
      for (auto a : {Algorithm::kRing, Algorithm::kTree, Algorithm::kHierarchical,
                     Algorithm::kHalvingDoubling, Algorithm::kInSwitch})
        if (to_string(a) == *algorithm) {
          so.algorithm = a;
          found = true;
        }
      if (!found)
        return input_error("--algorithm: \"" + *algorithm +
                           "\" is not one of: ring, tree, hierarchical, halving_doubling, in_switch");
    }
    if (Status shape = check_cluster_shape(in->cluster, opts->cluster); !shape)
      return input_error(shape.error().message());
    if (!trace->empty()) FS_RETURN_CLI_IF_ERROR(check_output_path(*trace, "--trace"));
    const auto t0 = std::chrono::steady_clock::now();
    FS_ASSIGN_OR_RETURN_CLI(auto w, lower(in->model, in->cluster, in->plan), in->plan_source);
    Simulator sim(w, so);
    auto r = sim.run();
    if (!r) return input_error(r.error().message());
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r->prediction.fits())
      return input_error(in->plan_source +
                         ": plan does not fit in memory: " + describe_memory(r->prediction.memory));
    if (!trace->empty()) {
      const Status s = write_chrome_trace(*trace, w, *r, "predicted");
      if (!s) return input_error(s.error().message());
    }
    if (*json_out) {
      nlohmann::json j = prediction_with_cost_json(*in, r->prediction, *cost);
      j["engine"] = "des";
      j["symmetric"] = !r->full;
      j["simulated_ranks"] = r->simulated_ranks.size();
      j["events"] = r->events;
      j["network_actions"] = r->network_actions;
      j["wall_s"] = wall;
      nlohmann::json links = nlohmann::json::array();
      for (const auto& l : r->busiest_links)
        links.push_back(
            {{"link", l.name}, {"kind", l.kind}, {"bytes", l.bytes}, {"utilisation", l.utilisation}});
      j["busiest_links"] = links;
      fmt::print("{}\n", j.dump(2));
    } else {
      print_prediction(*in, r->prediction, *cost);
      fmt::print("\nsimulated {} rank{} ({}), {} ops, {} events, {} network actions in {:.2f} s\n",
                 r->simulated_ranks.size(), r->simulated_ranks.size() == 1 ? "" : "s",
                 r->full ? "every rank" : "one per pipeline stage; siblings by symmetry", w.op_count(),
                 r->events, r->network_actions, wall);
      if (!r->busiest_links.empty()) {
        fmt::print("busiest links:\n");
        for (std::size_t i = 0; i < std::min<std::size_t>(5, r->busiest_links.size()); ++i)
          fmt::print("  {:<48} {:>5.1f}%\n", r->busiest_links[i].name, 100 * r->busiest_links[i].utilisation);
      }
      if (!trace->empty()) fmt::print("trace written to {} (open it in https://ui.perfetto.dev)\n", *trace);
    }
    return 0;
  };
}

}  // namespace foresight::app
