// Sweeps in the GUI: the example's points, their table under QAbstractItemModelTester, what more
// network bandwidth must do, cancel, and the controller's thread.
#include "sim/sweep/sweep.h"

#include <gtest/gtest.h>

#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTemporaryDir>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

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
