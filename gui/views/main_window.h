// The main window: one tab per view (Setup, Plan details, Search, Timeline, Compare, Sweep,
// Topology) and the
// wiring between them -- Setup's inputs are evaluated (analytic, microseconds) and shown in Setup
// and Details; Search searches the Setup's job and hands a chosen plan back to Setup; Setup's
// "Simulate" writes a trace on a worker thread and opens it in Timeline, its link utilisation in
// Topology.
#pragma once

#include <QFutureWatcher>
#include <QMainWindow>
#include <QTemporaryDir>
#include <optional>
#include <vector>

#include "gui/models/plan_inputs.h"
#include "gui/models/session.h"
#include "gui/models/traces.h"
#include "gui/models/view_names.h"

class QAction;
class QKeySequence;
class QTabWidget;

namespace foresight::gui {

class CompareView;
class DetailsView;
class SearchView;
class SetupView;
class SweepView;
class TimelineView;
class TopologyView;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);

  void show_view(View v);
  View current_view() const;
  void set_inputs(const PlanInputs& in);
  const Evaluation& evaluation() const { return evaluation_; }

  // The session on screen: the Setup's inputs, the files the user opened (traces simulated into
  // the window's temporary folder are left out: they vanish with the window) and the view.
  Session session() const;
  // Fills the views from `s` (files load in the background, as when opened by hand).
  void apply_session(const Session& s);
  Status open_session(const QString& path);
  Status save_session(const QString& path);

  // The menu action bound to a shortcut (tests; null if none).
  QAction* action_for(const QKeySequence& keys) const;

  // The plots of a view (charts, Gantt charts, the topology picture); none for Setup.
  std::vector<QWidget*> plots(View v) const;
  // Writes the current view's plots to a .png or .svg file.
  Status export_current(const QString& path) const;

  SetupView* setup() const { return setup_; }
  DetailsView* details() const { return details_; }
  SearchView* search() const { return search_; }
  TimelineView* timeline() const { return timeline_; }
  CompareView* compare() const { return compare_; }
  SweepView* sweep() const { return sweep_; }
  TopologyView* topology() const { return topology_; }

 private:
  // The constructor's steps: the views in tabs, the File and View menus, the wiring between views.
  void create_tabs();
  void build_file_menu();
  void build_view_menu();
  void connect_views();
  void export_dialog();  // File > Export plot: asks for a file, writes the current view's plots
  void evaluate(const PlanInputs& in);
  void simulate_current();
  void save_to(const QString& path);  // saves, remembers the path, says so (or why not) in the window

  QTabWidget* tabs_;
  SetupView* setup_;
  DetailsView* details_;
  SearchView* search_;
  TimelineView* timeline_;
  CompareView* compare_;
  SweepView* sweep_;
  TopologyView* topology_;
  Evaluation evaluation_;
  QString session_path_;      // where File > Save session writes; set by Open and Save as
  QTemporaryDir traces_dir_;  // traces simulated from the Setup live here until the window closes
  int simulations_ = 0;
  QFutureWatcher<Result<SimulatedTrace>> simulation_;
};

}  // namespace foresight::gui
