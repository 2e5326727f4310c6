// Sweeps in the GUI: the example's points, their table under QAbstractItemModelTester, what more
// network bandwidth must do, cancel, and the controller's thread.
#include "sim/sweep/sweep.h"

#include <gtest/gtest.h>

#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTemporaryDir>
#include <QtCharts/QBarSeries>
#include <QtCharts/QChart>
#include <QtCharts/QLineSeries>
#include <QtCharts/QLogValueAxis>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include "gui/models/format.h"
#include "gui/models/sweep_model.h"
#include "gui/models/sweep_runner.h"
#include "gui/views/sweep_view.h"
#include "tests/gui/model_check.h"

namespace foresight::gui {
namespace {

TEST(Sweep, ExamplePointsAndTheirTable) {
  auto spec = example_sweep();
  ASSERT_TRUE(spec.ok()) << spec.error().message();
  ASSERT_EQ(spec->points.size(), 9u);  // 3 device counts x 3 NIC bandwidths
  const SweepOutcome out = run_sweep_points(*spec, {}, nullptr, 2);
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(out.rows.size(), 9u);

  SweepModel m;
  QSortFilterProxyModel proxy;
  proxy.setSourceModel(&m);
  proxy.setSortRole(Qt::UserRole);
  test::ModelCheck check(&m);
  test::ModelCheck check_proxy(&proxy);
  m.set_outcome(out);
  proxy.sort(m.column_of(SweepModel::kStepTime), Qt::DescendingOrder);
  proxy.sort(0, Qt::AscendingOrder);
  m.clear();
  m.set_outcome(out);
  EXPECT_TRUE(check.ok()) << check.report();
  EXPECT_TRUE(check_proxy.ok()) << check_proxy.report();
  ASSERT_EQ(m.axis_count(), 2);
  EXPECT_EQ(m.columnCount(), 2 + SweepModel::kMetricCount);
  EXPECT_EQ(m.headerData(0, Qt::Horizontal).toString(), QStringLiteral("nic/bandwidth"));
  EXPECT_EQ(m.headerData(1, Qt::Horizontal).toString(), QStringLiteral("gpus"));

  // Every point fits; at a fixed device count a faster NIC never makes the step slower (it only
  // shortens the inter-node collectives), and the first (slowest) NIC is strictly slower for
  // data-parallel traffic that crosses nodes.
  std::map<int, std::map<double, double>> step;  // gpus -> NIC Gb/s -> seconds
  for (int r = 0; r < m.rowCount(); ++r) {
    ASSERT_TRUE(m.point_ok(r)) << m.index(r, m.column_of(SweepModel::kError)).data().toString().toStdString();
    const int gpus = m.index(r, 1).data(Qt::UserRole).toInt();
    const double gbps = m.index(r, 0).data().toString().chopped(4).toDouble();  // "100Gbps"
    step[gpus][gbps] = m.step_time(r);
    EXPECT_EQ(m.index(r, m.column_of(SweepModel::kStepTime)).data(Qt::UserRole).toDouble(), m.step_time(r));
  }
  ASSERT_EQ(step.size(), 3u);
  for (const auto& [gpus, by_bw] : step) {
    ASSERT_EQ(by_bw.size(), 3u) << gpus;
    EXPECT_GT(by_bw.at(100), by_bw.at(200)) << gpus;
    EXPECT_GE(by_bw.at(200), by_bw.at(400)) << gpus;
  }
  EXPECT_EQ(m.point_label(0), QStringLiteral("100Gbps, 16"));
}

TEST(Sweep, CancelLeavesPointsUnevaluated) {
  auto spec = example_sweep();
  ASSERT_TRUE(spec.ok());
  std::atomic<bool> cancel{true};
  const SweepOutcome out = run_sweep_points(*spec, {}, &cancel);
  EXPECT_TRUE(out.cancelled);
  ASSERT_EQ(out.rows.size(), 9u);
  for (const auto& row : out.rows) EXPECT_TRUE(row.is_null());
  SweepModel m;
  m.set_outcome(out);
  EXPECT_TRUE(std::isnan(m.step_time(0)));
  EXPECT_FALSE(m.index(0, m.column_of(SweepModel::kStepTime)).data(Qt::UserRole).isValid());
  EXPECT_EQ(m.index(0, m.column_of(SweepModel::kError)).data().toString(),
            QStringLiteral("not evaluated (cancelled)"));
}

TEST(Sweep, ControllerRunsOnItsThread) {
  auto spec = example_sweep();
  ASSERT_TRUE(spec.ok());
  SweepController c;
  QSignalSpy finished(&c, &SweepController::finished);
  ASSERT_TRUE(c.start(*spec));
  EXPECT_FALSE(c.start(*spec));
  ASSERT_TRUE(finished.wait(10000));
  const auto out = finished.takeFirst().at(0).value<SweepOutcome>();
  EXPECT_TRUE(out.ok());
  EXPECT_EQ(out.rows.size(), 9u);
  EXPECT_FALSE(c.running());
}

// Numeric axes chart as numbers in the labels' own unit, sorted; named values stay categories;
// each series names the other axes' values.
TEST(Sweep, NumericAxesAndNamedSeries) {
  auto spec = example_sweep();
  ASSERT_TRUE(spec.ok());
  const SweepOutcome out = run_sweep_points(*spec, {}, nullptr, 1);
  const int gpus = out.axes[0] == "/gpus" ? 0 : 1;
  const SweepChart by_gpus = sweep_chart(out, "step_time_s", gpus);
  EXPECT_TRUE(by_gpus.numeric);
  EXPECT_EQ(by_gpus.x, (std::vector<double>{16, 32, 64}));
  EXPECT_EQ(by_gpus.x_unit, "");
  EXPECT_EQ(by_gpus.series_title, "nic/bandwidth");
  EXPECT_EQ(by_gpus.series.front(), "nic/bandwidth 100Gbps");
  const SweepChart by_nic = sweep_chart(out, "step_time_s", 1 - gpus);
  EXPECT_TRUE(by_nic.numeric);
  EXPECT_EQ(by_nic.x, (std::vector<double>{100, 200, 400}));
  EXPECT_EQ(by_nic.x_unit, "Gbps");
  EXPECT_EQ(by_nic.series.front(), "gpus 16");
  EXPECT_DOUBLE_EQ(axis_number("400Gbps"), 50e9);
  EXPECT_TRUE(std::isnan(axis_number("llama3-8b")));

  // Preset names: categories in the points' order; 8 to 2,048 GPUs: numbers spanning decades.
  SweepOutcome named;
  named.axes = {"/model"};
  SweepOutcome wide;
  wide.axes = {"/gpus"};
  const std::vector<int> counts = {2048, 8, 64, 512};
  for (std::size_t i = 0; i < counts.size(); ++i) {
    named.rows.push_back({{"index", i},
                          {"ok", true},
                          {"step_time_s", 1.0 + i},
                          {"axes", {{"/model", i % 2 ? "gpt3-175b" : "llama3-8b-" + std::to_string(i)}}}});
    wide.rows.push_back(
        {{"index", i}, {"ok", true}, {"step_time_s", 4096.0 / counts[i]}, {"axes", {{"/gpus", counts[i]}}}});
  }
  const SweepChart n = sweep_chart(named, "step_time_s", 0);
  EXPECT_FALSE(n.numeric);
  EXPECT_EQ(n.categories.front(), "llama3-8b-0");
  const SweepChart w = sweep_chart(wide, "step_time_s", 0);
  ASSERT_TRUE(w.numeric);
  EXPECT_EQ(w.x, (std::vector<double>{8, 64, 512, 2048}));
  EXPECT_EQ(w.values[0], (std::vector<double>{512, 64, 8, 2}));
  // The view draws it as a line on logarithmic axes, so 2,048 GPUs is as visible as 8.
  SweepView v;
  v.show_outcome(wide);
  QChart* c = v.chart();
  ASSERT_EQ(c->series().size(), 1);
  EXPECT_NE(qobject_cast<QLineSeries*>(c->series().front()), nullptr);
  EXPECT_NE(qobject_cast<QLogValueAxis*>(c->axes(Qt::Horizontal).value(0)), nullptr);
  EXPECT_NE(qobject_cast<QLogValueAxis*>(c->axes(Qt::Vertical).value(0)), nullptr);
  // Named values: bars.
  v.show_outcome(named);
  EXPECT_NE(qobject_cast<QBarSeries*>(v.chart()->series().front()), nullptr);
  // The example's header names its base, and its chart's title what the lines are.
  SweepView e;
  e.set_spec(*spec);
  EXPECT_TRUE(
      e.header_text().contains(QStringLiteral("llama3-8b on dgx-h100-ndr, 16 GPUs, global batch 256")))
      << e.header_text().toStdString();
  e.show_outcome(out);
  e.set_chart("step_time_s", gpus);
  EXPECT_TRUE(e.chart()->title().contains(QStringLiteral("one line per nic/bandwidth")))
      << e.chart()->title().toStdString();
}

TEST(Sweep, AxisTitles) {
  EXPECT_EQ(axis_title("/cluster/node/nic/bandwidth"), QStringLiteral("nic/bandwidth"));
  EXPECT_EQ(axis_title("/gpus"), QStringLiteral("gpus"));
  EXPECT_EQ(axis_title("/plan/tp"), QStringLiteral("plan/tp"));
}

// A results.jsonl from `foresight sweep` opens without its spec, and any metric plots against any
// axis: one series per combination of the other axes.
TEST(Sweep, ResultsFileAndAnyMetricAgainstAnyAxis) {
  auto spec = example_sweep();  // gpus (16, 32, 64) x NIC bandwidth (3 values)
  ASSERT_TRUE(spec.ok());
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  SweepOptions o;
  o.out_dir = dir.path().toStdString();
  o.threads = 1;
  ASSERT_TRUE(run_sweep(*spec, o).ok());
  const std::string jsonl = o.out_dir + "/results.jsonl";
  auto out = load_sweep_results(jsonl);
  ASSERT_TRUE(out.ok()) << out.error().message();
  EXPECT_EQ(out->rows.size(), spec->points.size());
  EXPECT_EQ(out->axes.size(), 2u);
  const int gpus_axis = out->axes[0] == "/gpus" ? 0 : 1;
  const SweepChart c = sweep_chart(*out, "mfu", gpus_axis);
  EXPECT_EQ(c.categories, (std::vector<std::string>{"16", "32", "64"}));
  EXPECT_EQ(c.series.size(), 3u);  // one per NIC bandwidth
  for (const auto& values : c.values)
    for (double v : values) EXPECT_TRUE(v > 0 && v < 1) << v;
  // The same numbers as the rows.
  for (const auto& row : out->rows) {
    const std::string g = row["axes"]["/gpus"].dump();
    const std::size_t cat = static_cast<std::size_t>(std::find(c.categories.begin(), c.categories.end(), g) -
                                                     c.categories.begin());
    bool found = false;
    for (const auto& values : c.values) found = found || values[cat] == row["mfu"].get<double>();
    EXPECT_TRUE(found);
  }
  // The CSV holds the same points and figures.
  auto from_csv = load_sweep_results(o.out_dir + "/results.csv");
  ASSERT_TRUE(from_csv.ok()) << from_csv.error().message();
  ASSERT_EQ(from_csv->rows.size(), out->rows.size());
  const SweepChart cc = sweep_chart(*from_csv, "mfu", from_csv->axes[0] == "/gpus" ? 0 : 1);
  ASSERT_EQ(cc.values.size(), c.values.size());
  for (std::size_t i = 0; i < c.values.size(); ++i)
    for (std::size_t j = 0; j < c.values[i].size(); ++j) EXPECT_NEAR(cc.values[i][j], c.values[i][j], 1e-12);
  // The CSV's plans give the same Layout column as the JSONL's.
  SweepModel from_jsonl_model, from_csv_model;
  from_jsonl_model.set_outcome(*out);
  from_csv_model.set_outcome(*from_csv);
  const int layout = from_csv_model.column_of(SweepModel::kLayout);
  for (int r = 0; r < from_csv_model.rowCount(); ++r) {
    EXPECT_FALSE(from_csv_model.index(r, layout).data().toString().isEmpty()) << r;
    EXPECT_EQ(from_csv_model.index(r, layout).data().toString(),
              from_jsonl_model.index(r, layout).data().toString());
  }
  // --sweep and Open alike: a results file given as a file opens as results, CSV or JSONL.
  for (const std::string& file : {jsonl, o.out_dir + "/results.csv"}) {
    SweepView w;
    w.open_file(qstr(file));
    EXPECT_EQ(w.model()->rowCount(), 9) << file;
    EXPECT_TRUE(w.header_text().contains(QStringLiteral("global batch 256")))
        << w.header_text().toStdString();
  }
  // The view shows it and re-plots on request.
  SweepView v;
  ASSERT_TRUE(v.open_results(jsonl).ok());
  EXPECT_EQ(v.model()->rowCount(), 9);
  v.set_chart("cost_per_mtok_usd", 1 - gpus_axis);
  EXPECT_EQ(v.chart_metric(), "cost_per_mtok_usd");
  EXPECT_EQ(v.chart_axis(), 1 - gpus_axis);
  // A broken file names itself and its line; a partial last line (a killed run) is skipped.
  std::ofstream(o.out_dir + "/bad.jsonl") << "{\"index\": 0}\nnot json\n{\"index\": 1}\n";
  auto bad = load_sweep_results(o.out_dir + "/bad.jsonl");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("bad.jsonl:2: not a sweep result row"), std::string::npos);
  std::ofstream(o.out_dir + "/cut.jsonl") << "{\"index\": 0, \"axes\": {\"/gpus\": 16}}\n{\"index\": 1, \"ax";
  auto cut = load_sweep_results(o.out_dir + "/cut.jsonl");
  ASSERT_TRUE(cut.ok()) << cut.error().message();
  EXPECT_EQ(cut->rows.size(), 1u);
}

}  // namespace
}  // namespace foresight::gui
