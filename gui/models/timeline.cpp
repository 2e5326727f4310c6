// Chrome trace -> lanes and bars.
#include "gui/models/timeline.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "sim/compare/compare.h"
#include "sim/core/units.h"

namespace foresight::gui {

namespace {

int int_field(const nlohmann::json& e, const char* key) {
  if (!e.contains(key)) return 0;
  const auto& v = e[key];
  return v.is_number() ? v.get<int>() : 0;
}

double number_or(const nlohmann::json& args, const char* key, double fallback) {
  if (!args.is_object() || !args.contains(key) || !args[key].is_number()) return fallback;
  return args[key].get<double>();
}

std::string meta_name(const nlohmann::json& e) {
  if (!e.contains("args") || !e["args"].is_object()) return {};
  return e["args"].value("name", "");
}

}  // namespace

Result<Timeline> load_timeline(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error(path + ": cannot open trace");
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().empty())
    return Error(path + ": empty file (expected a Chrome trace from simulate --trace or run --trace)");
  nlohmann::json doc = nlohmann::json::parse(ss.str(), nullptr, false);
  if (doc.is_discarded()) return Error(path + ": not valid JSON");
  return timeline_from_json(doc, path);
}

namespace {

// The events of a Chrome trace: its /traceEvents, or the whole document in the JSON Array Format.
const nlohmann::json* trace_events(const nlohmann::json& doc) {
  if (doc.is_object() && doc.contains("traceEvents") && doc["traceEvents"].is_array())
    return &doc["traceEvents"];
  if (doc.is_array()) return &doc;  // the JSON Array Format of the Chrome trace spec
  return nullptr;
}

// What Foresight's traces say of themselves in /metadata (kind, model, cluster, step time).
void read_metadata(const nlohmann::json& doc, Timeline& t) {
  if (!doc.is_object() || !doc.contains("metadata") || !doc["metadata"].is_object()) return;
  const auto& m = doc["metadata"];
  t.kind = m.value("kind", "");
  t.model = m.value("model", "");
  t.cluster = m.value("cluster", "");
  t.step_s = number_or(m, "step_time_s", 0.0);
  if (m.contains("critical_path") && m["critical_path"].is_object()) {
    const auto& c = m["critical_path"];
    auto time = [](double s) {
      return s == 0 ? std::string("0 s") : pretty_quantity(s, Dimension::kSeconds);
    };
    const int ranks = static_cast<int>(number_or(c, "ranks", 0));
    t.critical_note = "critical path: " + std::to_string(static_cast<long long>(number_or(c, "ops", 0))) +
                      " ops on " + std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks") + ": compute " +
                      time(number_or(c, "compute_s", 0)) + ", communication " +
                      time(number_or(c, "communication_s", 0)) + ", waiting " +
                      time(number_or(c, "waiting_s", 0));
  }
}

// One complete ("X") event as a bar, its times in seconds and its kind as compare.h tells it.
TimelineBar bar_of(const nlohmann::json& e) {
  TimelineBar b;
  b.start_s = e["ts"].get<double>() * 1e-6;  // Chrome traces count microseconds
  b.dur_s = std::max(0.0, e["dur"].get<double>() * 1e-6);
  b.name = e.value("name", "");
  b.cat = e.value("cat", "");
  static const nlohmann::json kNoArgs = nlohmann::json::object();
  const auto& args = e.contains("args") && e["args"].is_object() ? e["args"] : kNoArgs;
  if (args.contains("id") && args["id"].is_string()) b.id = args["id"].get<std::string>();
  b.bytes = number_or(args, "bytes", -1);
  b.flops = number_or(args, "flops", -1);
  b.critical = number_or(args, "critical", 0) != 0;
  if (args.contains("op") && args["op"].is_number_integer()) b.op = args["op"].get<int>();
  if (args.contains("after") && args["after"].is_array())
    for (const auto& v : args["after"])
      if (v.is_number_integer()) b.after_ops.push_back(v.get<int>());
  TraceOp op;
  op.name = b.name;
  op.cat = b.cat.empty() ? "compute" : b.cat;
  b.kind = op_kind(op);
  return b;
}

// The events read: bars per (pid, tid) lane, and the names the metadata events give them.
struct RawLanes {
  std::map<int, std::string> processes;
  std::map<std::pair<int, int>, std::string> threads;
  std::map<std::pair<int, int>, std::vector<TimelineBar>> bars;
  // (pid, event name, argument) -> samples
  std::map<std::tuple<int, std::string, std::string>, std::vector<std::pair<double, double>>> counters;
};

Status read_events(const nlohmann::json& events, const std::string& file, RawLanes& raw) {
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    if (!e.is_object()) continue;
    const std::string ph = e.value("ph", "");
    const int pid = int_field(e, "pid"), tid = int_field(e, "tid");
    if (ph == "M") {
      const std::string name = e.value("name", "");
      if (name == "process_name")
        raw.processes[pid] = meta_name(e);
      else if (name == "thread_name")
        raw.threads[{pid, tid}] = meta_name(e);
      continue;
    }
    if (ph == "C" && e.contains("ts") && e["ts"].is_number() && e.contains("args") && e["args"].is_object()) {
      // A counter: each numeric argument its own series ("memory" {"GiB": 42.0}).
      for (const auto& [key, value] : e["args"].items())
        if (value.is_number())
          raw.counters[{pid, e.value("name", ""), key}].emplace_back(e["ts"].get<double>() * 1e-6,
                                                                     value.get<double>());
      continue;
    }
    if ((ph == "i" || ph == "I") && e.value("name", "") == "[memory]" && e.contains("ts") &&
        e["ts"].is_number() && e.contains("args") && e["args"].is_object()) {
      // The PyTorch profiler's memory events (profile_memory=True): an instant per allocation and
      // free, with the device's total allocated after it. One track per process and device.
      const auto& a = e["args"];
      const auto total = a.find("Total Allocated");
      if (total == a.end() || !total->is_number()) continue;
      const int type =
          a.contains("Device Type") && a["Device Type"].is_number_integer() ? a["Device Type"].get<int>() : 0;
      const int device =
          a.contains("Device Id") && a["Device Id"].is_number_integer() ? a["Device Id"].get<int>() : 0;
      const std::string name =
          type == 0 ? "host memory"
                    : (device > 0 ? "memory (device " + std::to_string(device) + ")" : std::string("memory"));
      raw.counters[{pid, name, "GiB"}].emplace_back(e["ts"].get<double>() * 1e-6,
                                                    total->get<double>() / 1073741824.0);
      continue;
    }
    if (ph != "X") continue;
    if (!e.contains("ts") || !e.contains("dur") || !e["ts"].is_number() || !e["dur"].is_number())
      return Error(file + ": /traceEvents/" + std::to_string(i) + ": ts/dur missing or not numbers");
    raw.bars[{pid, tid}].push_back(bar_of(e));
  }
  return Status::Ok();
}

// The lanes in (pid, tid) order, each lane's bars by start time, and the trace's time span.
void assemble_lanes(RawLanes& raw, Timeline& t) {
  t.begin_s = 1e300;
  t.end_s = -1e300;
  for (auto& [key, bars] : raw.bars) {
    std::stable_sort(bars.begin(), bars.end(),
                     [](const TimelineBar& a, const TimelineBar& b) { return a.start_s < b.start_s; });
    TimelineLane lane;
    lane.pid = key.first;
    lane.tid = key.second;
    const auto p = raw.processes.find(key.first);
    lane.process =
        p != raw.processes.end() && !p->second.empty() ? p->second : "pid " + std::to_string(key.first);
    const auto th = raw.threads.find(key);
    lane.thread =
        th != raw.threads.end() && !th->second.empty() ? th->second : "tid " + std::to_string(key.second);
    lane.first = t.bars.size();
    lane.count = bars.size();
    const int index = static_cast<int>(t.lanes.size());
    for (auto& b : bars) {
      b.lane = index;
      lane.longest_s = std::max(lane.longest_s, b.dur_s);
      t.begin_s = std::min(t.begin_s, b.start_s);
      t.end_s = std::max(t.end_s, b.end_s());
      t.bars.push_back(std::move(b));
    }
    t.lanes.push_back(std::move(lane));
  }
  // Dependencies: each bar's waited-for vertices as bars of the same rank (pid).
  std::map<std::pair<int, int>, std::size_t> by_op;  // (pid, vertex) -> bar
  for (std::size_t i = 0; i < t.bars.size(); ++i)
    if (t.bars[i].op >= 0)
      by_op.emplace(std::pair{t.lanes[static_cast<std::size_t>(t.bars[i].lane)].pid, t.bars[i].op}, i);
  for (TimelineBar& b : t.bars) {
    const int pid = t.lanes[static_cast<std::size_t>(b.lane)].pid;
    for (int v : b.after_ops)
      if (const auto it = by_op.find({pid, v}); it != by_op.end()) b.after.push_back(it->second);
  }
}

// A measured trace's ranks each count time from their own start. A collective ends on every
// rank at about the same moment (no rank leaves it before the last one's data arrived), so each
// rank's clock is shifted by the median, over the collectives it shares with the lowest rank (by
// op id less its "rN/" prefix), of the lowest rank's end minus its own. Returns what was done
// ("" when there was nothing to align).
std::string align_rank_clocks(RawLanes& raw) {
  std::map<int, std::map<std::string, double>> ends;  // pid -> shared key -> end
  for (const auto& [key, bars] : raw.bars)
    for (const TimelineBar& b : bars) {
      if (b.cat != "collective" || b.id.size() < 3 || b.id[0] != 'r') continue;
      const auto slash = b.id.find('/');
      if (slash == std::string::npos) continue;
      ends[key.first].emplace(b.id.substr(slash + 1), b.end_s());
    }
  if (ends.size() < 2) return "";
  const auto& reference = ends.begin()->second;
  std::map<int, double> shift;
  std::size_t shared = 0;
  for (const auto& [pid, keyed] : ends) {
    std::vector<double> d;
    for (const auto& [k, end] : keyed)
      if (const auto it = reference.find(k); it != reference.end()) d.push_back(it->second - end);
    if (d.empty()) continue;
    std::nth_element(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(d.size() / 2), d.end());
    shift[pid] = d[d.size() / 2];
    shared = std::max(shared, d.size());
  }
  double largest = 0;
  for (auto& [key, bars] : raw.bars) {
    const auto it = shift.find(key.first);
    if (it == shift.end()) continue;
    for (TimelineBar& b : bars) b.start_s += it->second;
    largest = std::max(largest, std::abs(it->second));
  }
  // A rank's counters (its memory) count time on its clock too.
  for (auto& [key, samples] : raw.counters)
    if (const auto it = shift.find(std::get<0>(key)); it != shift.end())
      for (auto& sample : samples) sample.first += it->second;
  return "ranks' clocks aligned on the ends of up to " + std::to_string(shared) +
         " shared collectives (largest shift " + pretty_quantity(largest, Dimension::kSeconds) + ")";
}

// A `foresight run` trace comes on one clock (its metadata.clocks says how: the ranks' shared
// collectives and the pipeline transfers between stages); an older one is aligned here.
std::string measured_clocks(const nlohmann::json& doc, RawLanes& raw) {
  const nlohmann::json* meta = doc.is_object() && doc.contains("metadata") ? &doc["metadata"] : nullptr;
  if (!meta || !meta->is_object() || !meta->contains("clocks") || !(*meta)["clocks"].is_array())
    return align_rank_clocks(raw);
  const nlohmann::json& clocks = (*meta)["clocks"];
  if (clocks.size() < 2) return "";
  double largest = 0;
  for (const auto& c : clocks)
    if (c.is_object() && c.contains("offset_s") && c["offset_s"].is_number())
      largest = std::max(largest, std::abs(c["offset_s"].get<double>()));
  return "ranks' clocks aligned by the run on their shared collectives and pipeline transfers (largest "
         "shift " +
         pretty_quantity(largest, Dimension::kSeconds) + ")";
}

}  // namespace

Result<Timeline> timeline_from_json(const nlohmann::json& doc, const std::string& file) {
  const nlohmann::json* events = trace_events(doc);
  if (!events) return Error(file + ": /traceEvents: missing (not a Chrome trace)");
  Timeline t;
  t.file = file;
  read_metadata(doc, t);
  RawLanes raw;
  FS_RETURN_IF_ERROR(read_events(*events, file, raw));
  if (raw.bars.empty()) return Error(file + ": no ops (the trace has no complete events)");
  if (t.kind == "measured") t.clock_note = measured_clocks(doc, raw);
  assemble_lanes(raw, t);
  for (auto& [key, samples] : raw.counters) {
    TimelineCounter c;
    c.pid = std::get<0>(key);
    c.name = std::get<1>(key);
    c.unit = std::get<2>(key);
    const auto p = raw.processes.find(c.pid);
    c.process = p != raw.processes.end() && !p->second.empty() ? p->second : "pid " + std::to_string(c.pid);
    std::stable_sort(samples.begin(), samples.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    c.min = samples.empty() ? 0 : samples.front().second;
    c.max = c.min;
    for (const auto& [at, v] : samples) c.min = std::min(c.min, v), c.max = std::max(c.max, v);
    c.samples = std::move(samples);
    t.counters.push_back(std::move(c));
  }
  if (t.step_s <= 0) t.step_s = t.end_s - t.begin_s;
  return t;
}

std::vector<std::size_t> bars_before(const Timeline& t, std::size_t bar) {
  if (bar >= t.bars.size()) return {};
  std::vector<std::size_t> out = t.bars[bar].after;
  std::stable_sort(out.begin(), out.end(),
                   [&](std::size_t a, std::size_t b) { return t.bars[a].start_s < t.bars[b].start_s; });
  return out;
}

std::vector<std::size_t> bars_after(const Timeline& t, std::size_t bar) {
  std::vector<std::size_t> out;
  if (bar >= t.bars.size()) return out;
  const int lane = t.bars[bar].lane;
  const int pid = t.lanes[static_cast<std::size_t>(lane)].pid;
  // Only the rank's own lanes can hold them.
  for (const TimelineLane& l : t.lanes) {
    if (l.pid != pid) continue;
    for (std::size_t i = l.first; i < l.first + l.count; ++i)
      if (std::find(t.bars[i].after.begin(), t.bars[i].after.end(), bar) != t.bars[i].after.end())
        out.push_back(i);
  }
  std::stable_sort(out.begin(), out.end(),
                   [&](std::size_t a, std::size_t b) { return t.bars[a].start_s < t.bars[b].start_s; });
  return out;
}

std::pair<std::size_t, std::size_t> visible_bars(const Timeline& t, int lane, double t0, double t1) {
  if (lane < 0 || lane >= static_cast<int>(t.lanes.size())) return {0, 0};
  const TimelineLane& l = t.lanes[static_cast<std::size_t>(lane)];
  const auto begin = t.bars.begin() + static_cast<std::ptrdiff_t>(l.first);
  const auto end = begin + static_cast<std::ptrdiff_t>(l.count);
  // A bar that starts before t0 - longest cannot reach t0; of the rest, drop the leading ones that
  // end before t0.
  auto first = std::lower_bound(begin, end, t0 - l.longest_s,
                                [](const TimelineBar& b, double x) { return b.start_s < x; });
  while (first != end && first->end_s() < t0) ++first;
  auto last = std::upper_bound(first, end, t1, [](double x, const TimelineBar& b) { return x < b.start_s; });
  return {static_cast<std::size_t>(first - t.bars.begin()), static_cast<std::size_t>(last - t.bars.begin())};
}

std::optional<std::size_t> bar_at(const Timeline& t, int lane, double t_s, double slack_s) {
  const auto [first, last] = visible_bars(t, lane, t_s - slack_s, t_s + slack_s);
  std::optional<std::size_t> best;
  double best_distance = 0;
  for (std::size_t i = first; i < last; ++i) {
    const TimelineBar& b = t.bars[i];
    const double d = t_s < b.start_s ? b.start_s - t_s : t_s > b.end_s() ? t_s - b.end_s() : 0.0;
    if (d > slack_s) continue;
    // Inside several (overlapping) bars: the shortest is the one drawn on top.
    if (!best || d < best_distance || (d == best_distance && b.dur_s < t.bars[*best].dur_s)) {
      best = i;
      best_distance = d;
    }
  }
  return best;
}

std::string lane_label(const TimelineLane& l) {
  // "rank 3 (node 0, stage 1)" -> "rank 3"
  std::string p = l.process;
  const auto paren = p.find(" (");
  if (paren != std::string::npos) p.resize(paren);
  return p + " " + l.thread;
}

std::string counter_label(const TimelineCounter& c) {
  TimelineLane l;
  l.process = c.process;
  l.thread = c.name;
  return lane_label(l);
}

std::string counter_range(const TimelineCounter& c) {
  return fmt::format("{:.1f}-{:.1f} {}", c.min, c.max, c.unit);
}

std::string bar_tooltip(const Timeline& t, std::size_t bar) {
  const TimelineBar& b = t.bars[bar];
  const TimelineLane& l = t.lanes[static_cast<std::size_t>(b.lane)];
  std::string s = b.id.empty() ? b.name : b.id;
  s += fmt::format("\n{} ({}, {})", b.name, b.kind, b.cat.empty() ? "compute" : b.cat);
  s += fmt::format("\n{} / {}", l.process, l.thread);
  s += "\nstart " + pretty_quantity(b.start_s, Dimension::kSeconds) + ", duration " +
       pretty_quantity(b.dur_s, Dimension::kSeconds);
  if (b.bytes >= 0) s += "\nbytes " + pretty_quantity(b.bytes, Dimension::kBytes);
  if (b.flops > 0) s += fmt::format("\n{:.3g} GFLOP", b.flops / 1e9);
  return s;
}

Timeline collapse_by_stage(const Timeline& t) {
  // "rank 5 (node 0, stage 1)" -> stage 1; -1 when the process names no stage.
  auto stage_of = [](const std::string& process) {
    const auto at = process.find("stage ");
    return at == std::string::npos ? -1 : std::atoi(process.c_str() + at + 6);
  };
  std::map<int, int> first_pid, ranks;  // stage -> lowest pid, and how many ranks it has
  std::map<int, bool> seen_pid;
  for (const TimelineLane& l : t.lanes) {
    const int st = stage_of(l.process);
    if (st < 0 || seen_pid[l.pid]) continue;
    seen_pid[l.pid] = true;
    ++ranks[st];
    auto it = first_pid.find(st);
    if (it == first_pid.end() || l.pid < it->second) first_pid[st] = l.pid;
  }
  Timeline out = t;
  out.lanes.clear();
  out.bars.clear();
  std::vector<std::size_t> moved(t.bars.size(), SIZE_MAX);  // old bar -> new (SIZE_MAX: dropped)
  for (const TimelineLane& l : t.lanes) {
    const int st = stage_of(l.process);
    if (st >= 0 && first_pid[st] != l.pid) continue;
    TimelineLane nl = l;
    if (st >= 0 && ranks[st] > 1)
      nl.process.append(" +").append(std::to_string(ranks[st] - 1)).append(" like it");
    nl.first = out.bars.size();
    const int lane = static_cast<int>(out.lanes.size());
    for (std::size_t i = l.first; i < l.first + l.count; ++i) {
      TimelineBar b = t.bars[i];
      b.lane = lane;
      moved[i] = out.bars.size();
      out.bars.push_back(std::move(b));
    }
    out.lanes.push_back(std::move(nl));
  }
  for (TimelineBar& b : out.bars) {  // dependencies are on the bar's own rank, which is kept whole
    std::vector<std::size_t> after;
    for (std::size_t a : b.after)
      if (moved[a] != SIZE_MAX) after.push_back(moved[a]);
    b.after = std::move(after);
  }
  out.counters.clear();
  for (const TimelineCounter& c : t.counters) {
    const auto kept = std::find_if(out.lanes.begin(), out.lanes.end(),
                                   [&](const TimelineLane& l) { return l.pid == c.pid; });
    if (kept == out.lanes.end()) continue;
    TimelineCounter nc = c;
    nc.process = kept->process;
    out.counters.push_back(std::move(nc));
  }
  return out;
}

RangeStats range_stats(const Timeline& t, double t0, double t1) {
  RangeStats r;
  r.t0 = t0;
  r.t1 = t1;
  if (!(t1 > t0)) return r;
  // Per rank (pid): the compute lanes' and the communication lanes' busy intervals, clipped.
  std::map<int, std::vector<std::pair<double, double>>> compute, comm;
  std::map<std::string, double> kinds, streams;
  for (std::size_t lane = 0; lane < t.lanes.size(); ++lane) {
    const TimelineLane& l = t.lanes[lane];
    const auto [first, last] = visible_bars(t, static_cast<int>(lane), t0, t1);
    for (std::size_t i = first; i < last; ++i) {
      const TimelineBar& b = t.bars[i];
      const double a = std::max(t0, b.start_s), e = std::min(t1, b.end_s());
      if (e <= a) continue;
      kinds[b.kind] += e - a;
      streams[l.thread] += e - a;
      const bool communication = b.cat == "collective" || b.cat == "p2p";
      (communication ? comm : compute)[l.pid].emplace_back(a, e);
    }
  }
  // Exposed communication: a rank's communication time its compute does not cover.
  auto merged = [](std::vector<std::pair<double, double>> v) {
    std::sort(v.begin(), v.end());
    std::vector<std::pair<double, double>> out;
    for (const auto& iv : v)
      if (!out.empty() && iv.first <= out.back().second)
        out.back().second = std::max(out.back().second, iv.second);
      else
        out.push_back(iv);
    return out;
  };
  for (auto& [pid, intervals] : comm) {
    const auto c = merged(intervals), busy = merged(compute[pid]);
    std::size_t j = 0;  // both sorted and disjoint: one sweep
    for (const auto& [a, e] : c) {
      while (j < busy.size() && busy[j].second <= a) ++j;
      double covered = 0;
      for (std::size_t k = j; k < busy.size() && busy[k].first < e; ++k)
        covered += std::max(0.0, std::min(e, busy[k].second) - std::max(a, busy[k].first));
      r.exposed_communication_s += (e - a) - covered;
    }
  }
  r.ranks = static_cast<int>(std::max(compute.size(), comm.size()));
  r.kinds.assign(kinds.begin(), kinds.end());
  r.streams.assign(streams.begin(), streams.end());
  auto larger = [](const auto& a, const auto& b) { return a.second > b.second; };
  std::sort(r.kinds.begin(), r.kinds.end(), larger);
  std::sort(r.streams.begin(), r.streams.end(), larger);
  return r;
}

}  // namespace foresight::gui
