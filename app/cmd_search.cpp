// `foresight search`: ranked layouts, rejected-plan reasons, Pareto front, cost and energy.
#include <fmt/core.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/cli_checks.h"
#include "app/commands.h"
#include "app/plan_options.h"
#include "sim/core/output_file.h"
#include "sim/core/units.h"
#include "sim/search/search.h"
#include "sim/spec/presets.h"

namespace foresight::app {

namespace {

nlohmann::json ranked_json(const RankedPlan& r) {
  nlohmann::json j = {{"plan", plan_to_json(r.plan)},
                      {"prediction", prediction_to_json(r.prediction)},
                      {"memory_headroom_bytes", r.memory_headroom},
                      {"cost_per_mtok_usd", r.economics.cost_per_mtok_usd},
                      {"energy_per_mtok_kwh", r.economics.energy_per_mtok_kwh},
                      {"cost_per_step_usd", r.economics.cost_per_step_usd},
                      {"device_power_w", r.economics.device_power_w}};
  if (r.simulated_step_s >= 0) j["simulated_step_s"] = r.simulated_step_s;
  if (r.economics.steps > 0)
    j["run"] = {{"steps", r.economics.steps},
                {"time_to_train_s", r.economics.time_to_train_s},
                {"cost_usd", r.economics.cost_to_train_usd},
                {"energy_mwh", r.economics.energy_to_train_mwh}};
  return j;
}

struct SearchFlags {
  std::string model = "llama3-70b", cluster = "dgx-h100-ndr", objective = "time", out, tokens;
  int gpus = 0, top = 10, resimulate = 5;
  double min_headroom_pct = 100 * kDefaultMinHeadroom;
  long long global_batch = 0;
  CostFlags cost;
  unsigned threads = 0;
  bool json = false, csv = false, try_offload = false;
};

void add_search_options(CLI::App& cmd, SearchFlags& o) {
  cmd.add_option("--model,-m", o.model, "model preset, model JSON or Hugging Face config.json")
      ->capture_default_str();
  cmd.add_option("--cluster,-c", o.cluster, "cluster preset or JSON")->capture_default_str();
  cmd.add_option("--gpus,-g", o.gpus,
                 "accelerators to use (default: 64 for the default model/cluster, else the whole cluster)")
      ->check(int_in(plan_range::kDegree));
  cmd.add_option("--global-batch,--gb", o.global_batch, "sequences per step (default 1024)")
      ->check(int_in(plan_range::kGlobalBatch));
  cmd.add_option("--objective", o.objective, "time, cost or energy")
      ->check(CLI::IsMember({"time", "cost", "energy"}))
      ->capture_default_str();
  cmd.add_option("--top", o.top, "plans to list")->check(int_in(1, 100000))->capture_default_str();
  cmd.add_option("--resimulate", o.resimulate,
                 "rank with the discrete-event simulator: the best N, then more until the top is settled (0: "
                 "analytic ranking)")
      ->check(int_in(0, 100000))
      ->capture_default_str();
  cmd.add_option("--min-headroom", o.min_headroom_pct,
                 "percent of the fullest device's memory every plan must leave free, a margin for the "
                 "allocator's fragmentation (0: fitting is enough)")
      ->check(number_in(0, 99))
      ->capture_default_str();
  add_cost_options(cmd, o.cost);  // --price, --pue, --tokens: the same rules as predict's
  cmd.add_option("--threads", o.threads, "worker threads (default: all cores)");
  cmd.add_option("--out", o.out, "write the best plan to this plan file");
  cmd.add_flag("--json", o.json, "print one JSON object");
  cmd.add_flag("--csv", o.csv, "print the ranked plans as CSV");
  cmd.add_flag(
      "--try-offload", o.try_offload,
      "also try parameter and activation offload to host memory (for models that do not fit otherwise)");
}

// The search's options from the flags (all but the cost options, checked by the caller).
SearchOptions search_options_of(const SearchFlags& o) {
  SearchOptions so;
  so.gpus = o.gpus > 0 ? o.gpus : (o.model == "llama3-70b" && o.cluster == "dgx-h100-ndr" ? 64 : 0);
  so.global_batch = o.global_batch;
  so.objective = o.objective == "cost"     ? Objective::kCost
                 : o.objective == "energy" ? Objective::kEnergy
                                           : Objective::kTime;
  so.top_k = o.top;
  so.resimulate = o.resimulate;
  so.min_headroom = o.min_headroom_pct / 100;
  so.threads = o.threads;
  if (o.try_offload) {
    so.space.offload_params = {false, true};
    so.space.offload_activations = {false, true};
  }
  return so;
}

// Runs the search with its progress on stderr (a counter on a terminal, one line otherwise, none
// with --json or --csv).
Result<SearchResult> search_with_progress(const ModelSpec& model, const ClusterSpec& cluster,
                                          const SearchOptions& so, const SearchFlags& o) {
  const bool tty = isatty(fileno(stderr)) != 0;
  auto progress = [&](std::uint64_t done, std::uint64_t total) {
    if (o.json || o.csv) return;
    if (tty)
      fmt::print(stderr, "\revaluating plans: {:>8} / {} ({:.0f}%)", done, total, 100.0 * done / total);
    else if (done == total)
      fmt::print(stderr, "evaluated {} plans\n", total);
  };
  auto r = search(model, cluster, so, progress);
  if (tty && !o.json && !o.csv) fmt::print(stderr, "\n");
  return r;
}

// The layout column: degrees, then what is offloaded and what is overlapped.
std::string layout_column(const Plan& p) {
  std::string s = layout_string(p);
  if (!offload_string(p).empty()) s.append(" off:").append(offload_string(p));
  if (!overlap_string(p).empty()) s.append(" ov:").append(overlap_string(p));
  return s;
}

void print_search_json(const ModelSpec& model, const ClusterSpec& cluster, const SearchFlags& o,
                       const SearchResult& r) {
  nlohmann::json plans = nlohmann::json::array(), pareto = nlohmann::json::array();
  for (const auto& p : r.plans) plans.push_back(ranked_json(p));
  for (const auto& p : r.pareto) pareto.push_back(ranked_json(p));
  nlohmann::json j = {{"model", model.name},      {"cluster", cluster.name},
                      {"objective", o.objective}, {"candidates", r.candidates},
                      {"evaluated", r.evaluated}, {"simulated", r.simulated},
                      {"rejected", r.rejected},   {"plans", plans},
                      {"pareto", pareto},         {"min_headroom", o.min_headroom_pct / 100},
                      {"wall_s", r.wall_s}};
  fmt::print("{}\n", j.dump(2));
}

void print_search_csv(const SearchResult& r) {
  fmt::print(
      "rank,tp,pp,dp,cp,ep,sp,vp,micro_batch,zero,recompute,schedule,offload,overlap,step_s,simulated_step_"
      "s,"
      "tokens_per_s,mfu,memory_gib,capacity_gib,cost_per_mtok_usd,energy_per_mtok_kwh,headroom_gib\n");
  int i = 0;
  for (const auto& p : r.plans) {
    const Plan& pl = p.plan;
    fmt::print(
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.6g},{:.6g},{:.6g},{:.4f},{:.3f},{:.3f},{:.6g},{:.6g},{:"
        ".3f}"
        "\n",
        ++i, pl.tp, pl.pp, pl.dp, pl.cp, pl.ep, pl.sequence_parallel, pl.virtual_stages, pl.micro_batch,
        pl.zero_stage, recompute_string(pl), to_string(pl.schedule), offload_string(pl), overlap_string(pl),
        p.prediction.step_time_s, p.simulated_step_s, p.prediction.tokens_per_s, p.prediction.mfu,
        p.prediction.memory.total / 1073741824.0, p.prediction.memory.capacity / 1073741824.0,
        p.economics.cost_per_mtok_usd, p.economics.energy_per_mtok_kwh, p.memory_headroom / 1073741824.0);
  }
}

// The job searched, how many candidates, and why the others were rejected.
void print_search_summary(const ModelSpec& model, const ClusterSpec& cluster, const SearchFlags& o,
                          const SearchResult& r) {
  std::string accelerators;  // "h100-sxm5-80gb", or every type of a node that mixes them
  for (const auto& g : cluster.node.devices)
    if (g.device.kind != DeviceKind::kCpu)
      accelerators.append(accelerators.empty() ? "" : " + ").append(g.device.name);
  fmt::print("{} on {} ({}), objective: {}; the best plan uses {} devices\n", model.name, accelerators,
             cluster.name, o.objective, r.plans.front().prediction.devices);
  fmt::print("{} candidate plans, {} fit with {:g}% of memory free and were timed, in {:.2f} s; rejected:",
             r.candidates, r.evaluated, o.min_headroom_pct, r.wall_s);
  for (const auto& [k, v] : r.rejected) fmt::print(" {} {};", v, k);
  fmt::print("\n");
  if (r.simulated > 0)
    fmt::print(
        "ranked by the simulator's step: {} plans re-simulated until no unsimulated plan could enter the "
        "top; "
        "'step' is the analytic model's\n",
        r.simulated);
}

void print_ranked_plans(const SearchResult& r) {
  fmt::print("\n{:>3}  {:<26} {:>3} {:>4} {:<9} {:<16} {:>9} {:>9} {:>10} {:>6} {:>14} {:>9} {:>9}\n", "#",
             "layout", "mb", "zero", "recompute", "schedule", "step", "simulated", "tokens/s", "MFU",
             "memory/device", "$/Mtok", "kWh/Mtok");
  int i = 0;
  for (const auto& p : r.plans) {
    const Plan& pl = p.plan;
    fmt::print(
        "{:>3}  {:<26} {:>3} {:>4} {:<9} {:<16} {:>9} {:>9} {:>10.0f} {:>5.1f}% {:>6.1f}/{:<4.0f}GiB "
        "{:>9.3f} {:>9.3f}\n",
        ++i, layout_column(pl), pl.micro_batch, pl.zero_stage, recompute_string(pl), to_string(pl.schedule),
        pretty_quantity(p.prediction.step_time_s, Dimension::kSeconds),
        p.simulated_step_s >= 0 ? pretty_quantity(p.simulated_step_s, Dimension::kSeconds) : "-",
        p.prediction.tokens_per_s, 100 * p.prediction.mfu, p.prediction.memory.total / 1073741824.0,
        p.prediction.memory.capacity / 1073741824.0, p.economics.cost_per_mtok_usd,
        p.economics.energy_per_mtok_kwh);
  }
}

// The Pareto front, the best plan's whole run (with --tokens) and where it was written (--out).
void print_pareto_and_best(const SearchFlags& o, const SearchResult& r) {
  fmt::print("\nPareto front (step time vs $/Mtok vs memory headroom): {} plan{}\n", r.pareto.size(),
             r.pareto.size() == 1 ? "" : "s");
  for (const auto& p : r.pareto)
    fmt::print("  {:<30} mb{} z{} {:<9} {:>9}  ${:.3f}/Mtok  {:.1f} GiB free\n", layout_column(p.plan),
               p.plan.micro_batch, p.plan.zero_stage, recompute_string(p.plan),
               pretty_quantity(p.prediction.step_time_s, Dimension::kSeconds), p.economics.cost_per_mtok_usd,
               p.memory_headroom / 1073741824.0);
  const RankedPlan& best = r.plans.front();
  if (best.economics.steps > 0)
    fmt::print("\nbest plan for {} tokens: {:.0f} steps, {:.1f} days, ${:.3g}M, {:.3g} MWh\n", o.cost.tokens,
               best.economics.steps, best.economics.time_to_train_s / 86400,
               best.economics.cost_to_train_usd / 1e6, best.economics.energy_to_train_mwh);
  if (!o.out.empty()) fmt::print("best plan written to {}\n", o.out);
}

}  // namespace

Command add_search_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("search", "search the layout space for the best plan");
  auto o = std::make_shared<SearchFlags>();
  add_search_options(*cmd, *o);
  return [o]() -> int {
    auto src = resolve_spec(PresetKind::kModel, o->model);
    if (!src) return input_error(src.error().with_context("--model").message());
    auto model = model_from_text(src->text, src->file);
    if (!model) return input_error(model.error().message());
    auto cluster = load_cluster(o->cluster);
    if (!cluster) return input_error(cluster.error().message());
    SearchOptions so = search_options_of(*o);
    FS_ASSIGN_OR_RETURN_CLI(so.cost, cost_options(o->cost), "");
    if (!o->out.empty()) FS_RETURN_CLI_IF_ERROR(check_output_path(o->out, "--out"));
    auto r = search_with_progress(*model, *cluster, so, *o);
    if (!r) return input_error(r.error().message());
    if (r->plans.empty()) {
      std::string why;
      for (const auto& [k, v] : r->rejected) why += fmt::format("\n  {:>10}  {}", v, k);
      return input_error(
          fmt::format("no plan of the {} candidates fits or is valid; rejected:{}", r->candidates, why));
    }
    if (!o->out.empty())
      FS_RETURN_CLI_IF_ERROR(
          write_file_atomically(o->out, plan_to_json(r->plans.front().plan).dump(2) + "\n"));
    if (o->json) {
      print_search_json(*model, *cluster, *o, *r);
    } else if (o->csv) {
      print_search_csv(*r);
    } else {
      print_search_summary(*model, *cluster, *o, *r);
      print_ranked_plans(*r);
      print_pareto_and_best(*o, *r);
    }
    return 0;
  };
}

}  // namespace foresight::app
