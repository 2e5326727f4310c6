// `foresight compare PREDICTED MEASURED`: aligns a simulated and a measured trace op by op.
#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "app/commands.h"
#include "sim/compare/compare.h"
#include "sim/compare/foreign_trace.h"
#include "sim/core/output_file.h"
#include "sim/spec/json_reader.h"

namespace foresight::app {

void print_compare_report(const CompareReport& r) {
  fmt::print(
      "step time: predicted {:.3f} ms, measured {:.3f} ms, error {:+.1f}%  ({} ops matched on {} rank{})\n",
      r.predicted_step_s * 1e3, r.measured_step_s * 1e3, r.step_time_error_pct, r.matched_ops, r.ranks.size(),
      r.ranks.size() == 1 ? "" : "s");
  fmt::print("\n{:<22} {:>6} {:>14} {:>14} {:>9}\n", "op kind (per rank)", "ops", "predicted ms",
             "measured ms", "error");
  for (const auto& k : r.kinds)  // a percentage of under a microsecond on both sides says nothing: "-"
    fmt::print("{:<22} {:>6} {:>14.3f} {:>14.3f} {:>9}\n", k.kind, k.ops, k.predicted_s * 1e3,
               k.measured_s * 1e3,
               std::max(k.predicted_s, k.measured_s) < 1e-6 ? std::string("-")
                                                            : fmt::format("{:+.1f}%", k.error_pct));
  if (std::any_of(r.kinds.begin(), r.kinds.end(), [](const KindComparison& k) { return k.kind == "p2p"; }))
    fmt::print(
        "(p2p: a receive counts from the end of its rank's previous op to its data's arrival in both traces, "
        "its wait for the sender included; idle counts the waits too)\n");
  if (r.measured_clocks.is_array() && r.measured_clocks.size() > 1) {
    double lo = 0, hi = 0, spread = 0;
    for (const auto& c : r.measured_clocks) {
      lo = std::min(lo, c.value("offset_s", 0.0));
      hi = std::max(hi, c.value("offset_s", 0.0));
      spread = std::max(spread, c.value("spread_s", 0.0));
    }
    fmt::print(
        "measured ranks' clocks: put on one by the run (their shared collectives and pipeline transfers): "
        "offsets {:+.1f} to {:+.1f} us, each within {:.1f} us (the largest spread)\n",
        lo * 1e6, hi * 1e6, spread * 1e6);
  }
  fmt::print("\nlargest differences:\n");
  for (const auto& w : r.worst)
    fmt::print("  {:<40} {:<12} predicted {:9.3f} ms  measured {:9.3f} ms\n", w.id, w.kind,
               w.predicted_s * 1e3, w.measured_s * 1e3);
}

void print_foreign_report(const ForeignCompareReport& r) {
  fmt::print(
      "step time: predicted {:.3f} ms, measured {:.3f} ms (median of {} step{} after {} of warm-up, mean "
      "over {} "
      "trace{}), error {:+.1f}%\n",
      r.predicted_step_s * 1e3, r.measured_step_s * 1e3, r.steps_compared, r.steps_compared == 1 ? "" : "s",
      r.warmup_steps, r.measured_files.size(), r.measured_files.size() == 1 ? "" : "s",
      r.step_time_error_pct);
  if (r.host_kernels_per_step > 0)
    fmt::print(
        "host: {:.0f} kernels launched per rank and step, {:.1f} us of host time each (the launching "
        "threads' busy time less their waits for the device; a profile's efficiency.host_op)\n",
        r.host_kernels_per_step, r.host_op_s * 1e6);
  if (!r.clocks.empty() && r.step_start_skew_s > 0)
    fmt::print(
        "ranks: with their clocks aligned on the collectives, a step starts {:.3f} ms apart across them "
        "(its latest start less its earliest, mean over the steps)\n",
        r.step_start_skew_s * 1e3);
  fmt::print("\n{:<24} {:>14} {:>14} {:>9}\n", "kind (per rank, step)", "predicted ms", "measured ms",
             "error");
  for (const auto& k : r.kinds)
    fmt::print("{:<24} {:>14.3f} {:>14.3f} {:>9}\n", k.kind, k.predicted_s * 1e3, k.measured_s * 1e3,
               std::max(k.predicted_s, k.measured_s) < 1e-6 || k.measured_s <= 0
                   ? std::string("-")
                   : fmt::format("{:+.1f}%", k.error_pct));
  if (!r.layers.empty()) {
    fmt::print("\n{:<32} {:>14} {:>14} {:>9}\n", "layer (forward; measured / plan)", "predicted ms",
               "measured ms", "error");
    for (const auto& l : r.layers)
      fmt::print("{:<32} {:>14.3f} {:>14.3f} {:>9}\n",
                 fmt::format("{} / L{}", l.measured_layer, l.predicted_layer), l.predicted_s * 1e3,
                 l.measured_s * 1e3,
                 l.measured_s <= 0 ? std::string("-") : fmt::format("{:+.1f}%", l.error_pct));
  }
  if (!r.unmapped.empty()) {
    fmt::print("\nnames no kind rule maps (per rank and step; extend the table with --kinds FILE):\n");
    for (const auto& [name, s] : r.unmapped) fmt::print("  {:>10.3f} ms  {}\n", s * 1e3, name);
  }
  for (const auto& n : r.notes) fmt::print("note: {}\n", n);
}

Result<ForeignCompareReport> compare_with_foreign(const Trace& predicted,
                                                  const std::vector<std::string>& paths,
                                                  const std::string& kinds_file, int warmup) {
  FS_ASSIGN_OR_RETURN(std::vector<ForeignTrace> traces, load_measured(paths, kinds_file));
  return compare_foreign(predicted, traces, warmup);
}

Result<std::vector<ForeignTrace>> load_measured(const std::vector<std::string>& paths,
                                                const std::string& kinds_file) {
  FS_ASSIGN_OR_RETURN(KindTable table, default_kind_table());
  if (!kinds_file.empty()) {
    auto doc = read_json_file(kinds_file);
    if (!doc) return doc.error().with_context("--kinds");
    auto extra = kind_table_from_json(*doc, kinds_file);
    if (!extra) return extra.error().with_context("--kinds");
    table = extend_kind_table(table, *extra);
  }
  std::vector<ForeignTrace> traces;
  for (const auto& path : paths) {
    FS_ASSIGN_OR_RETURN(ForeignTrace t, load_foreign_trace(path, table));
    traces.push_back(std::move(t));
  }
  return traces;
}

std::vector<std::string> measured_paths(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (const auto& a : args) {
    std::error_code ec;
    if (!std::filesystem::is_directory(a, ec)) {
      out.push_back(a);
      continue;
    }
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(a, ec))
      if (e.is_regular_file() && (e.path().extension() == ".json" || e.path().extension() == ".sqlite"))
        files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    out.insert(out.end(), files.begin(), files.end());
  }
  return out;
}

Command add_compare_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("compare", "align a predicted and a measured trace op by op and report the errors");
  auto predicted = std::make_shared<std::string>();
  auto measured = std::make_shared<std::vector<std::string>>();
  auto kinds_file = std::make_shared<std::string>();
  auto warmup = std::make_shared<int>(-1);
  auto json_out = std::make_shared<bool>(false);
  auto out = std::make_shared<std::string>();
  cmd->add_option("predicted", *predicted,
                  "trace from `foresight simulate --trace` (use --full for every rank)")
      ->required();
  cmd->add_option(
         "measured", *measured,
         "trace from `foresight run --trace`, or PyTorch profiler traces (export_chrome_trace: Kineto's, or "
         "a CPU-only build's) or Nsight Systems reports (nsys export --type sqlite), one per rank, or "
         "folders of them")
      ->required();
  cmd->add_option("--kinds", *kinds_file,
                  "more kernel/op name rules for PyTorch traces, tried before compare/kernel-kinds.json's "
                  "({\"rules\": [{\"pattern\": ..., \"kind\": ...}]})");
  cmd->add_option("--warmup", *warmup,
                  "PyTorch traces: steps left out at the start (default: 1 when there are three or more)")
      ->check(CLI::Range(0, 1000000));
  cmd->add_flag("--json", *json_out, "print the report as JSON");
  cmd->add_option("--out", *out, "also write the JSON report to this file (the GUI reads it)");
  return [=]() -> int {
    if (!out->empty()) FS_RETURN_CLI_IF_ERROR(check_output_path(*out, "--out"));
    // The report: written to --out, printed as JSON or as a table.
    auto report = [&](const nlohmann::json& j, const auto& print_table) -> int {
      if (!out->empty()) FS_RETURN_CLI_IF_ERROR(write_file_atomically(*out, j.dump(2) + "\n"));
      if (*json_out)
        fmt::print("{}\n", j.dump(2));
      else
        print_table();
      return 0;
    };
    auto p = load_trace(*predicted);
    if (!p) return input_error(p.error().message());
    const std::vector<std::string> paths = measured_paths(*measured);
    if (paths.empty()) return input_error("measured: the folders hold no .json traces");
    if (paths.size() > 1 || !is_foresight_trace(paths.front())) {
      auto r = compare_with_foreign(*p, paths, *kinds_file, *warmup);
      if (!r) return input_error(r.error().message());
      return report(foreign_report_to_json(*r), [&] { print_foreign_report(*r); });
    }
    auto m = load_trace(paths.front());
    if (!m) return input_error(m.error().message());
    auto r = compare_traces(*p, *m);
    if (!r) return input_error(r.error().message());
    return report(compare_report_to_json(*r), [&] { print_compare_report(*r); });
  };
}

}  // namespace foresight::app
