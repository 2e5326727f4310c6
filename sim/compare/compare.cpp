// Trace loading and op-by-op alignment.
#include "sim/compare/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "sim/spec/json_reader.h"

namespace foresight {

namespace {

// A time in microseconds at `where`: a finite number >= 0, or the reason it is not.
Result<double> trace_time(const nlohmann::json& e, const char* key, const std::string& where) {
  const std::string at = where + "/" + key;
  if (!e.contains(key)) return Error(at + ": missing (a complete event needs ts and dur, in microseconds)");
  const auto& v = e[key];
  if (!v.is_number()) return Error(at + ": expected a number of microseconds, got " + describe_json_value(v));
  const double us = v.get<double>();
  if (!std::isfinite(us))
    return Error(at + ": " + std::to_string(us) + " is not a finite number of microseconds");
  if (us < 0) return Error(at + ": " + v.dump() + " is negative; expected microseconds >= 0");
  return us;
}

// A string field of an event (absent: `fallback`).
Result<std::string> trace_string(const nlohmann::json& e, const char* key, const std::string& where,
                                 const std::string& fallback) {
  if (!e.contains(key)) return fallback;
  if (!e[key].is_string())
    return Error(where + "/" + key + ": expected a string, got " + describe_json_value(e[key]));
  return e[key].get<std::string>();
}

}  // namespace

Result<Trace> trace_from_json(const nlohmann::json& doc, const std::string& file) {
  if (!doc.is_object())
    return Error(file + ": /: expected a JSON object with traceEvents, got " + describe_json_value(doc));
  if (!doc.contains("traceEvents")) return Error(file + ": /traceEvents: missing (not a Chrome trace)");
  if (!doc["traceEvents"].is_array())
    return Error(file + ": /traceEvents: expected an array of events, got " +
                 describe_json_value(doc["traceEvents"]));
  Trace t;
  t.file = file;
  t.metadata = doc.contains("metadata") ? doc["metadata"] : nlohmann::json::object();
  if (!t.metadata.is_object())
    return Error(file + ": /metadata: expected an object, got " + describe_json_value(t.metadata));
  if (t.metadata.contains("model") && !t.metadata["model"].is_string())
    return Error(file + ": /metadata/model: expected a string, got " +
                 describe_json_value(t.metadata["model"]));
  if (t.metadata.contains("step_time_s")) {
    const auto& v = t.metadata["step_time_s"];
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
      return Error(file + ": /metadata/step_time_s: expected seconds >= 0, got " + describe_json_value(v));
    t.step_s = v.get<double>();
  }
  std::set<std::string> seen;
  const auto& events = doc["traceEvents"];
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    const std::string where = file + ": /traceEvents/" + std::to_string(i);
    if (!e.is_object()) return Error(where + ": expected an event object, got " + describe_json_value(e));
    if (!e.contains("ph")) return Error(where + "/ph: missing (every Chrome trace event has a phase)");
    if (!e["ph"].is_string())
      return Error(where + "/ph: expected a string, got " + describe_json_value(e["ph"]));
    if (e["ph"].get<std::string>() != "X") continue;  // metadata, counters, instants: not ops
    if (!e.contains("args") || !e["args"].is_object() || !e["args"].contains("id") ||
        !e["args"]["id"].is_string())
      return Error(where + "/args/id: missing (ops need the workload's op id to be aligned)");
    TraceOp op;
    op.id = e["args"]["id"].get<std::string>();
    FS_ASSIGN_OR_RETURN(op.name, trace_string(e, "name", where, ""));
    FS_ASSIGN_OR_RETURN(op.cat, trace_string(e, "cat", where, "compute"));
    if (e.contains("pid")) {
      const auto& pid = e["pid"];
      if (!pid.is_number_integer() || pid.get<std::int64_t>() < 0 || pid.get<std::int64_t>() > 1'000'000'000)
        return Error(where + "/pid: expected a rank (an integer >= 0), got " + describe_json_value(pid));
      op.rank = pid.get<int>();
    }
    FS_ASSIGN_OR_RETURN(const double ts_us, trace_time(e, "ts", where));
    FS_ASSIGN_OR_RETURN(const double dur_us, trace_time(e, "dur", where));
    op.start_s = ts_us * 1e-6;
    op.dur_s = dur_us * 1e-6;
    if (!seen.insert(op.id).second) return Error(where + "/args/id: duplicate op id " + op.id);
    t.ops.push_back(std::move(op));
  }
  if (t.ops.empty()) return Error(file + ": no ops (the trace has no complete events)");
  if (t.step_s <= 0) {  // traces from elsewhere: the makespan
    double lo = 1e300, hi = 0;
    for (const auto& op : t.ops) {
      lo = std::min(lo, op.start_s);
      hi = std::max(hi, op.start_s + op.dur_s);
    }
    t.step_s = hi - lo;
  }
  return t;
}

Result<Trace> trace_from_text(std::string_view text, const std::string& file) {
  if (text.empty())
    return Error(file + ": empty file (expected a Chrome trace from simulate --trace or run --trace)");
  // The shared reader: its size and depth limits, and the line and column of a syntax error.
  FS_ASSIGN_OR_RETURN(nlohmann::json doc, parse_json_text(text, file, kMaxTraceBytes));
  return trace_from_json(doc, file);
}

Result<Trace> load_trace(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Error(path + ": cannot open trace (no such file)");
  FS_ASSIGN_OR_RETURN(std::string text, read_text_file(path, kMaxTraceBytes));
  return trace_from_text(text, path);
}

std::string op_kind(const TraceOp& op) {
  if (op.cat == "collective") {  // "attn.tp_all_reduce" and "mlp.tp_all_reduce" are both tp_all_reduce
    const auto dot = op.name.find('.');
    return dot == std::string::npos ? op.name : op.name.substr(dot + 1);
  }
  if (op.cat == "p2p") return "p2p";
  if (op.cat == "copy") return "copy";
  static const std::set<std::string> gemm = {"qkv",    "proj",   "mlp_up", "mlp_down",
                                             "router", "scores", "attn_v"};
  if (gemm.count(op.name)) return "gemm";
  if (op.name == "attention" || op.name == "softmax") return "attention";
  if (op.name == "lm_head_loss" || op.name == "final_norm" || op.name == "cross_entropy_grad")
    return "lm_head";
  if (op.name == "optimizer" || op.name == "host_optimizer") return "optimizer";
  return "elementwise";
}

namespace {
double pct(double predicted, double measured) {
  return measured > 0 ? (predicted - measured) / measured * 100.0 : 0.0;
}

// A receive from the end of its rank's previous op (compute or p2p) to its own end: the wait for
// the sender and the transfer. A runtime's receive is timed so (it blocks from the moment the rank
// reaches it); a simulator issues its receive once the data is there, so its wait is the gap before.
std::unordered_map<const TraceOp*, double> receive_spans(const Trace& t) {
  std::map<int, std::vector<const TraceOp*>> by_rank;
  for (const auto& op : t.ops)
    if (op.cat == "compute" || op.cat == "p2p") by_rank[op.rank].push_back(&op);
  std::unordered_map<const TraceOp*, double> out;
  for (auto& [rank, ops] : by_rank) {
    std::sort(ops.begin(), ops.end(),
              [](const TraceOp* a, const TraceOp* b) { return a->start_s < b->start_s; });
    double free_at = -1;  // when the rank's previous op ended (none yet: the receive's own start)
    for (const TraceOp* op : ops) {
      const double end = op->start_s + op->dur_s;
      if (op->cat == "p2p" && op->name.rfind("recv", 0) == 0)
        out[op] = end - (free_at >= 0 ? std::min(free_at, op->start_s) : op->start_s);
      free_at = std::max(free_at, end);
    }
  }
  return out;
}
// The plan fields two traces' plans disagree on, each with both values: "precision: bf16 in the
// predicted trace, fp32 in the measured one; micro_batch: 2, 1" (a field one plan lacks reads
// "(unset)").
std::string plan_differences(const nlohmann::json& predicted, const nlohmann::json& measured) {
  std::set<std::string> keys;
  for (const auto* plan : {&predicted, &measured})
    if (plan->is_object())
      for (const auto& [k, v] : plan->items()) keys.insert(k);
  std::string out;
  auto text = [](const nlohmann::json& plan, const std::string& k) {
    if (!plan.is_object() || !plan.contains(k)) return std::string("(unset)");
    return plan[k].is_string() ? plan[k].get<std::string>() : plan[k].dump();
  };
  for (const std::string& k : keys) {
    const std::string a = text(predicted, k), b = text(measured, k);
    if (a == b) continue;
    out += (out.empty() ? "" : "; ") + k + ": " + a +
           (out.empty() ? " in the predicted trace, " + b + " in the measured one" : ", " + b);
  }
  return out;
}

// The traces are of the same plan and model.
Status check_same_job(const Trace& p, const Trace& m) {
  if (p.metadata.contains("plan") && m.metadata.contains("plan") && p.metadata["plan"] != m.metadata["plan"])
    return Error(p.file + " and " + m.file + ": the traces are of different plans (" +
                 plan_differences(p.metadata["plan"], m.metadata["plan"]) +
                 "); trace the same plan file with both, e.g. `foresight simulate --plan P --trace` and "
                 "`foresight run --plan P --trace`");
  if (p.metadata.value("model", "") != m.metadata.value("model", ""))
    return Error(p.file + " and " + m.file + ": the traces are of different models (" +
                 p.metadata.value("model", "?") + " vs " + m.metadata.value("model", "?") + ")");
  return Status::Ok();
}

// What the ops matched by id on the common ranks add up to: per kind (summed over the ranks),
// and the compute stream's busy time per rank; each pair goes into `worst`.
struct MatchedOps {
  std::map<std::string, KindComparison> kinds;
  std::map<int, double> busy_p, busy_m;
  std::vector<OpComparison> worst;
  int count = 0;
};

// An error naming a few ops of each trace that the other lacks.
Error ops_differ(const Trace& p, const Trace& m, std::vector<std::string> only_p,
                 std::vector<std::string> only_m) {
  std::sort(only_p.begin(), only_p.end());
  std::sort(only_m.begin(), only_m.end());
  std::string msg = p.file + " and " + m.file + ": the ops differ (" + std::to_string(only_p.size()) +
                    " only in the predicted trace, " + std::to_string(only_m.size()) +
                    " only in the measured one)";
  for (std::size_t i = 0; i < std::min<std::size_t>(3, only_p.size()); ++i)
    msg += "; predicted only: " + only_p[i];
  for (std::size_t i = 0; i < std::min<std::size_t>(3, only_m.size()); ++i)
    msg += "; measured only: " + only_m[i];
  return Error(msg);
}

Result<MatchedOps> match_ops(const Trace& p, const Trace& m, const std::set<int>& common) {
  std::unordered_map<std::string, const TraceOp*> by_id;
  for (const auto& op : m.ops)
    if (common.count(op.rank)) by_id[op.id] = &op;
  std::vector<std::string> only_p, only_m;
  std::set<std::string> matched;
  MatchedOps out;
  const auto spans_p = receive_spans(p), spans_m = receive_spans(m);
  const auto span = [](const std::unordered_map<const TraceOp*, double>& spans, const TraceOp& op) {
    const auto it = spans.find(&op);
    return it == spans.end() ? op.dur_s : it->second;
  };
  for (const auto& op : p.ops) {
    if (!common.count(op.rank)) continue;
    auto it = by_id.find(op.id);
    if (it == by_id.end()) {
      only_p.push_back(op.id);
      continue;
    }
    const TraceOp& mo = *it->second;
    matched.insert(op.id);
    const std::string kind = op_kind(op);
    KindComparison& k = out.kinds[kind];
    k.kind = kind;
    ++k.ops;
    const double pd = span(spans_p, op), md = span(spans_m, mo);
    k.predicted_s += pd;
    k.measured_s += md;
    if (op.cat == "compute") {
      out.busy_p[op.rank] += op.dur_s;
      out.busy_m[op.rank] += mo.dur_s;
    }
    out.worst.push_back({op.id, kind, pd, md});
  }
  for (const auto& [id, op] : by_id)
    if (!matched.count(id)) only_m.push_back(id);
  if (!only_p.empty() || !only_m.empty()) return ops_differ(p, m, std::move(only_p), std::move(only_m));
  out.count = static_cast<int>(matched.size());
  return out;
}

}  // namespace

Result<CompareReport> compare_traces(const Trace& p, const Trace& m) {
  FS_RETURN_IF_ERROR(check_same_job(p, m));
  std::set<int> pr, mr;
  for (const auto& op : p.ops) pr.insert(op.rank);
  for (const auto& op : m.ops) mr.insert(op.rank);
  CompareReport r;
  r.predicted_file = p.file;
  r.measured_file = m.file;
  std::set_intersection(pr.begin(), pr.end(), mr.begin(), mr.end(), std::back_inserter(r.ranks));
  if (r.ranks.empty()) return Error(p.file + " and " + m.file + ": no rank appears in both traces");
  if (m.metadata.is_object() && m.metadata.contains("clocks")) r.measured_clocks = m.metadata["clocks"];
  FS_ASSIGN_OR_RETURN(MatchedOps matched, match_ops(p, m, std::set<int>(r.ranks.begin(), r.ranks.end())));
  r.worst = std::move(matched.worst);
  r.matched_ops = matched.count;
  // Per kind, the mean over the compared ranks.
  const double n = static_cast<double>(r.ranks.size());
  for (auto& [name, k] : matched.kinds) {
    k.predicted_s /= n;
    k.measured_s /= n;
    k.error_pct = pct(k.predicted_s, k.measured_s);
    r.kinds.push_back(k);
  }
  r.predicted_step_s = p.step_s;
  r.measured_step_s = m.step_s;
  r.step_time_error_pct = pct(p.step_s, m.step_s);
  // Idle: the part of the step the compute stream is not busy (pipeline bubbles, waiting for
  // communication), averaged over the compared ranks.
  KindComparison idle{"idle", 0, 0, 0, 0};
  for (int rank : r.ranks) {
    idle.predicted_s += std::max(0.0, p.step_s - matched.busy_p[rank]) / n;
    idle.measured_s += std::max(0.0, m.step_s - matched.busy_m[rank]) / n;
  }
  idle.error_pct = pct(idle.predicted_s, idle.measured_s);
  r.kinds.push_back(idle);
  std::sort(r.kinds.begin(), r.kinds.end(),
            [](const auto& a, const auto& b) { return a.measured_s > b.measured_s; });
  std::sort(r.worst.begin(), r.worst.end(), [](const auto& a, const auto& b) {
    return std::fabs(a.predicted_s - a.measured_s) > std::fabs(b.predicted_s - b.measured_s);
  });
  if (r.worst.size() > 10) r.worst.resize(10);
  return r;
}

nlohmann::json compare_report_to_json(const CompareReport& r) {
  nlohmann::json kinds = nlohmann::json::array(), worst = nlohmann::json::array();
  for (const auto& k : r.kinds)
    kinds.push_back({{"kind", k.kind},
                     {"ops", k.ops},
                     {"predicted_s", k.predicted_s},
                     {"measured_s", k.measured_s},
                     {"error_pct", k.error_pct}});
  for (const auto& w : r.worst)
    worst.push_back(
        {{"id", w.id}, {"kind", w.kind}, {"predicted_s", w.predicted_s}, {"measured_s", w.measured_s}});
  return {{"predicted", r.predicted_file},
          {"measured", r.measured_file},
          {"predicted_step_s", r.predicted_step_s},
          {"measured_step_s", r.measured_step_s},
          {"step_time_error_pct", r.step_time_error_pct},
          {"ranks", r.ranks},
          {"matched_ops", r.matched_ops},
          {"kinds", kinds},
          {"worst_ops", worst},
          {"measured_clocks", r.measured_clocks}};
}

}  // namespace foresight
