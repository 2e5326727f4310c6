// Reading Chrome traces into lanes and bars, range queries and hit tests, axis labels.
#include "gui/models/timeline.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "gui/models/format.h"

namespace foresight::gui {
namespace {

// Two ranks; rank 0 has a compute and a tp stream; events deliberately out of order.
nlohmann::json small_trace() {
  return nlohmann::json::parse(R"json({
    "metadata": {"kind": "measured", "model": "tiny", "cluster": "cpu-local", "step_time_s": 0.0001},
    "traceEvents": [
      {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "rank 0 (node 0, stage 0)"}},
      {"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "compute"}},
      {"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "tp"}},
      {"ph": "X", "name": "mlp_up", "cat": "compute", "pid": 0, "tid": 0, "ts": 30, "dur": 20,
       "args": {"id": "r0/L0/mb0/fwd/mlp_up", "bytes": 4096, "flops": 2e9}},
      {"ph": "X", "name": "qkv", "cat": "compute", "pid": 0, "tid": 0, "ts": 0, "dur": 10,
       "args": {"id": "r0/L0/mb0/fwd/qkv", "bytes": 1024, "flops": 1e9}},
      {"ph": "X", "name": "attn.tp_all_reduce", "cat": "collective", "pid": 0, "tid": 1, "ts": 10, "dur": 15,
       "args": {"id": "r0/L0/mb0/fwd/attn.tp_all_reduce", "bytes": 2048, "flops": 0}},
      {"ph": "X", "name": "send_activation", "cat": "p2p", "pid": 1, "tid": 2, "ts": 60, "dur": 5,
       "args": {"id": "r1/mb0/fwd/send_activation", "bytes": 512}}
    ]})json");
}

TEST(Timeline, LanesByRankAndStreamBarsByStart) {
  auto t = timeline_from_json(small_trace(), "small.json");
  ASSERT_TRUE(t.ok()) << t.error().message();
  ASSERT_EQ(t->lanes.size(), 3u);
  ASSERT_EQ(t->bars.size(), 4u);
  EXPECT_EQ(t->kind, "measured");
  EXPECT_EQ(t->model, "tiny");
  EXPECT_DOUBLE_EQ(t->step_s, 1e-4);
  EXPECT_DOUBLE_EQ(t->begin_s, 0);
  EXPECT_DOUBLE_EQ(t->end_s, 65e-6);  // send_activation: 60 us + 5 us

  const TimelineLane& compute = t->lanes[0];
  EXPECT_EQ(compute.thread, "compute");
  EXPECT_EQ(compute.process, "rank 0 (node 0, stage 0)");
  EXPECT_EQ(lane_label(compute), "rank 0 compute");
  ASSERT_EQ(compute.count, 2u);
  EXPECT_EQ(t->bars[compute.first].name, "qkv");  // sorted by start although listed second
  EXPECT_EQ(t->bars[compute.first + 1].name, "mlp_up");
  EXPECT_DOUBLE_EQ(compute.longest_s, 20e-6);
  // Kinds as compare.h names them.
  EXPECT_EQ(t->bars[compute.first].kind, "gemm");
  EXPECT_EQ(t->bars[t->lanes[1].first].kind, "tp_all_reduce");
  EXPECT_EQ(t->bars[t->lanes[2].first].kind, "p2p");
  // No metadata for pid 1: generic names; no flops in args: -1.
  EXPECT_EQ(t->lanes[2].process, "pid 1");
  EXPECT_EQ(t->lanes[2].thread, "tid 2");
  EXPECT_EQ(t->bars[t->lanes[2].first].flops, -1);
  EXPECT_EQ(t->bars[t->lanes[2].first].bytes, 512);
}

// `simulate --trace` marks the critical path's ops (args.critical) and sums the path up in its
// metadata; a trace without them has none.
TEST(Timeline, CriticalPathFromTheTrace) {
  auto doc = small_trace();
  doc["metadata"]["critical_path"] = {
      {"ops", 2}, {"ranks", 1}, {"compute_s", 30e-6}, {"communication_s", 0}, {"waiting_s", 20e-6}};
  for (auto& e : doc["traceEvents"])
    if (e.value("name", "") == "qkv" || e.value("name", "") == "mlp_up") e["args"]["critical"] = 1;
  auto t = timeline_from_json(doc, "small.json");
  ASSERT_TRUE(t.ok()) << t.error().message();
  int critical = 0;
  for (const TimelineBar& b : t->bars) critical += b.critical ? 1 : 0;
  EXPECT_EQ(critical, 2);
  EXPECT_TRUE(t->bars[t->lanes[0].first].critical);  // qkv
  EXPECT_FALSE(t->bars[t->lanes[1].first].critical);
  EXPECT_EQ(t->critical_note,
            "critical path: 2 ops on 1 rank: compute 30.0 us, communication 0 s, waiting 20.0 us");
  auto plain = timeline_from_json(small_trace(), "small.json");
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->critical_note.empty());
  for (const TimelineBar& b : plain->bars) EXPECT_FALSE(b.critical);
}

// Foresight's traces give each op its vertex (args.op) and the vertices it waited for on its rank
// (args.after); they become each bar's dependencies, the bars before and after a selected one,
// and collapsing ranks keeps them. A trace without them has none.
TEST(Timeline, DependenciesFromTheTrace) {
  auto doc = small_trace();
  for (auto& e : doc["traceEvents"]) {
    const std::string name = e.value("name", "");
    if (name == "qkv") e["args"].update({{"op", 0}, {"after", nlohmann::json::array()}});
    if (name == "attn.tp_all_reduce") e["args"].update({{"op", 1}, {"after", {0}}});
    if (name == "mlp_up") e["args"].update({{"op", 2}, {"after", {1, 7}}});        // 7: not in the trace
    if (name == "send_activation") e["args"].update({{"op", 1}, {"after", {0}}});  // rank 1's vertex 0: none
  }
  auto t = timeline_from_json(doc, "small.json");
  ASSERT_TRUE(t.ok()) << t.error().message();
  const std::size_t qkv = t->lanes[0].first, mlp = t->lanes[0].first + 1, ar = t->lanes[1].first,
                    send = t->lanes[2].first;
  EXPECT_EQ(t->bars[ar].after, (std::vector<std::size_t>{qkv}));
  EXPECT_EQ(t->bars[mlp].after, (std::vector<std::size_t>{ar}));
  EXPECT_TRUE(t->bars[send].after.empty());  // its vertex 0 is rank 1's, which the trace lacks
  EXPECT_EQ(bars_before(*t, ar), (std::vector<std::size_t>{qkv}));
  EXPECT_EQ(bars_after(*t, ar), (std::vector<std::size_t>{mlp}));
  EXPECT_EQ(bars_after(*t, qkv), (std::vector<std::size_t>{ar}));
  EXPECT_TRUE(bars_after(*t, send).empty());
  const Timeline c = collapse_by_stage(*t);
  std::size_t c_ar = c.bars.size(), c_mlp = c.bars.size();
  for (std::size_t i = 0; i < c.bars.size(); ++i) {
    if (c.bars[i].name == "attn.tp_all_reduce") c_ar = i;
    if (c.bars[i].name == "mlp_up") c_mlp = i;
  }
  ASSERT_LT(c_mlp, c.bars.size());
  EXPECT_EQ(c.bars[c_mlp].after, (std::vector<std::size_t>{c_ar}));
  auto plain = timeline_from_json(small_trace(), "small.json");
  ASSERT_TRUE(plain.ok());
  for (std::size_t i = 0; i < plain->bars.size(); ++i) {
    EXPECT_TRUE(bars_before(*plain, i).empty());
    EXPECT_TRUE(bars_after(*plain, i).empty());
  }
}

// Counter events ("C"): a series per pid and argument, by time, with its largest value; collapsing
// ranks keeps the counters of the ranks kept.
TEST(Timeline, CountersFromTheTrace) {
  auto doc = small_trace();
  auto& ev = doc["traceEvents"];
  ev.push_back({{"ph", "C"}, {"name", "memory"}, {"pid", 0}, {"ts", 40}, {"args", {{"GiB", 3.5}}}});
  ev.push_back({{"ph", "C"}, {"name", "memory"}, {"pid", 0}, {"ts", 0}, {"args", {{"GiB", 1.0}}}});
  ev.push_back({{"ph", "C"}, {"name", "memory"}, {"pid", 1}, {"ts", 0}, {"args", {{"GiB", 2.0}}}});
  auto t = timeline_from_json(doc, "small.json");
  ASSERT_TRUE(t.ok()) << t.error().message();
  ASSERT_EQ(t->counters.size(), 2u);
  const TimelineCounter& c = t->counters[0];
  EXPECT_EQ(c.pid, 0);
  EXPECT_EQ(c.name, "memory");
  EXPECT_EQ(c.unit, "GiB");
  ASSERT_EQ(c.samples.size(), 2u);
  EXPECT_DOUBLE_EQ(c.samples[0].first, 0);  // sorted by time though listed second
  EXPECT_DOUBLE_EQ(c.samples[1].second, 3.5);
  EXPECT_DOUBLE_EQ(c.min, 1.0);
  EXPECT_DOUBLE_EQ(c.max, 3.5);
  EXPECT_EQ(counter_label(c), "rank 0 memory");
  EXPECT_EQ(counter_range(c), "1.0-3.5 GiB");
  EXPECT_EQ(t->bars.size(), 4u);  // counters are not ops
}

// Ranks collapsed by symmetry: four ranks, two per stage -> the lowest of each stage, labelled
// with how many it stands for; every kept bar points at its new lane.
TEST(Timeline, CollapseByStageKeepsOneRankPerStage) {
  nlohmann::json doc = {{"traceEvents", nlohmann::json::array()}};
  for (int r = 0; r < 4; ++r) {
    const int stage = r / 2;
    std::string process = "rank ";  // appends: GCC 12 warns falsely on "x" + std::string chains
    process.append(std::to_string(r)).append(" (node 0, stage ").append(std::to_string(stage)).append(")");
    doc["traceEvents"].push_back(
        {{"ph", "M"}, {"name", "process_name"}, {"pid", r}, {"args", {{"name", process}}}});
    doc["traceEvents"].push_back(
        {{"ph", "M"}, {"name", "thread_name"}, {"pid", r}, {"tid", 0}, {"args", {{"name", "compute"}}}});
    for (int k = 0; k < 3; ++k)
      doc["traceEvents"].push_back({{"ph", "X"},
                                    {"name", "qkv"},
                                    {"cat", "compute"},
                                    {"pid", r},
                                    {"tid", 0},
                                    {"ts", 10 * k + r},
                                    {"dur", 5},
                                    {"args", {{"id", std::string("r").append(std::to_string(r))}}}});
  }
  auto t = timeline_from_json(doc, "four.json");
  ASSERT_TRUE(t.ok()) << t.error().message();
  ASSERT_EQ(t->lanes.size(), 4u);
  const Timeline c = collapse_by_stage(*t);
  ASSERT_EQ(c.lanes.size(), 2u);
  EXPECT_EQ(c.lanes[0].process, "rank 0 (node 0, stage 0) +1 like it");
  EXPECT_EQ(c.lanes[1].process, "rank 2 (node 0, stage 1) +1 like it");
  ASSERT_EQ(c.bars.size(), 6u);
  for (std::size_t l = 0; l < c.lanes.size(); ++l)
    for (std::size_t i = c.lanes[l].first; i < c.lanes[l].first + c.lanes[l].count; ++i)
      EXPECT_EQ(c.bars[i].lane, static_cast<int>(l));
  EXPECT_EQ(c.bars[c.lanes[1].first].id, "r2");
  // One rank per stage already (a symmetric simulation's trace), or no stages named: unchanged.
  const Timeline once = collapse_by_stage(c);
  EXPECT_EQ(once.lanes.size(), 2u);
  auto small = timeline_from_json(small_trace(), "small.json");
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(collapse_by_stage(*small).lanes.size(), small->lanes.size());
}

TEST(Timeline, VisibleBarsAndHitTests) {
  auto t = timeline_from_json(small_trace(), "small.json");
  ASSERT_TRUE(t.ok());
  const std::size_t qkv = t->lanes[0].first, mlp = qkv + 1;
  // Lane 0 holds qkv [0, 10] us and mlp_up [30, 50] us.
  EXPECT_EQ(visible_bars(*t, 0, 0, 1e-6), std::make_pair(qkv, qkv + 1));
  EXPECT_EQ(visible_bars(*t, 0, 11e-6, 29e-6).first, visible_bars(*t, 0, 11e-6, 29e-6).second);  // the gap
  EXPECT_EQ(visible_bars(*t, 0, 5e-6, 35e-6), std::make_pair(qkv, mlp + 1));
  EXPECT_EQ(visible_bars(*t, 0, 40e-6, 45e-6), std::make_pair(mlp, mlp + 1));  // inside a long bar
  EXPECT_EQ(visible_bars(*t, 7, 0, 1), std::make_pair(std::size_t{0}, std::size_t{0}));
  EXPECT_EQ(bar_at(*t, 0, 5e-6, 0), qkv);
  EXPECT_EQ(bar_at(*t, 0, 40e-6, 0), mlp);
  EXPECT_FALSE(bar_at(*t, 0, 20e-6, 1e-6).has_value());  // 10 us from either bar
  EXPECT_EQ(bar_at(*t, 0, 28e-6, 3e-6), mlp);            // within the slack of mlp_up only
  const std::string tip = bar_tooltip(*t, qkv);
  EXPECT_NE(tip.find("r0/L0/mb0/fwd/qkv"), std::string::npos) << tip;
  EXPECT_NE(tip.find("duration 10.0 us"), std::string::npos) << tip;
  EXPECT_NE(tip.find("bytes 1.00 KiB"), std::string::npos) << tip;
}

// Two ranks of a measured trace whose rank 1 clock runs 5 ms ahead: aligned on their shared
// collectives' ends (the median), so rank 1's all-reduce no longer ends before rank 0's starts. A
// predicted trace (one clock) is left alone.
// Two measured ranks whose clocks start 5 ms apart: both collectives end 5,000 us later on rank 1.
nlohmann::json two_measured_ranks() {
  return nlohmann::json::parse(R"json({
    "metadata": {"kind": "measured"},
    "traceEvents": [
      {"ph": "X", "name": "qkv", "cat": "compute", "pid": 0, "tid": 0, "ts": 0, "dur": 50, "args": {"id": "r0/L0/mb0/fwd/qkv"}},
      {"ph": "X", "name": "grad_reduce", "cat": "collective", "pid": 0, "tid": 1, "ts": 80, "dur": 20, "args": {"id": "r0/step/grad_reduce"}},
      {"ph": "X", "name": "param_all_gather", "cat": "collective", "pid": 0, "tid": 1, "ts": 110, "dur": 10, "args": {"id": "r0/step/param_all_gather"}},
      {"ph": "X", "name": "qkv", "cat": "compute", "pid": 1, "tid": 0, "ts": 5000, "dur": 60, "args": {"id": "r1/L0/mb0/fwd/qkv"}},
      {"ph": "X", "name": "grad_reduce", "cat": "collective", "pid": 1, "tid": 1, "ts": 5070, "dur": 30, "args": {"id": "r1/step/grad_reduce"}},
      {"ph": "X", "name": "param_all_gather", "cat": "collective", "pid": 1, "tid": 1, "ts": 5112, "dur": 8, "args": {"id": "r1/step/param_all_gather"}}
    ]})json");
}

TEST(Timeline, MeasuredRanksAlignedOnSharedCollectives) {
  auto doc = two_measured_ranks();
  auto t = timeline_from_json(doc, "m.json");
  ASSERT_TRUE(t.ok()) << t.error().message();
  EXPECT_NE(t->clock_note.find("aligned on the ends of up to 2 shared collectives"), std::string::npos)
      << t->clock_note;
  for (const TimelineBar& b : t->bars)
    if (b.name == "grad_reduce") {
      EXPECT_NEAR(b.end_s(), 100e-6, 1e-12) << b.id;
    }
  EXPECT_NEAR(t->begin_s, 0, 1e-12);
  doc["metadata"]["kind"] = "predicted";
  auto p = timeline_from_json(doc, "p.json");
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->clock_note.empty());
  EXPECT_NEAR(p->end_s, 5120e-6, 1e-12);
}

// A `foresight run` trace is on one clock already (metadata.clocks): the view says so and moves
// nothing, even where the collectives' ends differ.
TEST(Timeline, RunTraceAlignedByTheRunIsLeftAlone) {
  auto doc = two_measured_ranks();
  doc["metadata"]["clocks"] = nlohmann::json::parse(
      R"json([{"rank": 0, "offset_s": 0, "by": "reference"}, {"rank": 1, "offset_s": -0.004, "by": "collectives"}])json");
  auto t = timeline_from_json(doc, "m.json");
  ASSERT_TRUE(t.ok()) << t.error().message();
  EXPECT_NE(t->clock_note.find("aligned by the run"), std::string::npos) << t->clock_note;
  EXPECT_NE(t->clock_note.find("4.00 ms"), std::string::npos) << t->clock_note;
  EXPECT_NEAR(t->end_s, 5120e-6, 1e-12);  // rank 1's times as written
}

// A measured PyTorch profiler trace's memory events (profile_memory=True: "[memory]" instants with
// the device's total allocated) become a memory track per process and device, on the rank's
// aligned clock.
TEST(Timeline, MeasuredMemoryFromProfilerEvents) {
  auto doc = two_measured_ranks();
  for (
      const char* e :
      {R"({"ph": "i", "s": "t", "name": "[memory]", "pid": 0, "tid": 0, "ts": 10, "args": {"Device Type": 1, "Device Id": 0, "Addr": 1, "Bytes": 1073741824, "Total Allocated": 2147483648, "Total Reserved": 4294967296}})",
       R"({"ph": "i", "s": "t", "name": "[memory]", "pid": 0, "tid": 0, "ts": 40, "args": {"Device Type": 1, "Device Id": 0, "Addr": 1, "Bytes": -1073741824, "Total Allocated": 1073741824, "Total Reserved": 4294967296}})",
       R"({"ph": "i", "s": "t", "name": "[memory]", "pid": 0, "tid": 0, "ts": 20, "args": {"Device Type": 0, "Device Id": -1, "Addr": 2, "Bytes": 512, "Total Allocated": 536870912}})",
       R"({"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 0, "ts": 5010, "args": {"Device Type": 1, "Device Id": 0, "Bytes": 1024, "Total Allocated": 3221225472}})",
       R"({"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 0, "ts": 5020, "args": {"Bytes": 8}})"})
    doc["traceEvents"].push_back(nlohmann::json::parse(e));
  auto t = timeline_from_json(doc, "m.json");
  ASSERT_TRUE(t.ok()) << t.error().message();
  ASSERT_EQ(t->counters.size(), 3u);  // rank 0's device and host memory, rank 1's device
  const TimelineCounter* dev0 = nullptr;
  const TimelineCounter* host0 = nullptr;
  const TimelineCounter* dev1 = nullptr;
  for (const TimelineCounter& c : t->counters) {
    if (c.pid == 0 && c.name == "memory") dev0 = &c;
    if (c.pid == 0 && c.name == "host memory") host0 = &c;
    if (c.pid == 1 && c.name == "memory") dev1 = &c;
  }
  ASSERT_TRUE(dev0 && host0 && dev1);
  EXPECT_EQ(dev0->unit, "GiB");
  ASSERT_EQ(dev0->samples.size(), 2u);
  EXPECT_DOUBLE_EQ(dev0->samples[0].second, 2.0);
  EXPECT_DOUBLE_EQ(dev0->samples[1].second, 1.0);
  EXPECT_DOUBLE_EQ(host0->samples[0].second, 0.5);
  // Rank 1's clock is shifted by -5,000 us (its grad_reduce ends with rank 0's), its memory too.
  ASSERT_EQ(dev1->samples.size(), 1u);  // the event without a total is not a sample
  EXPECT_NEAR(dev1->samples[0].first, 10e-6, 1e-12);
  EXPECT_DOUBLE_EQ(dev1->samples[0].second, 3.0);
  EXPECT_EQ(t->bars.size(), 6u);  // memory events are not ops
}

// A range's time by kind and stream is clipped to it; exposed communication is what no compute
// of the same rank covers.
TEST(Timeline, RangeStatsClipAndExposedCommunication) {
  auto t = timeline_from_json(small_trace(), "small.json");
  ASSERT_TRUE(t.ok());
  // qkv [0, 10], all-reduce [10, 25] on rank 0, mlp_up [30, 50], send [60, 65] on rank 1.
  const RangeStats all = range_stats(*t, 0, 100e-6);
  EXPECT_EQ(all.ranks, 2);
  EXPECT_NEAR(all.exposed_communication_s, 15e-6 + 5e-6, 1e-12);
  double kinds = 0, streams = 0;
  for (const auto& [k, v] : all.kinds) kinds += v;
  for (const auto& [k, v] : all.streams) streams += v;
  EXPECT_NEAR(kinds, 10e-6 + 15e-6 + 20e-6 + 5e-6, 1e-12);
  EXPECT_NEAR(streams, kinds, 1e-12);
  EXPECT_EQ(all.streams.front().first, "compute");  // 30 us, the largest
  const RangeStats part = range_stats(*t, 5e-6, 20e-6);
  double in_part = 0;
  for (const auto& [k, v] : part.kinds) in_part += v;
  EXPECT_NEAR(in_part, 5e-6 + 10e-6, 1e-12);  // qkv's last 5 us, the all-reduce's first 10
  EXPECT_NEAR(part.exposed_communication_s, 10e-6, 1e-12);
}

TEST(Timeline, ErrorsNameTheFile) {
  auto no_events = timeline_from_json(nlohmann::json::object(), "x.json");
  ASSERT_FALSE(no_events.ok());
  EXPECT_EQ(no_events.error().message(), "x.json: /traceEvents: missing (not a Chrome trace)");
  auto no_ops = timeline_from_json(
      nlohmann::json::parse(R"json({"traceEvents": [{"ph": "M", "name": "process_name"}]})json"), "y.json");
  ASSERT_FALSE(no_ops.ok());
  EXPECT_NE(no_ops.error().message().find("y.json: no ops"), std::string::npos);
  auto bad_ts = timeline_from_json(
      nlohmann::json::parse(R"json({"traceEvents": [{"ph": "X", "ts": "soon", "dur": 1}]})json"), "z.json");
  ASSERT_FALSE(bad_ts.ok());
  EXPECT_EQ(bad_ts.error().message(), "z.json: /traceEvents/0: ts/dur missing or not numbers");
  auto missing = load_timeline("/nonexistent/trace.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message(), "/nonexistent/trace.json: cannot open trace");
}

TEST(Format, AxisLabelsHaveTheDigitsTheStepNeeds) {
  EXPECT_EQ(tick_text(0, 0.5), "0");
  EXPECT_EQ(tick_text(1.5, 0.5), "1.5 s");
  EXPECT_EQ(tick_text(3, 1), "3 s");
  EXPECT_EQ(tick_text(1.702, 0.002), "1702 ms");
  EXPECT_EQ(tick_text(0.0105, 0.0005), "10.5 ms");
  EXPECT_EQ(tick_text(25e-6, 5e-6), "25 us");
  EXPECT_EQ(seconds_text(0), "0 s");
  EXPECT_EQ(percent_text(0.4614), "46.1%");
  Plan p;
  p.tp = 2;
  p.pp = 4;
  p.dp = 8;
  p.cp = 2;
  p.sequence_parallel = true;
  p.virtual_stages = 2;
  EXPECT_EQ(layout_text(p), "tp2 pp4 dp8 cp2 sp v2");
}

}  // namespace
}  // namespace foresight::gui
