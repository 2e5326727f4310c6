// Timelines of several plans on one time axis: each plan simulated with the discrete-event
// simulator on a worker thread (one rank per pipeline stage, as the Setup's "Simulate" does), its
// trace drawn as a Gantt under a line naming the plan and its simulated step. Zooming or panning
// any chart moves the others, so the plans' steps compare by length and by what fills them.
// Search's "Compare selected" shows the chosen plans this way under their side-by-side table.
//
//   PlanTimelines t;
//   t.set_plans({a, b});              // PlanInputs each; simulations start at once
//   connect(&t, &PlanTimelines::ready, ...);
#pragma once

#include <QFutureWatcher>
#include <QTemporaryDir>
#include <QWidget>
#include <memory>
#include <vector>

#include "gui/models/plan_inputs.h"
#include "gui/models/timeline.h"
#include "sim/core/status.h"

class QLabel;
class QVBoxLayout;

namespace foresight::gui {

class TimelineModel;
class TimelineWidget;

class PlanTimelines : public QWidget {
  Q_OBJECT
 public:
  explicit PlanTimelines(QWidget* parent = nullptr);
  ~PlanTimelines() override;

  // Replaces the plans shown; their simulations start now (a previous set's still running are
  // dropped when they finish).
  void set_plans(const std::vector<PlanInputs>& plans);

  bool busy() const { return pending_ > 0; }
  int count() const { return static_cast<int>(rows_.size()); }
  // Plan i's line ("tp8 pp2 dp4 | mb1 | ZeRO-1: simulated step 2.31 s, 3,635 ops"; or why it could not be
  // simulated) and its chart (null while it simulates or when it failed).
  QString label(int i) const;
  TimelineWidget* chart(int i) const;
  // Plan i's simulated step in seconds (0 while it simulates or when it failed).
  double step_s(int i) const;
  QString status_text() const;

 Q_SIGNALS:
  // Every plan of the current set is simulated (or failed).
  void ready();

 private:
  struct Row;
  void finished(int index, const Result<Timeline>& r);
  void share_range();

  std::unique_ptr<QTemporaryDir> dir_;
  std::vector<std::unique_ptr<Row>> rows_;
  QVBoxLayout* charts_;
  QLabel* status_;
  int generation_ = 0;
  int pending_ = 0;
};

}  // namespace foresight::gui
