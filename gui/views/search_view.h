// Search: runs the plan search for the Setup's model, cluster, device count and global batch on a
// worker thread (SearchController), with progress and cancel; the ranked plans in a sortable,
// filterable table and a time-vs-cost scatter with the Pareto front. A chosen row is handed back
// to the Setup by plan_chosen().
#pragma once

#include <QWidget>
#include <utility>
#include <vector>

#include "gui/models/plan_inputs.h"
#include "gui/models/search_runner.h"

class QChartView;
class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QScatterSeries;
class QSortFilterProxyModel;
class QSpinBox;
class QTableView;

namespace foresight::gui {

class RankedPlanModel;

class SearchView : public QWidget {
  Q_OBJECT
 public:
  explicit SearchView(QWidget* parent = nullptr);

  // The model, cluster, device count and global batch to search for (from the Setup).
  void set_context(const PlanInputs& in);
  SearchRequest request() const;
  void start();
  void cancel();
  // Shows a finished search (also used directly by the screenshot mode and the tests).
  void show_outcome(const SearchOutcome& out);
  void select_row(int proxy_row);

  const RankedPlanModel* plans() const { return plans_; }
  QSortFilterProxyModel* proxy() const { return proxy_; }
  SearchController* controller() const { return controller_; }
  // For File > Export: the time-cost scatter.
  std::vector<QWidget*> plots() const;
  // The scatter's series and their point counts ("10-30% free" -> 12, "Pareto front", "selected"):
  // ranked plans are split by memory headroom.
  std::vector<std::pair<QString, int>> scatter_series() const;

 Q_SIGNALS:
  void plan_chosen(const foresight::Plan& plan);

 private:
  // The constructor's steps.
  void create_controls();
  void create_results();
  void lay_out();
  void connect_signals();
  void rebuild_scatter(const SearchOutcome& out);
  void selection_changed();
  void choose_selected();

  PlanInputs context_;
  SearchController* controller_;
  RankedPlanModel* plans_;
  QSortFilterProxyModel* proxy_;
  QLabel* context_label_;
  QComboBox* objective_;
  QSpinBox* top_k_;
  QSpinBox* resimulate_;
  QPushButton* run_;
  QPushButton* cancel_;
  QPushButton* use_;
  QProgressBar* progress_;
  QLabel* status_;
  QLineEdit* filter_;
  QTableView* table_;
  QChartView* scatter_;
  QScatterSeries* selected_ = nullptr;
};

}  // namespace foresight::gui
