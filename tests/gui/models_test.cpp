// The GUI's item models under QAbstractItemModelTester, and what their rows must hold: presets
// as listed by the library, breakdowns that add up to the Prediction's totals, sortable ranked
// plans, and comparison tables that match compare_traces.
#include <gtest/gtest.h>

#include <QSortFilterProxyModel>
#include <QTemporaryDir>
#include <algorithm>
#include <fstream>

#include "gui/models/breakdown_model.h"
#include "gui/models/compare_models.h"
#include "gui/models/comparison.h"
#include "gui/models/format.h"
#include "gui/models/plan_inputs.h"
#include "gui/models/preset_list_model.h"
#include "gui/models/ranked_plan_model.h"
#include "gui/models/search_plot.h"
#include "gui/models/search_runner.h"
#include "gui/models/timeline_model.h"
#include "gui/models/traces.h"
#include "tests/gui/model_check.h"

namespace foresight::gui {
namespace {

using test::ModelCheck;

// tiny on the local CPU "cluster": every layout of up to 4 ranks runs in milliseconds.
PlanInputs tiny_inputs() {
  PlanInputs in;
  in.model = "tiny";
  in.cluster = "cpu-local";
  in.plan.tp = 2;
  in.plan.pp = 2;
  in.plan.dp = 1;
  in.plan.micro_batch = 1;
  in.plan.global_batch = 4;
  return in;
}

SearchRequest tiny_search() {
  SearchRequest r;
  r.model = "tiny";
  r.cluster = "cpu-local";
  r.gpus = 4;
  r.global_batch = 8;
  r.top_k = 20;
  r.resimulate = 2;
  r.threads = 1;
  return r;
}

TEST(PresetListModel, ListsTheLibraryPresets) {
  for (PresetKind kind : {PresetKind::kModel, PresetKind::kCluster}) {
    PresetListModel m(kind);
    ModelCheck check(&m);
    EXPECT_TRUE(check.ok()) << check.report();
    const auto names = preset_names(kind);
    ASSERT_EQ(m.rowCount(), static_cast<int>(names.size()));
    for (int r = 0; r < m.rowCount(); ++r) {
      EXPECT_EQ(m.data(m.index(r, 0)).toString().toStdString(), names[static_cast<std::size_t>(r)]);
      EXPECT_FALSE(m.data(m.index(r, 0), Qt::ToolTipRole).toString().isEmpty())
          << names[static_cast<std::size_t>(r)];
    }
  }
  PresetListModel models(PresetKind::kModel);
  ASSERT_GE(models.row_of("llama3-8b"), 0);
  ASSERT_GE(models.row_of("tiny"), 0);
  EXPECT_EQ(models.row_of("no-such-model"), -1);
  // Llama 3 8B has 8.03e9 parameters (Meta's model card).
  EXPECT_TRUE(models.data(models.index(models.row_of("llama3-8b"), 0), Qt::ToolTipRole)
                  .toString()
                  .startsWith(QStringLiteral("8.0B parameters")));
}

TEST(PlanInputs, ExampleIsValidAndErrorsNameTheField) {
  const Evaluation ok = evaluate_plan(example_inputs());
  ASSERT_TRUE(ok.ok()) << ok.error;
  EXPECT_EQ(ok.prediction.devices, 64);  // the CLI's example too: default_job_request()
  EXPECT_TRUE(ok.prediction.fits());

  PlanInputs bad = example_inputs();
  bad.plan.tp = 3;  // 32 heads are not divisible by 3
  const Evaluation e = evaluate_plan(bad);
  EXPECT_FALSE(e.ok());
  EXPECT_FALSE(e.has_prediction);
  EXPECT_NE(e.error.find("/tp"), std::string::npos) << e.error;

  PlanInputs unknown = example_inputs();
  unknown.model = "no-such-model";
  EXPECT_EQ(evaluate_plan(unknown).error.rfind("model: ", 0), 0u) << evaluate_plan(unknown).error;

  // Llama 3 70B without sharding on 8 GPUs: bf16 weights alone are 141 GB, 2 bytes x 70.6e9 > 80 GB.
  PlanInputs big;
  big.model = "llama3-70b";
  big.cluster = "dgx-h100-ndr";
  big.plan.dp = 8;
  big.plan.global_batch = 64;
  const Evaluation oom = evaluate_plan(big);
  EXPECT_TRUE(oom.has_prediction);
  EXPECT_FALSE(oom.ok());
  EXPECT_FALSE(oom.prediction.fits());
  EXPECT_NE(oom.error.find("does not fit"), std::string::npos) << oom.error;
}

TEST(BreakdownModel, RowsAddUpToThePrediction) {
  const Evaluation e = evaluate_plan(example_inputs());
  ASSERT_TRUE(e.ok()) << e.error;
  BreakdownModel time(BreakdownModel::Kind::kTime), memory(BreakdownModel::Kind::kMemory);
  ModelCheck check_time(&time);
  time.set_prediction(e.prediction);
  time.clear();
  time.set_prediction(e.prediction);
  EXPECT_TRUE(check_time.ok()) << check_time.report();
  ModelCheck check_memory(&memory);
  memory.set_prediction(e.prediction);
  EXPECT_TRUE(check_memory.ok()) << check_memory.report();

  // The categories partition the step and the device memory (recompute is inside compute).
  double seconds = 0, bytes = 0, shares = 0;
  for (int r = 0; r < time.rowCount(); ++r) {
    seconds += time.amount(r);
    shares += time.data(time.index(r, BreakdownModel::kShare), Qt::UserRole).toDouble();
    EXPECT_GT(time.amount(r), 0);
  }
  for (int r = 0; r < memory.rowCount(); ++r) bytes += memory.amount(r);
  EXPECT_NEAR(seconds, e.prediction.time.total, 1e-9 * e.prediction.time.total);
  EXPECT_NEAR(shares, 1.0, 1e-9);
  EXPECT_NEAR(bytes, e.prediction.memory.total, 1e-6 * e.prediction.memory.total);
  EXPECT_EQ(memory.denominator(), e.prediction.memory.capacity);
  EXPECT_EQ(time.category(0), "compute");
}

TEST(RankedPlanModel, SortsByRawNumbersThroughAProxy) {
  const SearchOutcome out = run_search(tiny_search());
  ASSERT_TRUE(out.ok()) << out.error;
  RankedPlanModel m;
  QSortFilterProxyModel proxy;
  proxy.setSourceModel(&m);
  proxy.setSortRole(Qt::UserRole);
  ModelCheck check(&m);
  ModelCheck check_proxy(&proxy);
  m.set_plans(out.result.plans, out.result.pareto);
  proxy.sort(RankedPlanModel::kStepTime, Qt::DescendingOrder);
  proxy.sort(RankedPlanModel::kMemory, Qt::AscendingOrder);
  proxy.setFilterKeyColumn(RankedPlanModel::kLayout);
  proxy.setFilterFixedString(QStringLiteral("pp1"));
  proxy.setFilterFixedString(QString());
  m.clear();
  m.set_plans(out.result.plans, out.result.pareto);
  EXPECT_TRUE(check.ok()) << check.report();
  EXPECT_TRUE(check_proxy.ok()) << check_proxy.report();

  ASSERT_EQ(m.rowCount(), static_cast<int>(out.result.plans.size()));
  proxy.sort(RankedPlanModel::kStepTime, Qt::AscendingOrder);
  for (int r = 1; r < proxy.rowCount(); ++r)
    EXPECT_LE(proxy.index(r - 1, RankedPlanModel::kStepTime).data(Qt::UserRole).toDouble(),
              proxy.index(r, RankedPlanModel::kStepTime).data(Qt::UserRole).toDouble());
  // Pareto marks: exactly the listed plans that are on the front.
  for (int r = 0; r < m.rowCount(); ++r) {
    const bool on_front = std::any_of(out.result.pareto.begin(), out.result.pareto.end(),
                                      [&](const RankedPlan& p) { return p.plan == m.plan(r).plan; });
    EXPECT_EQ(m.on_pareto_front(r), on_front) << r;
  }
}

// A ranked plan with only the figures the search view reads.
RankedPlan ranked(double step_s, double free_gib, double cost, double mfu = 0.4) {
  RankedPlan r;
  r.prediction.step_time_s = step_s;
  r.prediction.mfu = mfu;
  r.prediction.memory.capacity = 80.0 * (1 << 30);
  r.prediction.memory.total = r.prediction.memory.capacity - free_gib * (1 << 30);
  r.memory_headroom = free_gib * (1 << 30);
  r.economics.cost_per_mtok_usd = cost;
  return r;
}

// The plan in one line names every knob a user chooses by.
TEST(RankedPlanModel, PlanTextNamesTheWholeLayout) {
  Plan p;
  p.tp = 2;
  p.pp = 4;
  p.dp = 8;
  p.sequence_parallel = true;
  p.virtual_stages = 2;
  p.schedule = Schedule::kInterleaved1F1B;
  p.micro_batch = 2;
  p.zero_stage = 1;
  p.recompute = Recompute::kSelective;
  EXPECT_EQ(plan_text(p).toStdString(), "tp2 pp4 dp8 sp v2 | mb2 | ZeRO-1 | recompute selective");
  p.offload_optimizer = true;
  p.schedule = Schedule::kZeroBubble;
  EXPECT_NE(plan_text(p).indexOf(QStringLiteral("| offload optimizer")), -1) << plan_text(p).toStdString();
  EXPECT_NE(plan_text(p).indexOf(qstr(to_string(Schedule::kZeroBubble))), -1);
  // The overlaps the search varies tell apart plans of one layout.
  p.overlap_grad_reduce = true;
  p.overlap_ep_comm = true;
  EXPECT_NE(plan_text(p).indexOf(QStringLiteral("| overlap grad+ep")), -1) << plan_text(p).toStdString();
}

// The minimum-free filter keeps exactly the plans with that share free; the CSV of the filtered
// table has its rows, raw numbers and quoted text.
TEST(RankedPlanModel, FilterByFreeMemoryAndCsv) {
  RankedPlanModel m;
  RankedPlanFilter f;
  f.setSourceModel(&m);
  ModelCheck check(&f);
  std::vector<RankedPlan> plans = {ranked(1.0, 2, 3), ranked(1.2, 10, 3.6), ranked(1.5, 40, 4.5)};
  m.set_plans(plans);
  EXPECT_EQ(f.rowCount(), 3);
  f.set_min_free(0.05);  // 4 GiB of 80
  ASSERT_EQ(f.rowCount(), 2);
  for (int r = 0; r < f.rowCount(); ++r)
    EXPECT_GE(free_share(m.plan(f.mapToSource(f.index(r, 0)).row())), 0.05);
  f.set_min_free(0.6);
  EXPECT_EQ(f.rowCount(), 0);
  f.set_min_free(0);
  EXPECT_EQ(f.rowCount(), 3);
  EXPECT_TRUE(check.ok()) << check.report();
  f.set_min_free(0.05);
  const QString csv = table_csv(f, {RankedPlanModel::kRank, RankedPlanModel::kLayout,
                                    RankedPlanModel::kStepTime, RankedPlanModel::kHeadroom});
  const QStringList lines = csv.split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  ASSERT_EQ(lines.size(), 3) << csv.toStdString();
  EXPECT_EQ(lines[0].toStdString(), "rank,plan,step_s,headroom_bytes");
  EXPECT_TRUE(lines[1].startsWith(QStringLiteral("2,tp1 pp1 dp1 | mb1 | ZeRO-0,1.2,")))
      << lines[1].toStdString();
  EXPECT_TRUE(lines[1].endsWith(QString::number(10.0 * (1 << 30), 'g', 10))) << lines[1].toStdString();
}

// The 2-D Pareto front keeps the points no other beats on both axes, each in its better
// direction; fitted axes hold every point, go logarithmic over decades, and a few far points
// do not squeeze the rest into one spot on a linear axis they do not reach.
TEST(SearchPlot, ParetoInTheAxesShownAndFittedRanges) {
  const PlotAxes time_free = plot_axes(SearchPlot::kTimeVsFree);  // x: free (higher better), y: time (lower)
  const std::vector<QPointF> pts = {{5, 1.0}, {10, 1.0}, {20, 1.5}, {15, 2.0}, {30, 3.0}, {30, 2.5}};
  const auto front = pareto_2d(pts, time_free);
  std::vector<std::size_t> expected = {1, 2, 5};  // (10,1.0), (20,1.5), (30,2.5)
  EXPECT_EQ(front, expected);
  for (std::size_t i = 0; i < pts.size(); ++i) {
    bool dominated = false;
    for (std::size_t j = 0; j < pts.size(); ++j)
      dominated = dominated || (pts[j].x() >= pts[i].x() && pts[j].y() <= pts[i].y() &&
                                (pts[j].x() > pts[i].x() || pts[j].y() < pts[i].y()));
    EXPECT_EQ(std::find(front.begin(), front.end(), i) != front.end(), !dominated) << i;
  }
  const PlotAxes mfu = plot_axes(SearchPlot::kMfuVsFree);  // both higher better
  EXPECT_EQ(pareto_2d({{5, 40}, {10, 45}, {20, 30}, {8, 50}}, mfu), (std::vector<std::size_t>{3, 1, 2}));

  const AxisRange lin = fit_axis({1.0, 1.2, 1.4});
  EXPECT_LE(lin.lo, 1.0);
  EXPECT_GE(lin.hi, 1.4);
  EXPECT_FALSE(lin.log);
  EXPECT_LT(lin.hi - lin.lo, 0.6);  // the points fill most of the axis
  const AxisRange wide = fit_axis({0.5, 2.0, 190.0});
  EXPECT_TRUE(wide.log);
  EXPECT_LE(wide.lo, 0.5);
  EXPECT_GE(wide.hi, 190.0);
  EXPECT_GE(fit_axis({0.0, 3.0}).lo, 0.0);

  // Cost that is step time times one constant (same devices, same price) is not offered.
  std::vector<RankedPlan> same = {ranked(1.0, 10, 2.0), ranked(2.0, 20, 4.0)};
  auto offered = useful_plots(same);
  EXPECT_EQ(std::count(offered.begin(), offered.end(), SearchPlot::kTimeVsCost), 0);
  same.push_back(ranked(1.5, 5, 9.0));
  offered = useful_plots(same);
  EXPECT_EQ(std::count(offered.begin(), offered.end(), SearchPlot::kTimeVsCost), 1);
}

// Plans side by side: one column per plan, each row the plan's own figure; the breakdown rows
// add up to the step.
TEST(PlanSideBySideModel, OneColumnPerPlan) {
  const SearchOutcome out = run_search(tiny_search());
  ASSERT_TRUE(out.ok()) << out.error;
  ASSERT_GE(out.result.plans.size(), 2u);
  PlanSideBySideModel m;
  ModelCheck check(&m);
  m.set_plans({out.result.plans[0], out.result.plans[1]});
  EXPECT_TRUE(check.ok()) << check.report();
  ASSERT_EQ(m.columnCount(), 2);
  for (int c = 0; c < 2; ++c) {
    const RankedPlan& p = out.result.plans[static_cast<std::size_t>(c)];
    EXPECT_EQ(m.headerData(c, Qt::Horizontal).toString(), plan_text(p.plan));
    double parts = 0;
    for (int r = 0; r < m.rowCount(); ++r) {
      if (m.row_name(r) == QStringLiteral("step time (analytic)")) {
        EXPECT_EQ(m.value(r, c), p.prediction.step_time_s);
      }
      if (m.row_name(r) == QStringLiteral("memory: total")) {
        EXPECT_EQ(m.value(r, c), p.prediction.memory.total);
      }
      if (m.row_name(r).startsWith(QStringLiteral("time: "))) parts += m.value(r, c);
    }
    EXPECT_NEAR(parts, p.prediction.step_time_s, 1e-6 * p.prediction.step_time_s);
  }
}

TEST(TimelineModel, OneRowPerOpOfTheTrace) {
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  const std::string path = dir.filePath(QStringLiteral("t.json")).toStdString();
  auto sim = simulate_to_trace(tiny_inputs(), path);
  ASSERT_TRUE(sim.ok()) << sim.error().message();
  auto t = load_timeline(path);
  ASSERT_TRUE(t.ok()) << t.error().message();
  TimelineModel m;
  QSortFilterProxyModel proxy;
  proxy.setSourceModel(&m);
  proxy.setSortRole(Qt::UserRole);
  ModelCheck check(&m);
  ModelCheck check_proxy(&proxy);
  m.set_timeline(*t);
  proxy.sort(TimelineModel::kDuration, Qt::DescendingOrder);
  m.clear();
  m.set_timeline(std::move(*t));
  EXPECT_TRUE(check.ok()) << check.report();
  EXPECT_TRUE(check_proxy.ok()) << check_proxy.report();
  EXPECT_EQ(m.rowCount(), static_cast<int>(sim->ops));
  EXPECT_EQ(m.timeline().kind, "predicted");
  EXPECT_EQ(m.timeline().model, "tiny");
  EXPECT_DOUBLE_EQ(m.timeline().step_s, sim->step_s);
}

// A PyTorch profiler trace as the measured side: compared by kind per step (after the first of
// three steps), with a note that says so and one with the host's time per kernel; the kind table
// holds the measured kinds.
TEST(CompareModels, ProfilerTraceComparedByKind) {
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  auto traces = write_example_traces(tiny_inputs(), dir.path().toStdString());
  ASSERT_TRUE(traces.ok()) << traces.error().message();
  std::string events;
  for (int s = 0; s < 3; ++s) {
    const int t0 = 1000 * s;
    events += (s ? ",\n" : "") +
              std::string(R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#)") +
              std::to_string(s) + R"(", "pid": 100, "tid": 100, "ts": )" + std::to_string(t0) +
              R"(, "dur": 900},
{"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16", "pid": 0, "tid": 7, "ts": )" +
              std::to_string(t0 + 100) + R"(, "dur": 500},
{"ph": "X", "cat": "kernel", "name": "flash_fwd_kernel", "pid": 0, "tid": 7, "ts": )" +
              std::to_string(t0 + 650) + R"(, "dur": 200},
{"ph": "X", "cat": "gpu_user_annotation", "name": "layers.0", "pid": 0, "tid": 7, "ts": )" +
              std::to_string(t0 + 100) + R"(, "dur": 750},
{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 100, "tid": 100, "ts": )" +
              std::to_string(t0 + 10) + R"(, "dur": 20},
{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100, "ts": )" +
              std::to_string(t0 + 15) + R"(, "dur": 5})";
  }
  const std::string kineto = dir.filePath(QStringLiteral("rank0.json")).toStdString();
  std::ofstream(kineto) << "{\"schemaVersion\": 1, \"traceEvents\": [\n" << events << "\n]}\n";
  auto c = load_comparison(traces->predicted, kineto);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->measured_source, "pytorch (kineto)");
  EXPECT_FALSE(c->synthetic);
  EXPECT_NEAR(c->report.measured_step_s, 900e-6, 1e-12);
  ASSERT_FALSE(c->notes.empty());
  EXPECT_NE(c->notes.front().find("2 steps compared by kind"), std::string::npos) << c->notes.front();
  bool gemm = false;
  for (const KindComparison& k : c->report.kinds)
    if (k.kind == "gemm") {
      gemm = true;
      EXPECT_NEAR(k.measured_s, 500e-6, 1e-12);
    }
  EXPECT_TRUE(gemm);
  // The host's issue: one launch per step, inside a 20 us aten::mm.
  EXPECT_TRUE(std::any_of(c->notes.begin(), c->notes.end(), [](const std::string& n) {
    return n.find("kernel launches per step on the host: 1, 20.0 us of host time each") != std::string::npos;
  }));
  // Its layer range (one layer per rank: tiny's 2 layers on 2 stages): the differences table's row.
  ASSERT_EQ(c->report.worst.size(), 1u);
  EXPECT_EQ(c->report.worst[0].kind, "layer");
  EXPECT_NEAR(c->report.worst[0].measured_s, 750e-6, 1e-12);
  EXPECT_GT(c->report.worst[0].predicted_s, 0);
  // A file that is neither kind of trace is refused with its name.
  const std::string junk = dir.filePath(QStringLiteral("junk.json")).toStdString();
  std::ofstream(junk) << "[]";
  auto bad = load_comparison(traces->predicted, junk);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("junk.json"), std::string::npos) << bad.error().message();
}

TEST(CompareModels, TablesMatchTheReport) {
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  auto traces = write_example_traces(tiny_inputs(), dir.path().toStdString());
  ASSERT_TRUE(traces.ok()) << traces.error().message();
  auto c = load_comparison(traces->predicted, traces->measured);
  ASSERT_TRUE(c.ok()) << c.error().message();
  // The stand-in measurement runs every kernel slower, so the prediction is below it; and it says
  // it is not a measurement.
  EXPECT_LT(c->report.step_time_error_pct, 0);
  EXPECT_TRUE(c->synthetic);
  ASSERT_FALSE(c->notes.empty());
  EXPECT_NE(c->notes.front().find("synthetic"), std::string::npos) << c->notes.front();
  EXPECT_EQ(c->predicted.bars.size(), c->measured.bars.size());
  EXPECT_EQ(static_cast<std::size_t>(c->report.matched_ops), c->predicted.bars.size());

  CompareKindModel kinds;
  WorstOpsModel worst;
  ModelCheck check_kinds(&kinds);
  ModelCheck check_worst(&worst);
  kinds.set_report(c->report);
  worst.set_report(c->report);
  kinds.clear();
  worst.clear();
  kinds.set_report(c->report);
  worst.set_report(c->report);
  EXPECT_TRUE(check_kinds.ok()) << check_kinds.report();
  EXPECT_TRUE(check_worst.ok()) << check_worst.report();
  ASSERT_EQ(kinds.rowCount(), static_cast<int>(c->report.kinds.size()));
  ASSERT_EQ(worst.rowCount(), static_cast<int>(c->report.worst.size()));
  for (int r = 0; r < kinds.rowCount(); ++r) {
    const KindComparison& k = c->report.kinds[static_cast<std::size_t>(r)];
    EXPECT_EQ(kinds.index(r, CompareKindModel::kKind).data().toString().toStdString(), k.kind);
    EXPECT_DOUBLE_EQ(kinds.index(r, CompareKindModel::kError).data(Qt::UserRole).toDouble(), k.error_pct);
  }
}

}  // namespace
}  // namespace foresight::gui
