// Main window: tabs and the wiring between the views.
#include "gui/views/main_window.h"

#include <QApplication>
#include <QFileDialog>
#include <QFileInfo>
#include <QMenuBar>
#include <QMessageBox>
#include <QStatusBar>
#include <QTabWidget>
#include <QtConcurrent/QtConcurrentRun>

#include "gui/models/export_format.h"
#include "gui/models/format.h"
#include "gui/models/timeline_model.h"
#include "gui/views/compare_view.h"
#include "gui/views/details_view.h"
#include "gui/views/plot_export.h"
#include "gui/views/search_view.h"
#include "gui/views/setup_view.h"
#include "gui/views/sweep_view.h"
#include "gui/views/timeline_view.h"
#include "gui/views/topology_view.h"

namespace foresight::gui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(tr("Foresight"));
  create_tabs();
  build_file_menu();
  build_view_menu();
  connect_views();
}

void MainWindow::create_tabs() {
  tabs_ = new QTabWidget;
  setup_ = new SetupView;
  details_ = new DetailsView;
  search_ = new SearchView;
  timeline_ = new TimelineView;
  compare_ = new CompareView;
  sweep_ = new SweepView;
  topology_ = new TopologyView;
  // Tab order = View's order.
  tabs_->addTab(setup_, tr("Setup"));
  tabs_->addTab(details_, tr("Plan details"));
  tabs_->addTab(search_, tr("Search"));
  tabs_->addTab(timeline_, tr("Timeline"));
  tabs_->addTab(compare_, tr("Compare"));
  tabs_->addTab(sweep_, tr("Sweep"));
  tabs_->addTab(topology_, tr("Topology"));
  setCentralWidget(tabs_);
}

// Shortcuts: the session is the document (Ctrl+O, Ctrl+S, Ctrl+Shift+S), Ctrl+E exports the
// current view's plots, Ctrl+Q quits.
void MainWindow::build_file_menu() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&Open session..."), QKeySequence::Open, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open a session"), QString(),
                                                      tr("Foresight sessions (*.json);;All files (*)"));
    if (path.isEmpty()) return;
    if (const Status s = open_session(path); !s)
      QMessageBox::warning(this, tr("Open session"), qstr(s.error().message()));
  });
  auto save_as = [this] {
    QString path =
        QFileDialog::getSaveFileName(this, tr("Save the session"),
                                     session_path_.isEmpty() ? QStringLiteral("session.json") : session_path_,
                                     tr("Foresight sessions (*.json)"));
    if (path.isEmpty()) return;
    if (QFileInfo(path).suffix().isEmpty()) path += QStringLiteral(".json");
    save_to(path);
  };
  file->addAction(tr("&Save session"), QKeySequence::Save, this, [this, save_as] {
    if (session_path_.isEmpty())
      save_as();
    else
      save_to(session_path_);
  });
  file->addAction(tr("Save session &as..."), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_S), this, save_as);
  file->addSeparator();
  file->addAction(tr("Open &trace..."), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O), this, [this] {
    show_view(View::kTimeline);
    timeline_->open_dialog();
  });
  file->addAction(tr("&Compare traces..."), this, [this] { show_view(View::kCompare); });
  file->addAction(tr("Open s&weep spec..."), this, [this] {
    show_view(View::kSweep);
    sweep_->open_dialog();
  });
  file->addSeparator();
  file->addAction(tr("&Export plot..."), QKeySequence(Qt::CTRL | Qt::Key_E), this,
                  [this] { export_dialog(); });
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence(Qt::CTRL | Qt::Key_Q), qApp, &QApplication::quit);
}

void MainWindow::export_dialog() {
  if (plots(current_view()).empty()) {
    statusBar()->showMessage(tr("The %1 view has no plot to export").arg(view_name(current_view())), 5000);
    return;
  }
  QString filters = tr("PNG image (*.png)");
  if (svg_export_available()) filters += tr(";;SVG image (*.svg)");
  QString selected;
  QString path = QFileDialog::getSaveFileName(
      this, tr("Export plot"), view_name(current_view()) + QStringLiteral(".png"), filters, &selected);
  if (path.isEmpty()) return;
  if (QFileInfo(path).suffix().isEmpty())
    path += selected.contains(QStringLiteral("svg")) ? QStringLiteral(".svg") : QStringLiteral(".png");
  if (const Status s = export_current(path); !s)
    QMessageBox::warning(this, tr("Export plot"), qstr(s.error().message()));
  else
    statusBar()->showMessage(tr("Exported to %1").arg(path), 5000);
}

// Ctrl+1..7 select the views in tab order.
void MainWindow::build_view_menu() {
  QMenu* views = menuBar()->addMenu(tr("&View"));
  for (View v : kAllViews) {
    const int i = static_cast<int>(v);
    views->addAction(tabs_->tabText(i), QKeySequence(Qt::CTRL | static_cast<Qt::Key>(Qt::Key_1 + i)), this,
                     [this, v] { show_view(v); });
  }
}

void MainWindow::connect_views() {
  connect(setup_, &SetupView::inputs_changed, this, &MainWindow::evaluate);
  connect(setup_, &SetupView::simulate_requested, this, &MainWindow::simulate_current);
  connect(search_, &SearchView::plan_chosen, this, [this](const Plan& plan) {
    PlanInputs in = evaluation_.inputs;
    in.plan = plan;
    set_inputs(in);
    show_view(View::kDetails);
    statusBar()->showMessage(tr("Plan %1 copied to Setup").arg(layout_text(plan)), 5000);
  });
  connect(timeline_, &TimelineView::loaded, this,
          [this] { statusBar()->showMessage(tr("Trace loaded"), 3000); });
  connect(&simulation_, &QFutureWatcher<Result<SimulatedTrace>>::finished, this, [this] {
    Result<SimulatedTrace> r = simulation_.result();
    if (!r) {
      statusBar()->showMessage(tr("Simulation failed: %1").arg(qstr(r.error().message())));
      return;
    }
    statusBar()->showMessage(
        tr("Simulated: step %1, %2 ops on %3 ranks").arg(seconds_text(r->step_s)).arg(r->ops).arg(r->ranks),
        5000);
    topology_->set_link_report({r->inputs, r->cluster, r->busiest_links, r->step_s});
    timeline_->open_file(qstr(r->path));
    show_view(View::kTimeline);
  });
}

void MainWindow::show_view(View v) { tabs_->setCurrentIndex(static_cast<int>(v)); }

View MainWindow::current_view() const { return static_cast<View>(tabs_->currentIndex()); }

void MainWindow::set_inputs(const PlanInputs& in) { setup_->set_inputs(in); }

Session MainWindow::session() const {
  Session s;
  s.inputs = evaluation_.inputs;
  s.view = current_view();
  // Only files the user opened and that still exist.
  const QString scratch =
      traces_dir_.isValid() ? QFileInfo(traces_dir_.path()).canonicalFilePath() : QString();
  auto keep = [&](const QString& path) -> std::string {
    const QFileInfo info(path);
    if (path.isEmpty() || !info.isFile()) return {};
    const QString canonical = info.canonicalFilePath();
    if (!scratch.isEmpty() && canonical.startsWith(scratch + QLatin1Char('/'))) return {};
    return canonical.toStdString();
  };
  s.trace = keep(qstr(timeline_->model()->timeline().file));
  s.predicted = keep(compare_->predicted_path());
  s.measured = keep(compare_->measured_path());
  if (s.predicted.empty() || s.measured.empty()) {
    s.predicted.clear();
    s.measured.clear();
  }
  s.sweep = keep(sweep_->spec_file());
  return s;
}

void MainWindow::apply_session(const Session& s) {
  set_inputs(s.inputs);
  if (!s.trace.empty()) timeline_->open_file(qstr(s.trace));
  if (!s.predicted.empty() && !s.measured.empty()) {
    compare_->set_files(qstr(s.predicted), qstr(s.measured));
    compare_->compare();
  }
  if (!s.sweep.empty()) sweep_->open_file(qstr(s.sweep));
  show_view(s.view);
}

Status MainWindow::open_session(const QString& path) {
  FS_ASSIGN_OR_RETURN(Session s, load_session(path.toStdString()));
  apply_session(s);
  session_path_ = path;
  statusBar()->showMessage(tr("Session %1 opened").arg(path), 5000);
  return Status::Ok();
}

Status MainWindow::save_session(const QString& path) {
  return gui::save_session(session(), path.toStdString());
}

void MainWindow::save_to(const QString& path) {
  if (const Status s = save_session(path); !s) {
    QMessageBox::warning(this, tr("Save session"), qstr(s.error().message()));
    return;
  }
  session_path_ = path;
  statusBar()->showMessage(tr("Session saved to %1").arg(path), 5000);
}

QAction* MainWindow::action_for(const QKeySequence& keys) const {
  for (QAction* a : findChildren<QAction*>())
    if (a->shortcut() == keys) return a;
  return nullptr;
}

std::vector<QWidget*> MainWindow::plots(View v) const {
  switch (v) {
    case View::kSetup:
      return {};
    case View::kDetails:
      return details_->plots();
    case View::kSearch:
      return search_->plots();
    case View::kTimeline:
      return timeline_->plots();
    case View::kCompare:
      return compare_->plots();
    case View::kSweep:
      return sweep_->plots();
    case View::kTopology:
      return topology_->plots();
  }
  return {};
}

Status MainWindow::export_current(const QString& path) const {
  const Status s = export_plots(plots(current_view()), path);
  if (!s) return s.error().with_context(view_name(current_view()).toStdString());
  return s;
}

void MainWindow::evaluate(const PlanInputs& in) {
  // Closed-form: microseconds, so it runs here rather than on a worker thread.
  evaluation_ = evaluate_plan(in);
  setup_->show_evaluation(evaluation_);
  details_->set_evaluation(evaluation_);
  search_->set_context(in);
  topology_->set_evaluation(evaluation_);
}

void MainWindow::simulate_current() {
  if (simulation_.isRunning() || !traces_dir_.isValid()) return;
  const std::string path =
      traces_dir_.filePath(QStringLiteral("simulated-%1.json").arg(++simulations_)).toStdString();
  statusBar()->showMessage(tr("Simulating one step..."));
  timeline_->show_busy(tr("Simulating one step of the Setup's plan with the discrete-event simulator..."));
  simulation_.setFuture(
      QtConcurrent::run([in = evaluation_.inputs, path] { return simulate_to_trace(in, path); }));
}

}  // namespace foresight::gui
