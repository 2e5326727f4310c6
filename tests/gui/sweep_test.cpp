// Sweeps in the GUI: the example's points, their table under QAbstractItemModelTester, what more
// network bandwidth must do, cancel, and the controller's thread.
#include <QSignalSpy>
#include <QSortFilterProxyModel>

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "gui/models/sweep_model.h"
#include "gui/models/sweep_runner.h"
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
  EXPECT_EQ(m.index(0, m.column_of(SweepModel::kError)).data().toString(), QStringLiteral("not evaluated (cancelled)"));
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

}  // namespace
}  // namespace foresight::gui
