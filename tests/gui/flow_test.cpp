// The GUI's main flow without widgets: presets -> a search on a worker thread -> the best plan ->
// its simulated timeline, whose bars are exactly the simulated ops. And cancelling a search.
#include <gtest/gtest.h>

#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTemporaryDir>
#include <set>

#include "gui/models/plan_inputs.h"
#include "gui/models/preset_list_model.h"
#include "gui/models/ranked_plan_model.h"
#include "gui/models/search_runner.h"
#include "gui/models/timeline_model.h"
#include "gui/models/traces.h"
#include "sim/workload/workload.h"

namespace foresight::gui {
namespace {

TEST(Flow, PresetsSearchBestPlanTimeline) {
  // 1. Presets, as the Setup's combo boxes list them.
  PresetListModel models(PresetKind::kModel), clusters(PresetKind::kCluster);
  const int tiny = models.row_of("tiny"), local = clusters.row_of("cpu-local");
  ASSERT_GE(tiny, 0);
  ASSERT_GE(local, 0);

  // 2. A small search on the controller's worker thread.
  SearchRequest req;
  req.model = models.name(tiny);
  req.cluster = clusters.name(local);
  req.gpus = 4;
  req.global_batch = 8;
  req.top_k = 10;
  req.resimulate = 2;
  SearchController controller;
  QSignalSpy progress(&controller, &SearchController::progress);
  QSignalSpy finished(&controller, &SearchController::finished);
  ASSERT_TRUE(controller.start(req));
  EXPECT_FALSE(controller.start(req));  // one search at a time
  ASSERT_TRUE(finished.wait(10000));
  EXPECT_FALSE(controller.running());
  ASSERT_GE(progress.count(), 1);
  EXPECT_EQ(progress.last().at(0).toULongLong(), progress.last().at(1).toULongLong());  // done == total
  const auto out = finished.takeFirst().at(0).value<SearchOutcome>();
  ASSERT_TRUE(out.ok()) << out.error;
  ASSERT_FALSE(out.result.plans.empty());

  // 3. The best plan: the first row once the table is sorted by step time.
  RankedPlanModel plans;
  plans.set_plans(out.result.plans, out.result.pareto);
  QSortFilterProxyModel proxy;
  proxy.setSourceModel(&plans);
  proxy.setSortRole(Qt::UserRole);
  proxy.sort(RankedPlanModel::kStepTime, Qt::AscendingOrder);
  const RankedPlan& best = plans.plan(proxy.mapToSource(proxy.index(0, 0)).row());
  for (const RankedPlan& p : out.result.plans)
    EXPECT_LE(best.prediction.step_time_s, p.prediction.step_time_s);
  PlanInputs in;
  in.model = req.model;
  in.cluster = req.cluster;
  in.plan = best.plan;
  const Evaluation e = evaluate_plan(in);
  ASSERT_TRUE(e.ok()) << e.error;
  EXPECT_EQ(e.prediction.devices, 4);

  // 4. Its timeline: simulate, write the trace, read it back -- one bar per simulated op.
  QTemporaryDir dir;
  ASSERT_TRUE(dir.isValid());
  auto sim = simulate_to_trace(in, dir.filePath(QStringLiteral("best.json")).toStdString());
  ASSERT_TRUE(sim.ok()) << sim.error().message();
  ASSERT_GT(sim->ops, 0u);
  auto t = load_timeline(sim->path);
  ASSERT_TRUE(t.ok()) << t.error().message();
  TimelineModel timeline;
  timeline.set_timeline(std::move(*t));
  EXPECT_EQ(timeline.rowCount(), static_cast<int>(sim->ops));
  // And that is every op of the lowered workload: by symmetry one rank per pipeline stage runs its
  // stage's whole program.
  auto resolved = resolve_plan(in);
  ASSERT_TRUE(resolved.ok());
  auto w = lower(resolved->model, resolved->cluster, resolved->plan);
  ASSERT_TRUE(w.ok()) << w.error().message();
  std::size_t ops = 0;
  for (const StageProgram& s : w->stages) ops += boost::num_vertices(s.graph());
  EXPECT_EQ(sim->ranks, static_cast<std::size_t>(best.plan.pp));
  EXPECT_EQ(static_cast<std::size_t>(timeline.rowCount()), ops);
  std::set<int> ranks;
  for (const TimelineLane& l : timeline.timeline().lanes) ranks.insert(l.pid);
  EXPECT_EQ(ranks.size(), sim->ranks);
  // The trace's step is the simulator's, which re-simulated plans report as their step time.
  EXPECT_DOUBLE_EQ(timeline.timeline().step_s, sim->step_s);
  if (best.simulated_step_s >= 0) {
    EXPECT_NEAR(sim->step_s, best.simulated_step_s, 1e-12);
  }
}

TEST(Flow, CancelledSearchSaysSo) {
  std::atomic<bool> cancel{true};
  SearchRequest req;  // llama3-8b on 16 H100s
  const SearchOutcome before = run_search(req, {}, &cancel);
  EXPECT_TRUE(before.cancelled);
  EXPECT_FALSE(before.ok());

  // Through the controller: cancel right after starting. The 20k-plan search reports progress
  // only after its first wave of parallel work (~0.1 s), long after cancel() ran.
  req.resimulate = 0;
  SearchController controller;
  QSignalSpy finished(&controller, &SearchController::finished);
  ASSERT_TRUE(controller.start(req));
  controller.cancel();
  ASSERT_TRUE(finished.wait(10000));
  EXPECT_TRUE(finished.takeFirst().at(0).value<SearchOutcome>().cancelled);
  // And the controller is ready for the next search.
  req.model = "tiny";
  req.cluster = "cpu-local";
  req.gpus = 2;
  req.global_batch = 4;
  ASSERT_TRUE(controller.start(req));
  ASSERT_TRUE(finished.wait(10000));
  EXPECT_TRUE(finished.takeFirst().at(0).value<SearchOutcome>().ok());
}

TEST(Flow, SearchErrorsAreReported) {
  SearchRequest req;
  req.model = "tiny";
  req.cluster = "cpu-local";
  req.gpus = 3;  // only dp = 3 multiplies to 3, and 3 replicas cannot share a global batch of 1
  req.global_batch = 1;
  const SearchOutcome out = run_search(req);
  EXPECT_FALSE(out.ok());
  EXPECT_FALSE(out.error.empty());
  req.model = "no-such-model";
  EXPECT_EQ(run_search(req).error.rfind("model: ", 0), 0u);
}

}  // namespace
}  // namespace foresight::gui
