// Fuzzes the Chrome-trace loader of `compare` (trace_from_text) and, on a trace it accepts, the
// comparison of the trace with itself: a loaded trace has only finite times >= 0, and comparing
// it with itself gives zero error everywhere.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "sim/compare/compare.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto trace = foresight::trace_from_text(text, "fuzz.json");
  if (!trace) return 0;
  for (const auto& op : trace->ops)
    if (!std::isfinite(op.start_s) || !std::isfinite(op.dur_s) || op.start_s < 0 || op.dur_s < 0)
      __builtin_trap();
  if (!std::isfinite(trace->step_s) || trace->step_s < 0) __builtin_trap();
  auto report = foresight::compare_traces(*trace, *trace);
  if (!report) return 0;
  if (report->step_time_error_pct != 0) __builtin_trap();
  for (const auto& k : report->kinds)
    if (k.error_pct != 0 || k.predicted_s != k.measured_s) __builtin_trap();
  (void)foresight::compare_report_to_json(*report).dump();
  return 0;
}
