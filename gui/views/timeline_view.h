// Timeline: a Chrome trace (from `foresight simulate --trace`, `foresight run --trace` or the
// Setup's "Simulate" button) as a Gantt per rank and stream (a measured trace's rank clocks
// aligned on their shared collectives), with what the visible range holds (time by kind and by
// stream, exposed communication) and the ops in view in a sortable table below; selecting a row
// zooms the Gantt to that op. Files load on a worker thread.
#pragma once

#include <QFutureWatcher>
#include <QWidget>
#include <vector>

#include "gui/models/timeline.h"
#include "sim/core/status.h"

class QCheckBox;
class QLabel;
class QLineEdit;
class QSortFilterProxyModel;
class QTableView;
class QTimer;

namespace foresight::gui {

class TimelineModel;
class TimelineWidget;

class TimelineView : public QWidget {
  Q_OBJECT
 public:
  explicit TimelineView(QWidget* parent = nullptr);

  // Loads a trace file in the background; loaded() or the error message follow.
  void open_file(const QString& path);
  void set_timeline(Timeline t);
  void show_error(const QString& message);
  // Selects op `bar` (an index into timeline().bars) in the table; the Gantt zooms to it.
  void focus_bar(std::size_t bar);
  // Shows one rank per pipeline stage (collapse_by_stage) or every rank.
  void set_collapsed(bool on);
  // Says what is being made while a trace is on its way (the Setup's simulation).
  void show_busy(const QString& message);
  // Re-filters the op table to the chart's range and re-sums the range (zoom and pan do this
  // after a short rest).
  void refresh_range();
  QString info_text() const;
  QString range_text() const;  // "In view 0 s to 35.2 s (35.2 s): by kind gemm 22.9 s, ..."
  int table_rows() const;

  const TimelineModel* model() const { return model_; }
  TimelineWidget* gantt() const { return gantt_; }
  // For File > Export: the Gantt chart.
  std::vector<QWidget*> plots() const;

 public Q_SLOTS:
  void open_dialog();

 Q_SIGNALS:
  void loaded();

 private:
  TimelineModel* model_;
  QSortFilterProxyModel* proxy_;
  TimelineWidget* gantt_;
  QLabel* info_;
  QLineEdit* filter_;
  QCheckBox* collapse_;
  QCheckBox* critical_;
  QCheckBox* in_view_;
  QLabel* stats_;
  QTimer* refresh_;
  Timeline full_;  // the trace as loaded (the model may hold it collapsed)
  QTableView* table_;
  bool following_chart_ = false;  // the table selects the chart's clicked bar: do not zoom to it
  QFutureWatcher<Result<Timeline>> watcher_;
};

}  // namespace foresight::gui
