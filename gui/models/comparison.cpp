// Trace comparison plus timelines.
#include "gui/models/comparison.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "sim/compare/foreign_trace.h"

namespace foresight::gui {

namespace {

// A profiler trace compared by kind, in the report's shape: the kinds' times per rank and step.
Result<Comparison> load_foreign_comparison(const Trace& p, const std::string& predicted_path,
                                           const std::string& measured_path) {
  FS_ASSIGN_OR_RETURN(KindTable kinds, default_kind_table());
  FS_ASSIGN_OR_RETURN(ForeignTrace f, load_foreign_trace(measured_path, kinds));
  FS_ASSIGN_OR_RETURN(ForeignCompareReport fr, compare_foreign(p, {f}));
  Comparison c;
  const std::string tool = f.format == "nsys-sqlite" ? "Nsight Systems report" : "PyTorch profiler trace";
  c.measured_source = (f.format == "nsys-sqlite" ? "nsight systems (" : "pytorch (") + f.format + ")";
  CompareReport& r = c.report;
  r.predicted_file = predicted_path;
  r.measured_file = measured_path;
  r.predicted_step_s = fr.predicted_step_s;
  r.measured_step_s = fr.measured_step_s;
  r.step_time_error_pct = fr.step_time_error_pct;
  r.ranks = {0};
  for (const ForeignKindComparison& k : fr.kinds)
    r.kinds.push_back(KindComparison{k.kind, 0, k.predicted_s, k.measured_s, k.error_pct});
  // No op is matched one by one; where the trace shows layers, their forward times take the
  // differences table's place, the largest difference first.
  for (const ForeignLayerComparison& l : fr.layers)
    r.worst.push_back({fmt::format("L{} forward (measured: layer {})", l.predicted_layer, l.measured_layer),
                       "layer", l.predicted_s, l.measured_s});
  std::stable_sort(r.worst.begin(), r.worst.end(), [](const OpComparison& a, const OpComparison& b) {
    return std::abs(a.predicted_s - a.measured_s) > std::abs(b.predicted_s - b.measured_s);
  });
  c.notes.push_back(tool + " (" + f.format + "): " + std::to_string(fr.steps_compared) +
                    " steps compared by kind of op, after " + std::to_string(fr.warmup_steps) +
                    " warm-up; ops are not matched one by one");
  if (!fr.layers.empty())
    c.notes.push_back(fmt::format(
        "the differences table holds each layer's forward time ({} layers per rank), as the trace's layer "
        "ranges measure it",
        fr.layers.size()));
  if (fr.host_kernels_per_step > 0)
    c.notes.push_back(
        fmt::format("kernel launches per step on the host: {:.0f}, {:.1f} us of host time each (a profile's "
                    "efficiency.host_op; "
                    "foresight calibrate --from-trace sets it)",
                    fr.host_kernels_per_step, fr.host_op_s * 1e6));
  for (const std::string& n : fr.notes) c.notes.push_back(n);
  if (!fr.unmapped.empty())
    c.notes.push_back("largest op no kind rule maps: " + fr.unmapped.front().first +
                      " (see compare/kernel-kinds.json; foresight compare --kinds adds rules)");
  FS_ASSIGN_OR_RETURN(c.predicted, load_timeline(predicted_path));
  if (auto m = load_timeline(measured_path)) {
    c.measured = std::move(*m);
  } else {
    c.notes.push_back("the profiler trace is not drawn: " + m.error().message());
  }
  return c;
}

}  // namespace

Result<Comparison> load_comparison(const std::string& predicted_path, const std::string& measured_path) {
  FS_ASSIGN_OR_RETURN(Trace p, load_trace(predicted_path));
  // A file that is there but is not Foresight's own trace is a profiler's (a missing one gets
  // load_trace's "cannot open").
  if (std::filesystem::exists(measured_path) && !is_foresight_trace(measured_path))
    return load_foreign_comparison(p, predicted_path, measured_path);
  FS_ASSIGN_OR_RETURN(Trace m, load_trace(measured_path));
  Comparison c;
  FS_ASSIGN_OR_RETURN(c.report, compare_traces(p, m));
  FS_ASSIGN_OR_RETURN(c.predicted, load_timeline(predicted_path));
  FS_ASSIGN_OR_RETURN(c.measured, load_timeline(measured_path));
  if (m.metadata.contains("synthetic") && m.metadata["synthetic"].is_string()) {
    c.synthetic = true;
    c.notes.push_back("the measured trace is synthetic, " + m.metadata["synthetic"].get<std::string>());
  }
  return c;
}

}  // namespace foresight::gui
