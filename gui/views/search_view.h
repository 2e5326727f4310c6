// Search: runs the plan search for the Setup's model, cluster, device count and global batch on a
// worker thread (SearchController), with progress and cancel, and helps choose among the ranked
// plans:
// - a table with the whole plan in one line, analytic and simulated step side by side, a column
//   chooser, CSV export, a text filter and a minimum-free-memory filter (also the search's own
//   margin: plans that leave less are not searched further);
// - a plot whose axes separate plans (step time or MFU against memory free, time against cost
//   when cost is not just time), the Pareto front in the dimensions shown, axes fitted to the
//   ranked plans, the allocator margin drawn; clicking a point selects its row and back;
// - two or more selected plans compared side by side (breakdown, memory, cost), and their steps
//   simulated and drawn on one time axis (PlanTimelines).
// A chosen row is handed back to the Setup by plan_chosen().
#pragma once

#include <QWidget>
#include <utility>
#include <vector>

#include "gui/models/plan_inputs.h"
#include "gui/models/search_plot.h"
#include "gui/models/search_runner.h"

class QChart;
class QChartView;
class QComboBox;
class QDialog;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QScatterSeries;
class QSortFilterProxyModel;
class QSpinBox;
class QTableView;
class QToolButton;

namespace foresight::gui {

class PlanSideBySideModel;
class PlanTimelines;
class RankedPlanFilter;
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
  QSortFilterProxyModel* proxy() const;
  SearchController* controller() const { return controller_; }
  QTableView* table() const { return table_; }
  // For File > Export: the plot.
  std::vector<QWidget*> plots() const;
  QChart* chart() const;
  // The plot's series and their point counts ("ranked plans" -> 50, "Pareto front", "selected";
  // against cost the ranked plans are split by memory free: "10-30% free" -> 12).
  std::vector<std::pair<QString, int>> scatter_series() const;

  // The plot shown, and those the current plans offer (useful_plots).
  SearchPlot plot() const { return plot_; }
  void set_plot(SearchPlot plot);
  std::vector<SearchPlot> offered_plots() const;
  // What clicking a plotted point does: selects the plan drawn there (nothing if none is).
  void click_point(const QPointF& point);
  // Rows of the plans model selected in the table, in the table's order.
  std::vector<int> selected_plan_rows() const;

  // The minimum share of memory free: filters the table now and applies to the next search.
  void set_min_free(double share);
  double min_free() const;
  void set_column_shown(int column, bool shown);
  // The table as shown (filtered, sorted, shown columns) as CSV; export_csv writes it to a file.
  QString visible_csv() const;
  bool export_csv(const QString& path, QString* error = nullptr) const;
  // The selected plans side by side (two or more), in a window of their own.
  void compare_selected();
  const PlanSideBySideModel* side_by_side() const { return side_by_side_; }
  // Their steps simulated and drawn on one time axis, under the table (null before the first
  // comparison).
  PlanTimelines* side_by_side_timelines() const { return timelines_; }

 Q_SIGNALS:
  void plan_chosen(const foresight::Plan& plan);

 private:
  // The constructor's steps.
  void create_controls();
  void create_results();
  void create_column_menu();
  void lay_out();
  void connect_signals();
  void rebuild_plot();
  void rebuild_plot_choices();
  void selection_changed();
  void choose_selected();
  void ask_export_csv();

  PlanInputs context_;
  SearchController* controller_;
  RankedPlanModel* plans_;
  RankedPlanFilter* proxy_;
  PlanSideBySideModel* side_by_side_;
  QLabel* context_label_;
  QComboBox* objective_;
  QSpinBox* top_k_;
  QSpinBox* resimulate_;
  QDoubleSpinBox* min_free_;
  QPushButton* run_;
  QPushButton* cancel_;
  QPushButton* use_;
  QPushButton* compare_;
  QPushButton* export_;
  QToolButton* columns_;
  QProgressBar* progress_;
  QLabel* status_;
  QLineEdit* filter_;
  QTableView* table_;
  QComboBox* plot_choice_;
  QChartView* scatter_;
  QScatterSeries* selected_ = nullptr;
  QDialog* compare_window_ = nullptr;
  PlanTimelines* timelines_ = nullptr;
  SearchPlot plot_ = SearchPlot::kTimeVsFree;
  std::vector<QPointF> points_;  // per row of plans_, where the plot draws it
};

}  // namespace foresight::gui
