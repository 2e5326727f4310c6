// Main window: tabs and the wiring between the views.
#include "gui/views/main_window.h"

#include <QApplication>
#include <QFileDialog>
#include <QMenuBar>
#include <QStatusBar>
#include <QTabWidget>
#include <QtConcurrent/QtConcurrentRun>

#include "gui/models/format.h"
#include "gui/views/compare_view.h"
#include "gui/views/details_view.h"
#include "gui/views/search_view.h"
#include "gui/views/setup_view.h"
#include "gui/views/sweep_view.h"
#include "gui/views/timeline_view.h"
#include "gui/views/topology_view.h"

namespace foresight::gui {

std::optional<View> parse_view(const QString& name) {
  for (View v : {View::kSetup, View::kDetails, View::kSearch, View::kTimeline, View::kCompare, View::kSweep,
                 View::kTopology})
    if (name == view_name(v)) return v;
  return std::nullopt;
}

QString view_name(View v) {
  switch (v) {
    case View::kSetup: return QStringLiteral("setup");
    case View::kDetails: return QStringLiteral("details");
    case View::kSearch: return QStringLiteral("search");
    case View::kTimeline: return QStringLiteral("timeline");
    case View::kCompare: return QStringLiteral("compare");
    case View::kSweep: return QStringLiteral("sweep");
    case View::kTopology: return QStringLiteral("topology");
  }
  return QStringLiteral("setup");
}

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(tr("Foresight"));
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

  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&Open trace..."), QKeySequence::Open, this, [this] {
    show_view(View::kTimeline);
    timeline_->open_dialog();
  });
  file->addAction(tr("&Compare traces..."), this, [this] { show_view(View::kCompare); });
  file->addAction(tr("Open &sweep spec..."), this, [this] {
    show_view(View::kSweep);
    sweep_->open_dialog();
  });
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, qApp, &QApplication::quit);

  connect(setup_, &SetupView::inputs_changed, this, &MainWindow::evaluate);
  connect(setup_, &SetupView::simulate_requested, this, &MainWindow::simulate_current);
  connect(search_, &SearchView::plan_chosen, this, [this](const Plan& plan) {
    PlanInputs in = evaluation_.inputs;
    in.plan = plan;
    set_inputs(in);
    show_view(View::kDetails);
    statusBar()->showMessage(tr("Plan %1 copied to Setup").arg(layout_text(plan)), 5000);
  });
  connect(timeline_, &TimelineView::loaded, this, [this] { statusBar()->showMessage(tr("Trace loaded"), 3000); });
  connect(&simulation_, &QFutureWatcher<Result<SimulatedTrace>>::finished, this, [this] {
    Result<SimulatedTrace> r = simulation_.result();
    if (!r) {
      statusBar()->showMessage(tr("Simulation failed: %1").arg(qstr(r.error().message())));
      return;
    }
    statusBar()->showMessage(
        tr("Simulated: step %1, %2 ops on %3 ranks").arg(seconds_text(r->step_s)).arg(r->ops).arg(r->ranks), 5000);
    topology_->set_link_report({r->cluster, r->busiest_links, r->step_s});
    timeline_->open_file(qstr(r->path));
    show_view(View::kTimeline);
  });
}

void MainWindow::show_view(View v) { tabs_->setCurrentIndex(static_cast<int>(v)); }

View MainWindow::current_view() const { return static_cast<View>(tabs_->currentIndex()); }

void MainWindow::set_inputs(const PlanInputs& in) { setup_->set_inputs(in); }

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
  simulation_.setFuture(
      QtConcurrent::run([in = evaluation_.inputs, path] { return simulate_to_trace(in, path); }));
}

}  // namespace foresight::gui
