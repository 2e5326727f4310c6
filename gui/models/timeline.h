// A Chrome trace (from `foresight simulate --trace` or `foresight run --trace`) as lanes and bars
// for a Gantt chart: one lane per (process, thread) = (rank, stream), one bar per complete ("X")
// event with its op id, kind, bytes and FLOPs.
//
//   Result<Timeline> t = load_timeline("step.json");
//   for (std::size_t i = t->lanes[0].first; i < t->lanes[0].first + t->lanes[0].count; ++i)
//     t->bars[i].start_s ...
//   auto [b, e] = visible_bars(*t, 0, 0.010, 0.020);   // bars of lane 0 within 10..20 ms
//
// compare.h's load_trace keeps only what alignment needs (no stream, no bytes), so the GUI reads
// the trace itself for drawing; both read the same format.
#pragma once

#include <cstddef>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sim/core/status.h"

namespace foresight::gui {

struct TimelineBar {
  int lane = 0;
  double start_s = 0, dur_s = 0;
  std::string name;   // kernel or collective name ("qkv", "attn.tp_all_reduce")
  std::string id;     // the op id ("r0/L3/mb2/fwd/qkv"); may be empty in foreign traces
  std::string cat;    // compute, collective, p2p, copy
  std::string kind;   // compare.h's op_kind: gemm, attention, elementwise, ..., the collective's name
  double bytes = -1;  // -1: not in the trace
  double flops = -1;
  bool critical = false;       // on the step's critical path (args.critical in `simulate --trace`)
  int op = -1;                 // its vertex in the rank's program (args.op of Foresight's traces); -1: none
  std::vector<int> after_ops;  // the vertices it waited for on its rank (args.after)
  std::vector<std::size_t> after;  // those ops' bars (resolved by timeline_from_json)
  double end_s() const { return start_s + dur_s; }
};

struct TimelineLane {
  int pid = 0, tid = 0;
  std::string process;               // "rank 0 (node 0, stage 0)", or "pid N"
  std::string thread;                // "compute", "tp", ..., or "tid N"
  std::size_t first = 0, count = 0;  // its bars: bars[first, first + count), by start time
  double longest_s = 0;              // its longest bar (for range queries)
};

// A counter over time ("C" events): `simulate --trace`'s memory in use per rank, in GiB.
struct TimelineCounter {
  int pid = 0;
  std::string process;                             // as the lanes name the pid
  std::string name;                                // the event's name ("memory")
  std::string unit;                                // its argument's name ("GiB")
  std::vector<std::pair<double, double>> samples;  // (seconds, value), by time; each holds until the next
  double min = 0, max = 0;
};

struct Timeline {
  std::string file;
  std::string kind;  // metadata.kind: predicted or measured ("" if absent)
  std::string model, cluster;
  double step_s = 0;                      // metadata.step_time_s, else the makespan
  double begin_s = 0, end_s = 0;          // first start, last end
  std::vector<TimelineLane> lanes;        // by (pid, tid)
  std::vector<TimelineBar> bars;          // grouped by lane, each lane by start time
  std::vector<TimelineCounter> counters;  // by (pid, name)
  // A measured trace's ranks count time from their own starts: they are aligned on the ends of
  // the collectives they share, and this says so ("" when nothing was aligned).
  std::string clock_note;
  // The critical path as the trace's metadata sums it up ("critical path: 3635 ops on 4 ranks:
  // compute 2.11 s, communication 145 ms, waiting 0 s"; "" when the trace has none).
  std::string critical_note;
};

// The bars `bar` waited for (its dependencies on its rank) and those that waited for it, each by
// start time; empty for traces that carry no dependencies (foreign ones).
std::vector<std::size_t> bars_before(const Timeline& t, std::size_t bar);
std::vector<std::size_t> bars_after(const Timeline& t, std::size_t bar);

// What a time range of a timeline holds: busy time by op kind and by stream (summed over the
// lanes, clipped to the range), and communication that no compute of its rank overlaps.
struct RangeStats {
  double t0 = 0, t1 = 0;
  int ranks = 0;
  std::vector<std::pair<std::string, double>> kinds, streams;  // largest first
  double exposed_communication_s = 0;                          // summed over the ranks
};
RangeStats range_stats(const Timeline& t, double t0, double t1);

// Errors name the file and what is wrong (unreadable, not JSON, no traceEvents, an X event without
// numeric ts/dur).
Result<Timeline> load_timeline(const std::string& path);
Result<Timeline> timeline_from_json(const nlohmann::json& doc, const std::string& file);

// Bars of `lane` that overlap [t0, t1]: indices [first, last) into Timeline::bars. Where bars of a
// lane overlap each other (foreign traces), the range may also hold a few that do not reach t0.
std::pair<std::size_t, std::size_t> visible_bars(const Timeline& t, int lane, double t0, double t1);
// The bar of `lane` under time `t`, or the nearest one within `slack_s`.
std::optional<std::size_t> bar_at(const Timeline& t, int lane, double t_s, double slack_s);
// Ranks collapsed by symmetry: ranks of the same pipeline stage run the same program, so only
// the lowest rank of each stage keeps its lanes (its process label gains "+N like it"). Lanes
// whose process names no stage ("pid 3") are kept. A trace with one rank per stage is unchanged.
Timeline collapse_by_stage(const Timeline& t);

// "rank 0 compute" -- short lane label for the Gantt's left column.
std::string lane_label(const TimelineLane& l);
// "rank 0 memory": a counter row's label; "38.1-42.3 GiB": the range its row spans.
std::string counter_label(const TimelineCounter& c);
std::string counter_range(const TimelineCounter& c);
// Multi-line tooltip: op id, name, kind, start, duration, bytes, FLOPs.
std::string bar_tooltip(const Timeline& t, std::size_t bar);

}  // namespace foresight::gui
