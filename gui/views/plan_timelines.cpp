#include "gui/views/plan_timelines.h"

#include <QFile>
#include <QLabel>
#include <QLocale>
#include <QScrollArea>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>
#include <algorithm>
#include <cmath>

#include "gui/models/format.h"
#include "gui/models/timeline_model.h"
#include "gui/models/traces.h"
#include "gui/views/timeline_widget.h"

namespace foresight::gui {

// One plan's line, chart and simulation. Its widgets and model go with it; so does its watcher,
// so a replaced set's simulations report to nobody.
struct PlanTimelines::Row {
  QString layout;
  QLabel* label = nullptr;
  TimelineModel* model = nullptr;
  TimelineWidget* chart = nullptr;
  QFutureWatcher<Result<Timeline>> watcher;
  ~Row() {
    delete label;
    delete chart;
    delete model;
  }
};

namespace {

// Simulates `in` into `path`, reads the trace back with one rank per stage, and removes the file.
Result<Timeline> simulate_timeline(const PlanInputs& in, const std::string& path) {
  Result<SimulatedTrace> s = simulate_to_trace(in, path);
  if (!s) return s.error();
  Result<Timeline> t = load_timeline(path);
  QFile::remove(QString::fromStdString(path));
  if (!t) return t.error();
  return collapse_by_stage(*t);
}

}  // namespace

PlanTimelines::PlanTimelines(QWidget* parent) : QWidget(parent), dir_(std::make_unique<QTemporaryDir>()) {
  status_ = new QLabel;
  status_->setWordWrap(true);
  auto* inner = new QWidget;
  charts_ = new QVBoxLayout(inner);
  charts_->setContentsMargins(0, 0, 0, 0);
  charts_->addStretch(1);
  auto* scroll = new QScrollArea;
  scroll->setWidgetResizable(true);
  scroll->setWidget(inner);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(status_);
  layout->addWidget(scroll, 1);
}

PlanTimelines::~PlanTimelines() = default;

void PlanTimelines::set_plans(const std::vector<PlanInputs>& plans) {
  const int generation = ++generation_;  // names this set's trace files apart from a running set's
  rows_.clear();
  pending_ = static_cast<int>(plans.size());
  status_->setText(
      tr("Simulating %n plan(s) with the discrete-event simulator (one rank per pipeline "
         "stage), to draw their steps on one time axis...",
         nullptr, pending_));
  for (std::size_t i = 0; i < plans.size(); ++i) {
    auto row = std::make_unique<Row>();
    row->layout = plan_text(plans[i].plan);
    row->label = new QLabel(tr("%1: simulating...").arg(row->layout));
    row->model = new TimelineModel(this);
    row->chart = new TimelineWidget;
    row->chart->set_model(row->model);
    row->chart->hide();
    charts_->insertWidget(charts_->count() - 1, row->label);
    charts_->insertWidget(charts_->count() - 1, row->chart);
    const int index = static_cast<int>(i);
    connect(&row->watcher, &QFutureWatcher<Result<Timeline>>::finished, this,
            [this, index] { finished(index, rows_[index]->watcher.result()); });
    const std::string path =
        dir_->isValid()
            ? dir_->filePath(QStringLiteral("plan-%1-%2.json").arg(generation).arg(index)).toStdString()
            : std::string();
    row->watcher.setFuture(QtConcurrent::run([in = plans[i], path]() -> Result<Timeline> {
      if (path.empty()) return Error("no temporary folder for the traces");
      return simulate_timeline(in, path);
    }));
    rows_.push_back(std::move(row));
  }
  if (plans.empty()) Q_EMIT ready();
}

void PlanTimelines::finished(int index, const Result<Timeline>& r) {
  Row& row = *rows_[index];
  --pending_;
  if (r) {
    row.label->setText(
        tr("%1: simulated step %2, %3 ops")
            .arg(row.layout, seconds_text(r->step_s), QLocale().toString(qulonglong(r->bars.size()))));
    row.model->set_timeline(*r);
    row.chart->show();
  } else {
    row.label->setText(tr("%1: not simulated: %2").arg(row.layout, qstr(r.error().message())));
  }
  if (pending_ > 0) return;
  status_->setText(
      tr("Each chart is one plan's step, one rank per pipeline stage, on one time axis: "
         "zoom or pan any of them and the others follow; a double click fits its own step."));
  share_range();
  Q_EMIT ready();
}

void PlanTimelines::share_range() {
  double t0 = INFINITY, t1 = -INFINITY;
  std::vector<TimelineWidget*> shown;
  for (const auto& row : rows_) {
    if (row->model->empty()) continue;
    t0 = std::min(t0, row->model->timeline().begin_s);
    t1 = std::max(t1, row->model->timeline().end_s);
    shown.push_back(row->chart);
  }
  for (TimelineWidget* a : shown)
    for (TimelineWidget* b : shown)
      if (a != b) connect(a, &TimelineWidget::range_changed, b, &TimelineWidget::set_range);
  if (shown.empty() || !(t1 > t0)) return;
  const double pad = 0.01 * (t1 - t0);
  shown.front()->set_range(t0 - pad, t1 + pad);  // the others follow
}

QString PlanTimelines::label(int i) const { return rows_.at(i)->label->text(); }

TimelineWidget* PlanTimelines::chart(int i) const {
  const Row& row = *rows_.at(i);
  return row.model->empty() ? nullptr : row.chart;
}

double PlanTimelines::step_s(int i) const {
  const Row& row = *rows_.at(i);
  return row.model->empty() ? 0.0 : row.model->timeline().step_s;
}

QString PlanTimelines::status_text() const { return status_->text(); }

}  // namespace foresight::gui
