// Predicted against measured, op by op: two Chrome traces written by `simulate --trace` and
// `run --trace` carry the same op ids (r3/L1/mb2/fwd/qkv), so they align without guessing.
//
//   auto p = load_trace("pred.json");  auto m = load_trace("meas.json");
//   auto r = compare_traces(*p, *m);    // step-time error, error per op kind, worst ops
//   std::cout << compare_report_to_json(*r).dump(2);
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "sim/core/status.h"

namespace foresight {

struct TraceOp {
  std::string id;    // r<rank>/...; unique in a trace
  std::string name;  // kernel or collective name
  std::string cat;   // compute, collective, p2p, copy
  int rank = 0;
  double start_s = 0, dur_s = 0;
};

struct Trace {
  std::string file;
  nlohmann::json metadata;
  std::vector<TraceOp> ops;
  double step_s = 0;  // metadata.step_time_s
};

// Errors name the file and the JSON pointer of the field: unreadable, not JSON, no traceEvents, no
// ops, an event that is not an object or has no phase, an op without an id, a name, category or
// pid of the wrong type, a ts or dur that is missing, not a number, negative or not finite
// ("trace.json: /traceEvents/17/dur: -5 is negative; ..."). Traces are read whole, up to
// kMaxTraceBytes (a larger one is refused with its size, not loaded).
inline constexpr std::size_t kMaxTraceBytes = std::size_t{512} << 20;
Result<Trace> load_trace(const std::string& path);
Result<Trace> trace_from_text(std::string_view text, const std::string& file);
Result<Trace> trace_from_json(const nlohmann::json& doc, const std::string& file);

// The kind an op is reported under: gemm, attention, elementwise, lm_head, optimizer, p2p, copy,
// or the collective's own name (tp_all_reduce, grad_reduce, ...).
std::string op_kind(const TraceOp& op);

struct KindComparison {
  std::string kind;
  int ops = 0;             // matched ops of this kind (all compared ranks)
  double predicted_s = 0;  // summed durations per rank (total over the ranks / ranks)
  double measured_s = 0;
  double error_pct = 0;  // (predicted - measured) / measured * 100
};

struct OpComparison {
  std::string id, kind;
  double predicted_s = 0, measured_s = 0;
};

struct CompareReport {
  std::string predicted_file, measured_file;
  double predicted_step_s = 0, measured_step_s = 0;
  double step_time_error_pct = 0;
  std::vector<int> ranks;  // ranks in both traces
  int matched_ops = 0;
  std::vector<KindComparison> kinds;  // largest measured time first; "idle" = step - compute busy
  std::vector<OpComparison> worst;    // the ten largest |predicted - measured|
  // How `foresight run` put the measured ranks on one clock (its trace's metadata.clocks: rank,
  // offset_s, spread_s, pairs, by); null for a trace without it.
  nlohmann::json measured_clocks;
};

// Fails when the traces are of different plans or models, share no rank, or a compared rank has
// ops in one trace that the other lacks (the first few ids are named).
Result<CompareReport> compare_traces(const Trace& predicted, const Trace& measured);
nlohmann::json compare_report_to_json(const CompareReport& r);

}  // namespace foresight
