// Sweep: a what-if study (a sweep spec such as scenarios/*.json) run on a worker thread with
// progress and cancel, or the results file of `foresight sweep` (JSONL or CSV, alike); one row
// per point (axis values, step time, MFU, memory, cost, layout, or why it failed) in a sortable
// table, and any metric against any axis: lines on value axes (logarithmic over decades) for a
// numeric axis, bars for named values, one line or bar colour per combination of the other axes.
#pragma once

#include <QFutureWatcher>
#include <QWidget>
#include <vector>

#include "gui/models/sweep_runner.h"
#include "sim/core/status.h"

class QChart;
class QChartView;
class QLabel;
class QProgressBar;
class QComboBox;
class QHBoxLayout;
class QPushButton;
class QSortFilterProxyModel;
class QSplitter;
class QTableView;

namespace foresight::gui {

class SweepModel;

class SweepView : public QWidget {
  Q_OBJECT
 public:
  explicit SweepView(QWidget* parent = nullptr);

  void open_file(const QString& path);  // parses and checks the spec in the background
  void set_spec(SweepSpec spec);
  void start();
  void cancel();
  void show_outcome(const SweepOutcome& out);
  // A results.jsonl of `foresight sweep` (no spec needed): shown like a run's outcome.
  Status open_results(const std::string& jsonl);
  // The chart: this metric (a row key, e.g. "mfu") against this axis (an index into the axes).
  void set_chart(const std::string& metric, int axis);
  std::string chart_metric() const;
  int chart_axis() const;

  const SweepModel* model() const { return model_; }
  SweepController* controller() const { return controller_; }
  // For File > Export: the step-time chart.
  std::vector<QWidget*> plots() const;
  bool has_spec() const { return have_spec_; }
  // The spec's file ("" for none; the built-in example has no file).
  QString spec_file() const;
  QString status_text() const;
  // The header: the spec's file, points, engine, base (model, cluster, GPUs, batch, layout) and axes.
  QString header_text() const;
  QChart* chart() const;

 public Q_SLOTS:
  void open_dialog();

 private:
  // The constructor's steps: the widgets, the file bar (with its open buttons), the table over the
  // chart, and the signals of a run.
  void create_widgets();
  QHBoxLayout* file_bar();
  QSplitter* results_split();
  void connect_run();
  void rebuild_chart();
  void fill_axis_choices();

  SweepController* controller_;
  SweepModel* model_;
  QSortFilterProxyModel* proxy_;
  SweepSpec spec_;
  bool have_spec_ = false;
  QLabel* spec_label_;
  QPushButton* run_;
  QPushButton* cancel_;
  QProgressBar* progress_;
  QLabel* status_;
  QTableView* table_;
  QChartView* chart_;
  QComboBox* metric_;
  QComboBox* axis_;
  QFutureWatcher<Result<SweepSpec>> loader_;
};

}  // namespace foresight::gui
