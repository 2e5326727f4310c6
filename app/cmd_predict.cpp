// `foresight predict`: the analytic model on one plan, as a readable breakdown or JSON.
#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/plan_options.h"
#include "sim/analytic/analytic_model.h"
#include "sim/analytic/economics.h"
#include "sim/analytic/recompute.h"
#include "sim/core/units.h"
#include "sim/validate/error_band.h"

namespace foresight::app {

int input_error(const std::string& message) {
  fmt::print(stderr, "error: {}\n", clamp_message(message));
  return 2;
}

std::string clamp_message(const std::string& message) {
  // Messages quote excerpts of values; this keeps any that slipped through readable.
  constexpr std::size_t kMax = 4000;
  if (message.size() <= kMax) return message;
  return message.substr(0, 3000) + " ... (" + std::to_string(message.size() - 3500) +
         " bytes left out) ... " + message.substr(message.size() - 500);
}

namespace {

std::string secs(double s) { return pretty_quantity(s, Dimension::kSeconds); }
std::string gib(double b) { return pretty_quantity(b, Dimension::kBytes); }

}  // namespace

void add_cost_options(CLI::App& cmd, CostFlags& f) {
  cmd.add_option("--price", f.price, "USD per device-hour for the cost lines (default: the device preset's)");
  cmd.add_option("--pue", f.pue, "facility power usage effectiveness for the energy lines")
      ->capture_default_str();
  cmd.add_option("--tokens", f.tokens,
                 "a training run's token budget: time, cost and energy to train (e.g. 15T)");
}

Result<CostOptions> cost_options(const CostFlags& f) {
  CostOptions o;
  if (f.pue < 1.0)
    return Error("--pue: " + fmt::format("{}", f.pue) +
                 " is below 1 (a facility cannot use less power than its IT load)");
  if (f.pue > 10.0)
    return Error("--pue: " + fmt::format("{}", f.pue) +
                 " is above 10 (the worst data centres report about 3)");
  if (f.price && *f.price < 0) return Error("--price: a price cannot be negative");
  if (f.price && *f.price > 1e6)
    return Error("--price: " + fmt::format("{}", *f.price) + " USD per device-hour is above 1e6");
  o.pue = f.pue;
  o.price_per_device_hour = f.price;
  if (!f.tokens.empty()) {
    FS_ASSIGN_OR_RETURN(const double t, parse_tokens(f.tokens));
    o.tokens = t;
  }
  return o;
}

namespace {

nlohmann::json economics_json(const Economics& e) {
  nlohmann::json j = {{"cost_per_step_usd", e.cost_per_step_usd},
                      {"cost_per_mtok_usd", e.cost_per_mtok_usd},
                      {"energy_per_mtok_kwh", e.energy_per_mtok_kwh},
                      {"device_power_w", e.device_power_w},
                      {"energy_per_step_j", e.energy_per_step_j}};
  if (e.partner_devices > 0) j["partner_devices"] = e.partner_devices;
  if (e.steps > 0) {
    j["steps"] = e.steps;
    j["time_to_train_s"] = e.time_to_train_s;
    j["cost_to_train_usd"] = e.cost_to_train_usd;
    j["energy_to_train_mwh"] = e.energy_to_train_mwh;
  }
  return j;
}

std::string token_count(double t) {
  if (t >= 1e12) return fmt::format("{:.4g}T", t / 1e12);
  if (t >= 1e9) return fmt::format("{:.4g}B", t / 1e9);
  if (t >= 1e6) return fmt::format("{:.4g}M", t / 1e6);
  return fmt::format("{:.0f}", t);
}

std::string usd(double v) {
  if (v >= 1e6) return fmt::format("${:.2f} M", v / 1e6);
  if (v >= 1e3) return fmt::format("${:.1f} k", v / 1e3);
  return fmt::format("${:.4g}", v);
}

// What the step (and the run, with CostOptions::tokens) costs, at the plan's sequence length.
Economics step_economics(const ResolvedInputs& in, const Prediction& p, const CostOptions& cost) {
  return economics(p, in.cluster, in.plan, effective_seq_len(in.plan, in.model), cost);
}

}  // namespace

nlohmann::json prediction_with_cost_json(const ResolvedInputs& in, const Prediction& p,
                                         const CostOptions& cost) {
  nlohmann::json j = prediction_to_json(p);
  j["economics"] = economics_json(step_economics(in, p, cost));
  j["model"] = in.model.name;
  j["cluster"] = in.cluster.name;
  j["plan"] = plan_to_json(in.plan);
  return j;
}

namespace {

// "64 x h100-sxm5-80gb", or with stages on different accelerators the ranks per device type.
std::string device_summary(const ResolvedInputs& in, const Prediction& p) {
  const Plan& pl = in.plan;
  if (pl.stage_devices.empty()) return fmt::format("{} x {}", p.devices, in.cluster.node.accelerator().name);
  const int per_stage = pl.tp * pl.cp * pl.dp;
  std::vector<std::pair<std::string, int>> counts;
  for (const std::string& name : pl.stage_devices) {
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == name; });
    if (it == counts.end())
      counts.emplace_back(name, per_stage);
    else
      it->second += per_stage;
  }
  std::string devices;
  for (const auto& [name, n] : counts)
    devices += fmt::format("{}{} x {}", devices.empty() ? "" : " + ", n, name);
  return devices;
}

// The job: model, devices (and which stage runs where), parameters and the plan's settings.
void print_job(const ResolvedInputs& in, const Prediction& p) {
  const Plan& pl = in.plan;
  fmt::print("{} on {} ({}, {} node{})\n", in.model.name, device_summary(in, p), in.cluster.name,
             in.cluster.nodes, in.cluster.nodes == 1 ? "" : "s");
  if (!pl.stage_devices.empty()) {
    std::string stages;
    for (int st = 0; st < pl.pp; ++st) {
      const auto [first, last] = pl.stage_layer_range(in.model.layers, st);
      stages +=
          fmt::format("{}stage {}: {} ({} layers)", st ? ", " : "", st, pl.stage_devices[st], last - first);
    }
    fmt::print("  {}\n", stages);
  }
  fmt::print("  {:.1f}B parameters ({:.1f}B active), sequence {}\n", in.model.total_params() / 1e9,
             in.model.active_params() / 1e9, effective_seq_len(pl, in.model));
  fmt::print(
      "plan ({}): tp {} pp {} dp {} cp {} ep {}{} | micro-batch {} x {} = global batch {} | "
      "{}{} | recompute {} | ZeRO {} | {}{}{}\n\n",
      in.plan_source, pl.tp, pl.pp, pl.dp, pl.cp, pl.ep, pl.sequence_parallel ? " +sp" : "", pl.micro_batch,
      p.micro_batches, pl.global_batch, to_string(pl.schedule),
      pl.virtual_stages > 1 ? fmt::format(" (v={})", pl.virtual_stages) : "", recompute_string(pl),
      pl.zero_stage,
      pl.precision == Precision::kFp8
          ? "fp8 (" + to_string(pl.fp8_recipe) + (pl.fp8_weight_recast ? ", weights cast at each use)" : ")")
          : to_string(pl.precision),
      !pl.flash_attention                               ? ""
      : pl.attention_kernel == AttentionKernel::kFlash2 ? " | flash attention (FlashAttention-2 class)"
      : pl.attention_kernel == AttentionKernel::kFlash1 ? " | flash attention (FlashAttention-1 class)"
                                                        : " | flash attention",
      std::string(pl.kernel_fusion ? "" : " | unfused kernels") +
          (pl.kernel_fusion && pl.cross_entropy != CrossEntropy::kOnePass
               ? " | cross-entropy " + to_string(pl.cross_entropy)
               : "") +
          (pl.repeat_kv ? " | K/V repeated per head" : "") +
          (pl.fsdp_copies_apply() ? " | FSDP2 copies" : "") +
          (in.model.is_moe() && pl.expert_gemm == ExpertGemm::kPerExpert ? " | a GEMM per expert" : "") +
          (in.model.is_moe() && pl.moe_drop_and_pad()
               ? fmt::format(" | token drop, capacity factor {:g}", pl.moe_capacity_factor)
               : "") +
          (pl.cuda_graphs ? " | CUDA graphs" : "") +
          (offload_string(pl).empty() ? "" : " | offload " + offload_string(pl)));
}

// With --recompute optimal, what each stage's layers chose: "stage 0: 12 x layernorm+mlp, 8 x none".
void print_recompute_choice(const ResolvedInputs& in) {
  const Plan& pl = in.plan;
  if (pl.recompute != Recompute::kOptimal) return;
  const RecomputeAssignment a = recompute_assignment(in.model, in.cluster, pl);
  for (int st = 0; st < pl.pp; ++st) {
    std::map<RecomputeMask, int> sets;
    for (int layer : stage_layer_list(pl, in.model.layers, st))
      ++sets[a.layer_masks[static_cast<std::size_t>(layer)]];
    std::string line;
    for (const auto& [mask, n] : sets)
      line += fmt::format("{}{} x {}", line.empty() ? "" : ", ", n, recompute_mask_string(mask));
    fmt::print("  recompute, stage {}: {}\n", st, line);
  }
  fmt::print("\n");
}

// The step time, its throughput, and where the time goes.
void print_time(const Prediction& p) {
  fmt::print("step time {:>10}   {:.0f} tokens/s   MFU {:.1f}%   HFU {:.1f}%   {:.0f} TFLOP/s per device\n",
             secs(p.step_time_s), p.tokens_per_s, 100 * p.mfu, 100 * p.hfu, p.tflops_per_device);
  const TimeBreakdown& t = p.time;
  auto row = [&t](const char* name, double v) {
    if (v > 0) fmt::print("  {:<24}{:>10}  {:5.1f}%\n", name, secs(v), 100 * v / t.total);
  };
  const auto parts = time_parts(t);
  row(parts[0].name, parts[0].amount);
  row("  of which recompute", t.recompute);   // the part of compute that re-runs the forward pass
  row("  of which host-bound", t.host_wait);  // the device waiting for the host to issue kernels
  for (std::size_t i = 1; i < parts.size(); ++i) row(parts[i].name, parts[i].amount);
  if (p.data_load_s > 0.01 * t.total)
    fmt::print("  (the data loader needs {} per step; {} of it is not hidden)\n", secs(p.data_load_s),
               secs(t.data));
}

// Memory per device on the fullest stage, and host memory when state is offloaded.
void print_memory(const Prediction& p) {
  const MemoryBreakdown& m = p.memory;
  fmt::print("\nmemory per device (pipeline stage {}): {} of {} ({:.0f}%){}\n", m.stage, gib(m.total),
             gib(m.capacity), 100 * m.total / m.capacity, p.fits() ? "" : "  -- DOES NOT FIT");
  for (const auto& [name, v] : memory_parts(m))
    if (v > 0) fmt::print("  {:<24}{:>10}\n", name, gib(v));
  if (m.host > 0)
    fmt::print("host memory per device (offloaded state): {} of its share {} ({:.0f}%){}\n", gib(m.host),
               gib(m.host_capacity), m.host_capacity > 0 ? 100 * m.host / m.host_capacity : 0.0,
               m.host_capacity > 0 && m.host > m.host_capacity ? "  -- DOES NOT FIT" : "");
}

// What the step costs, and with --tokens the whole run.
void print_cost(const ResolvedInputs& in, const Prediction& p, const CostOptions& cost) {
  const Economics e = step_economics(in, p, cost);
  fmt::print(
      "\ncost: {} per step, {} per million tokens; {:.3g} kWh per million tokens ({:.0f} W per device{}, PUE "
      "{})\n",
      usd(e.cost_per_step_usd), usd(e.cost_per_mtok_usd), e.energy_per_mtok_kwh, e.device_power_w,
      e.partner_devices > 0
          ? fmt::format(" with its attention partner; {} partners billed", e.partner_devices)
          : "",
      cost.pue);
  if (e.steps > 0)
    fmt::print("to train on {} tokens: {:.0f} steps, {:.1f} days, {}, {:.1f} MWh\n",
               token_count(*cost.tokens), e.steps, e.time_to_train_s / 86400, usd(e.cost_to_train_usd),
               e.energy_to_train_mwh);
}

}  // namespace

// Where published runs of the plan's class measured, against this prediction (error_band.h).
void print_error_band(const ResolvedInputs& in, const Prediction& p) {
  auto band = error_band(in.plan, p.devices);
  if (!band) return;
  const auto [lo, hi] = band->measured_range(p.step_time_s);
  fmt::print(
      "  likely {} to {}: published runs of its class ({} {}, {} runs) measured {:.2f}x to {:.2f}x the "
      "model's "
      "step (10th to 90th percentile)\n",
      secs(lo), secs(hi), band->dimension, band->cls, band->cases, lo / p.step_time_s, hi / p.step_time_s);
}

void print_prediction(const ResolvedInputs& in, const Prediction& p, const CostOptions& cost) {
  print_job(in, p);
  print_recompute_choice(in);
  print_time(p);
  print_error_band(in, p);
  print_memory(p);
  print_cost(in, p, cost);
}

Command add_predict_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("predict", "predict one training step with the analytic model");
  auto opts = std::make_shared<PlanOptions>();
  auto json_out = std::make_shared<bool>(false);
  auto cost_flags = std::make_shared<CostFlags>();
  add_plan_options(*cmd, *opts);
  add_cost_options(*cmd, *cost_flags);
  cmd->add_flag("--json", *json_out, "print the Prediction as JSON");
  return [opts, json_out, cost_flags]() -> int {
    apply_default_job(*opts);
    auto cost = cost_options(*cost_flags);
    if (!cost) return input_error(cost.error().message());
    auto in = resolve_inputs(*opts);
    if (!in) return input_error(in.error().message());
    auto pred = predict(in->model, in->cluster, in->plan, in->plan_source);
    if (!pred) return input_error(pred.error().message());
    if (*json_out)
      fmt::print("{}\n", prediction_with_cost_json(*in, *pred, *cost).dump(2));
    else
      print_prediction(*in, *pred, *cost);
    return 0;
  };
}

}  // namespace foresight::app
