// Compare: a predicted trace against a measured one, aligned op by op (compare.h) -- the step-time
// error, the error per op kind, the ops that differ most, and both timelines on one shared,
// synchronised time axis. Loading and alignment run on a worker thread.
#pragma once

#include <QFutureWatcher>
#include <QWidget>
#include <vector>

#include "gui/models/comparison.h"
#include "sim/core/status.h"

class QLabel;
class QPushButton;
class QTableView;

namespace foresight::gui {

class CompareKindModel;
class TimelineModel;
class TimelineWidget;
class WorstOpsModel;

class CompareView : public QWidget {
  Q_OBJECT
 public:
  explicit CompareView(QWidget* parent = nullptr);

  void set_files(const QString& predicted, const QString& measured);
  // Loads and compares the two files in the background.
  void compare();
  void set_comparison(Comparison c);
  void show_error(const QString& message);

  const CompareKindModel* kinds() const { return kinds_; }
  const WorstOpsModel* worst() const { return worst_; }
  const TimelineModel* predicted_timeline() const { return predicted_; }
  const TimelineModel* measured_timeline() const { return measured_; }
  QString summary_text() const;
  QString measured_title() const;
  // For File > Export: both Gantt charts, one above the other.
  std::vector<QWidget*> plots() const;
  QString predicted_path() const { return predicted_path_; }
  QString measured_path() const { return measured_path_; }

 Q_SIGNALS:
  void compared();

 private:
  QString predicted_path_, measured_path_;
  CompareKindModel* kinds_;
  WorstOpsModel* worst_;
  TimelineModel* predicted_;
  TimelineModel* measured_;
  QLabel* predicted_label_;
  QLabel* measured_label_;
  QPushButton* compare_;
  QLabel* summary_;
  QLabel* measured_title_ = nullptr;  // "Measured", or what kind of measurement it is
  TimelineWidget* predicted_gantt_;
  TimelineWidget* measured_gantt_;
  QFutureWatcher<Result<Comparison>> watcher_;
};

}  // namespace foresight::gui
