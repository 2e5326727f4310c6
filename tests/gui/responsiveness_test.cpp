// The GUI thread keeps turning its event loop while a search runs on SearchController's worker:
// a StallProbe timer on this thread ticks throughout. Nothing here is about time -- timings belong
// to foresight-gui-stall-bench, not to tests -- only that the loop ran during the search, and that
// a blocked loop shows as one gap spanning the whole run.
#include <gtest/gtest.h>

#include <QEventLoop>
#include <QSignalSpy>
#include <QThread>
#include <QTimer>

#include "gui/models/search_runner.h"
#include "gui/models/stall_probe.h"

namespace foresight::gui {
namespace {

TEST(Responsiveness, EventLoopTicksWhileTheWorkerSearches) {
  SearchRequest req;  // llama3-8b on 16 H100s: a few hundred candidates, five re-simulated
  StallProbe probe(std::chrono::milliseconds(1));
  SearchController controller;
  QSignalSpy progress(&controller, &SearchController::progress);
  QEventLoop loop;
  SearchOutcome outcome;
  QObject::connect(&controller, &SearchController::finished, &loop, [&](const SearchOutcome& out) {
    outcome = out;
    loop.quit();
  });
  probe.start();
  ASSERT_TRUE(controller.start(req));
  QTimer::singleShot(60000, &loop, &QEventLoop::quit);  // a hung search fails below, not forever
  loop.exec();
  probe.stop();
  ASSERT_TRUE(outcome.ok()) << outcome.error;
  EXPECT_GT(progress.count(), 0);  // queued from the worker: delivered by this thread's loop
  EXPECT_GT(probe.ticks(), 0);
}

TEST(Responsiveness, ProbeSeesABlockedLoop) {
  StallProbe probe(std::chrono::milliseconds(1));
  probe.start();
  QThread::msleep(50);  // the loop cannot tick while this thread sleeps
  probe.stop();
  EXPECT_EQ(probe.ticks(), 0);
  // No tick: the whole run was one gap.
  EXPECT_EQ(probe.max_gap_ms(), probe.elapsed_ms());
  EXPECT_GT(probe.max_gap_ms(), 0);
}

}  // namespace
}  // namespace foresight::gui
