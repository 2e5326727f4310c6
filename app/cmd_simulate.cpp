// `foresight simulate`: the discrete-event simulator on one plan; same options as predict.
#include <fmt/core.h>

#include <algorithm>
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

namespace {

struct SimulateFlags {
  bool json = false, full = false;
  std::string trace, algorithm, network = "flow";
  CostFlags cost;
};

void add_simulate_options(CLI::App& cmd, SimulateFlags& f) {
  cmd.add_flag("--json", f.json, "print the Prediction as JSON");
  cmd.add_flag("--full", f.full, "simulate every rank instead of one per pipeline stage");
  cmd.add_option("--trace", f.trace, "write a Chrome trace (opens in Perfetto) to this file");
  cmd.add_option("--network", f.network,
                 "flow (max-min sharing, contention) or alpha-beta (isolated costs, faster)")
      ->check(CLI::IsMember({"flow", "alpha-beta"}))
      ->capture_default_str();
  cmd.add_option("--algorithm", f.algorithm,
                 "force a collective algorithm: ring, tree, hierarchical, halving_doubling, in_switch");
}

// The simulator's options from the flags; an --algorithm that names none is an error.
Result<SimOptions> sim_options_of(const SimulateFlags& f) {
  SimOptions so;
  so.full = f.full;
  so.record = !f.trace.empty();
  so.network = f.network == "alpha-beta" ? NetworkModel::kAlphaBeta : NetworkModel::kFlow;
  if (f.algorithm.empty()) return so;
  bool found = false;
  for (auto a : {Algorithm::kRing, Algorithm::kTree, Algorithm::kHierarchical, Algorithm::kHalvingDoubling,
                 Algorithm::kInSwitch})
    if (to_string(a) == f.algorithm) {
      so.algorithm = a;
      found = true;
    }
  if (!found)
    return Error("--algorithm: \"" + f.algorithm +
                 "\" is not one of: ring, tree, hierarchical, halving_doubling, in_switch");
  return so;
}

nlohmann::json simulation_json(const ResolvedInputs& in, const StepAnnotations& a, const SimResult& r,
                               const CostOptions& cost, double wall) {
  nlohmann::json j = prediction_with_cost_json(in, r.prediction, cost);
  j["engine"] = "des";
  if (const CriticalPath& p = a.critical; !p.ops.empty())
    j["critical_path"] = {{"ops", p.ops.size()},
                          {"ranks", p.ranks},
                          {"compute_s", p.compute_s},
                          {"communication_s", p.communication_s},
                          {"waiting_s", p.waiting_s}};
  j["symmetric"] = !r.full;
  j["simulated_ranks"] = r.simulated_ranks.size();
  j["events"] = r.events;
  j["network_actions"] = r.network_actions;
  j["wall_s"] = wall;
  nlohmann::json links = nlohmann::json::array();
  for (const auto& l : r.busiest_links)
    links.push_back({{"link", l.name}, {"kind", l.kind}, {"bytes", l.bytes}, {"utilisation", l.utilisation}});
  j["busiest_links"] = links;
  return j;
}

// After the breakdown: what was simulated, the busiest links and where the trace went.
void print_simulation(const Workload& w, const SimResult& r, const StepAnnotations& a,
                      const std::string& trace, double wall) {
  fmt::print("\nsimulated {} rank{} ({}), {} ops, {} events, {} network actions in {:.2f} s\n",
             r.simulated_ranks.size(), r.simulated_ranks.size() == 1 ? "" : "s",
             r.full ? "every rank" : "one per pipeline stage; siblings by symmetry", w.op_count(), r.events,
             r.network_actions, wall);
  if (!r.busiest_links.empty()) {
    fmt::print("busiest links:\n");
    for (std::size_t i = 0; i < std::min<std::size_t>(5, r.busiest_links.size()); ++i)
      fmt::print("  {:<48} {:>5.1f}%\n", r.busiest_links[i].name, 100 * r.busiest_links[i].utilisation);
  }
  if (const CriticalPath& p = a.critical; !p.ops.empty())
    fmt::print(
        "critical path: {} ops on {} rank{}: compute {:.3f} s, communication {:.3f} s, waiting {:.3f} s (the "
        "trace marks its ops and draws it as arrows)\n",
        p.ops.size(), p.ranks, p.ranks == 1 ? "" : "s", p.compute_s, p.communication_s, p.waiting_s);
  const std::vector<MemoryTrack>& tracks = a.memory;
  if (const auto top = std::max_element(
          tracks.begin(), tracks.end(),
          [](const MemoryTrack& x, const MemoryTrack& y) { return x.peak_bytes < y.peak_bytes; });
      top != tracks.end())
    fmt::print(
        "memory over the simulated schedule: peak {:.1f} GiB on rank {} (stage {}) at {:.3f} s; the analytic "
        "model's {:.1f} GiB for that stage (the trace has the memory track)\n",
        top->peak_bytes / 1073741824.0, top->rank, top->stage, top->peak_s,
        top->analytic_bytes / 1073741824.0);
  if (!trace.empty()) fmt::print("trace written to {} (open it in https://ui.perfetto.dev)\n", trace);
}

}  // namespace

Command add_simulate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("simulate", "simulate one training step with the discrete-event simulator");
  auto opts = std::make_shared<PlanOptions>();
  auto f = std::make_shared<SimulateFlags>();
  add_plan_options(*cmd, *opts);
  add_cost_options(*cmd, f->cost);
  add_simulate_options(*cmd, *f);
  return [=]() -> int {
    apply_default_job(*opts);
    auto cost = cost_options(f->cost);
    if (!cost) return input_error(cost.error().message());
    auto in = resolve_inputs(*opts);
    if (!in) return input_error(in.error().message());
    FS_ASSIGN_OR_RETURN_CLI(const SimOptions so, sim_options_of(*f), "");
    if (Status shape = check_cluster_shape(in->cluster, opts->cluster); !shape)
      return input_error(shape.error().message());
    if (!f->trace.empty()) FS_RETURN_CLI_IF_ERROR(check_output_path(f->trace, "--trace"));
    const auto t0 = std::chrono::steady_clock::now();
    FS_ASSIGN_OR_RETURN_CLI(auto w, lower(in->model, in->cluster, in->plan), in->plan_source);
    Simulator sim(w, so);
    auto r = sim.run();
    if (!r) return input_error(r.error().message());
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!r->prediction.fits())
      return input_error(in->plan_source +
                         ": plan does not fit in memory: " + describe_memory(r->prediction.memory));
    // The critical path and memory tracks, once: for the trace and for what is printed.
    const StepAnnotations annotations = annotate_step(w, *r);
    if (!f->trace.empty())
      FS_RETURN_CLI_IF_ERROR(
          write_chrome_trace(f->trace, w, *r, "predicted", nlohmann::json::object(), annotations));
    if (f->json) {
      fmt::print("{}\n", simulation_json(*in, annotations, *r, *cost, wall).dump(2));
    } else {
      print_prediction(*in, r->prediction, *cost);
      print_simulation(w, *r, annotations, f->trace, wall);
    }
    return 0;
  };
}

}  // namespace foresight::app
