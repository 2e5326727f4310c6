// `foresight validate`: predict published training runs and compare with their measured step time.
#include <fmt/core.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "app/commands.h"
#include "sim/spec/presets.h"
#include "sim/validate/validation_case.h"

namespace foresight::app {

namespace {

// The training cases: predicted against measured, what was chosen for fields the source did not
// report, and the mean and worst error.
void print_training_cases(const ValidationSummary& s, const std::string& engine) {
  fmt::print("{:<28} {:>11} {:>11} {:>8}  {}\n", "case", "predicted", "measured", "error",
             "chosen for unreported fields");
  for (const auto& r : s.cases) {
    if (!r.ok) continue;
    std::string chosen;
    for (const auto& [k, v] : r.chosen.items()) chosen += (chosen.empty() ? "" : ", ") + k + "=" + v.dump();
    if (r.assumed.contains("software"))
      chosen +=
          std::string(chosen.empty() ? "" : "; ") + "assumed " + r.assumed["software"].get<std::string>();
    fmt::print("{:<28} {:>10.3f}s {:>10.3f}s {:>+7.1f}%  {}\n", r.id, r.predicted_step_s, r.measured_step_s,
               r.error_pct, chosen);
  }
  int ok = 0, bad = 0;
  for (const auto& r : s.cases) (r.ok ? ok : bad) += 1;
  if (!s.cases.empty())
    fmt::print(
        "\n{} training cases predicted ({} engine), {} failed. Mean absolute error {:.2f}%, worst "
        "{:.2f}% ({}).\n",
        ok, engine, bad, s.mape_pct, s.max_abs_error_pct, s.worst_id.empty() ? "-" : s.worst_id);
  if (s.memory_cases > 0) {
    fmt::print("\n{:<40} {:>10} {:>10} {:>8}\n", "peak memory (cases that report it)", "predicted",
               "measured", "error");
    for (const auto& r : s.cases)
      if (r.ok && r.measured_memory_gib > 0)
        fmt::print("{:<40} {:>6.1f} GiB {:>6.1f} GiB {:>+7.1f}%\n", r.id, r.predicted_memory_gib,
                   r.measured_memory_gib, r.memory_error_pct);
    fmt::print("Peak memory: {} cases, mean absolute error {:.2f}%, worst {:.2f}% ({}).\n", s.memory_cases,
               s.memory_mape_pct, s.memory_max_abs_error_pct, s.memory_worst_id);
  }
  for (const auto& r : s.cases)
    if (!r.ok) fmt::print("FAILED {}: {}\n", r.id, r.failure);
}

// The collective cases: predicted against measured bus bandwidth.
void print_collective_cases(const ValidationSummary& s) {
  if (s.collectives.empty()) return;
  fmt::print("\n{:<28} {:<10} {:<13} {:>14} {:>13} {:>8}\n", "collective case", "kind", "algorithm",
             "predicted busbw", "measured", "error");
  for (const auto& c : s.collectives) {
    if (!c.ok) {
      fmt::print("FAILED {}: {}\n", c.id, c.failure);
      continue;
    }
    fmt::print("{:<28} {:<10} {:<13} {:>10.1f} GB/s {:>8.1f} GB/s {:>+7.1f}%\n", c.id, c.kind, c.algorithm,
               c.predicted_busbw / 1e9, c.measured_busbw / 1e9, c.error_pct);
  }
  fmt::print("\nCollectives: mean absolute error {:.2f}%, worst {:.2f}%.\n", s.collectives_mape_pct,
             s.collectives_max_abs_error_pct);
}

// Mean and worst absolute error per source and per class (stack, precision, sharding, scale).
void print_groups(const ValidationSummary& s) {
  std::string group;
  for (const GroupError& g : errors_by_group(s)) {
    if (g.group != group) {
      group = g.group;
      fmt::print("\n{:<40} {:>5} {:>8} {:>8}  {}\n", "by " + group, "cases", "MAPE", "worst", "worst case");
    }
    fmt::print("{:<40} {:>5} {:>7.2f}% {:>7.2f}%  {}\n", g.name, g.cases, g.mape_pct, g.max_abs_error_pct,
               g.worst_id);
  }
}

// The gates given (--max-mape, --max-error; std::nullopt when not given).
struct Gates {
  std::optional<double> max_mape, max_case;
};

// Exit 1 names every gate that failed, on stderr (stdout may be the JSON); 0 when all passed.
int check_gates(const ValidationSummary& s, const Gates& g) {
  int status = 0;
  const auto gate_failed = [&](const std::string& why) {
    fmt::print(stderr, "gate failed: {}\n", why);
    status = 1;
  };
  if (s.failed > 0)
    gate_failed(fmt::format("{} of {} cases could not be predicted", s.failed, s.cases.size()));
  if (g.max_mape && !(s.mape_pct <= *g.max_mape))
    gate_failed(fmt::format("MAPE {:.2f}% > --max-mape {:g}%", s.mape_pct, *g.max_mape));
  if (g.max_case && !(s.max_abs_error_pct <= *g.max_case))
    gate_failed(fmt::format("worst case {} error {:.2f}% > --max-error {:g}%",
                            s.worst_id.empty() ? "-" : s.worst_id, s.max_abs_error_pct, *g.max_case));
  return status;
}

}  // namespace

Command add_validate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("validate", "predict published training runs and report the error");
  auto paths = std::make_shared<std::vector<std::string>>();
  auto json_out = std::make_shared<bool>(false);
  auto max_mape = std::make_shared<double>(0);
  auto max_case = std::make_shared<double>(0);
  auto engine = std::make_shared<std::string>("analytic");
  auto by_source = std::make_shared<bool>(false);
  auto device_patches = std::make_shared<std::vector<std::string>>();
  cmd->add_option("paths", *paths,
                  "validation case files or folders (schema foresight-validation-case/1 or /2)")
      ->required();
  cmd->add_flag("--json", *json_out, "print one JSON object instead of the table");
  cmd->add_flag("--by-source", *by_source,
                "also the error per source and per class (stack, precision, sharding, scale); with --json "
                "under \"groups\"");
  cmd->add_option("--engine", *engine, "analytic (closed form) or des (discrete-event simulator)")
      ->check(CLI::IsMember({"analytic", "des"}))
      ->capture_default_str();
  cmd->add_option("--device-patch", *device_patches,
                  "DEVICE=JSON: predict with the device preset DEVICE changed by a JSON merge patch, e.g. "
                  "h100-sxm5-80gb='{\"efficiency\": {\"gemm_fp8\": 0.5}}' (what-if; fitting a constant)");
  auto* mape_opt =
      cmd->add_option("--max-mape", *max_mape, "exit 1 if the mean absolute error (%) exceeds this");
  auto* case_opt =
      cmd->add_option("--max-error", *max_case, "exit 1 if any case's absolute error (%) exceeds this");
  return [=]() -> int {
    // A gate is a percentage >= 0: a negative or non-finite one would pass everything (or nothing).
    for (const auto& [opt, value] : {std::pair{mape_opt, *max_mape}, std::pair{case_opt, *max_case}})
      if (opt->count() > 0 && !(std::isfinite(value) && value >= 0))
        return input_error(
            fmt::format("{}: {} is not a gate; expected a finite percentage >= 0", opt->get_name(), value));
    std::vector<DevicePatch> patches;
    for (const std::string& arg : *device_patches) {
      const std::size_t eq = arg.find('=');
      if (eq == std::string::npos || eq == 0)
        return input_error("--device-patch: \"" + arg.substr(0, 80) + "\" is not DEVICE=JSON");
      nlohmann::json patch = nlohmann::json::parse(arg.substr(eq + 1), nullptr, false);
      if (patch.is_discarded() || !patch.is_object())
        return input_error("--device-patch " + arg.substr(0, eq) + ": the patch is not a JSON object");
      // The patched preset is resolved (and checked) once, before any case runs.
      auto patched = device_patch(arg.substr(0, eq), patch);
      if (!patched) return input_error(patched.error().message());
      patches.push_back(std::move(patched).value());
    }
    auto files = collect_case_files(*paths);
    if (!files) return input_error(files.error().message());
    const ValidationSummary s =
        run_validation(*files, *engine == "des" ? Engine::kDes : Engine::kAnalytic, patches);
    if (*json_out) {
      nlohmann::json out = validation_to_json(s);
      if (*by_source) out["groups"] = groups_to_json(errors_by_group(s));
      fmt::print("{}\n", out.dump(2));
    } else {
      print_training_cases(s, *engine);
      if (*by_source) print_groups(s);
      print_collective_cases(s);
    }
    Gates gates;
    if (mape_opt->count() > 0) gates.max_mape = *max_mape;
    if (case_opt->count() > 0) gates.max_case = *max_case;
    return check_gates(s, gates);
  };
}

Command add_presets_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("presets", "list the built-in models, devices, nodes and clusters");
  (void)cmd;
  return []() -> int {
    for (auto kind : {PresetKind::kModel, PresetKind::kDevice, PresetKind::kNode, PresetKind::kCluster}) {
      std::string names;
      for (const auto& n : preset_names(kind)) names += (names.empty() ? "" : ", ") + n;
      fmt::print("{:<8} {}\n", std::string(to_string(kind)) + "s", names);
    }
    return 0;
  };
}

}  // namespace foresight::app
