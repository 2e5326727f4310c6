// Plan details: the analytic Prediction of the Setup's plan -- step time by category, memory per
// device by category for every pipeline stage against the device's capacity (a dashed line, which
// a plan that does not fit runs past), MFU, throughput and cost.
#pragma once

#include <QWidget>
#include <vector>

#include "gui/models/plan_inputs.h"

class QChart;
class QChartView;
class QGridLayout;
class QLabel;
class QTableView;

namespace foresight::gui {

class BreakdownModel;

class DetailsView : public QWidget {
  Q_OBJECT
 public:
  explicit DetailsView(QWidget* parent = nullptr);

  void set_evaluation(const Evaluation& e);

  const BreakdownModel* time_model() const { return time_; }
  // For File > Export: the step-time and memory charts.
  std::vector<QWidget*> plots() const;
  // The memory chart: a bar per pipeline stage against the capacity line.
  QChart* memory_chart() const;
  // "Likely 33.1 s to 45.0 s per step: published runs of its class ...": the validation's error
  // band of the plan's class (error_band.h).
  QString band_text() const;

 private:
  void rebuild_time_chart();
  void rebuild_memory_chart(const Prediction& p, const std::vector<MemoryBreakdown>& stages);

  BreakdownModel* time_;
  BreakdownModel* memory_;
  QLabel* title_;
  QLabel* message_;
  QLabel* band_;
  QGridLayout* figures_;
  QList<QLabel*> figure_values_;
  QChartView* time_chart_;
  QChartView* memory_chart_;
  QTableView* time_table_;
  QTableView* memory_table_;
};

}  // namespace foresight::gui
