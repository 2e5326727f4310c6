// `foresight compare PREDICTED MEASURED`: aligns a simulated and a measured trace op by op.
#include <fmt/core.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <string>

#include "app/commands.h"
#include "sim/compare/compare.h"
#include "sim/core/output_file.h"

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
  fmt::print("\nlargest differences:\n");
  for (const auto& w : r.worst)
    fmt::print("  {:<40} {:<12} predicted {:9.3f} ms  measured {:9.3f} ms\n", w.id, w.kind,
               w.predicted_s * 1e3, w.measured_s * 1e3);
}

Command add_compare_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("compare", "align a predicted and a measured trace op by op and report the errors");
  auto predicted = std::make_shared<std::string>();
  auto measured = std::make_shared<std::string>();
  auto json_out = std::make_shared<bool>(false);
  auto out = std::make_shared<std::string>();
  cmd->add_option("predicted", *predicted,
                  "trace from `foresight simulate --trace` (use --full for every rank)")
      ->required();
  cmd->add_option("measured", *measured, "trace from `foresight run --trace`")->required();
  cmd->add_flag("--json", *json_out, "print the report as JSON");
  cmd->add_option("--out", *out, "also write the JSON report to this file (the GUI reads it)");
  return [=]() -> int {
    if (!out->empty()) FS_RETURN_CLI_IF_ERROR(check_output_path(*out, "--out"));
    auto p = load_trace(*predicted);
    if (!p) return input_error(p.error().message());
    auto m = load_trace(*measured);
    if (!m) return input_error(m.error().message());
    auto r = compare_traces(*p, *m);
    if (!r) return input_error(r.error().message());
    const auto j = compare_report_to_json(*r);
    if (!out->empty()) FS_RETURN_CLI_IF_ERROR(write_file_atomically(*out, j.dump(2) + "\n"));
    if (*json_out)
      fmt::print("{}\n", j.dump(2));
    else
      print_compare_report(*r);
    return 0;
  };
}

}  // namespace foresight::app
