// Sweep view: spec loading, run/cancel, results table and chart.
#include "gui/views/sweep_view.h"

#include <QtCharts/QBarCategoryAxis>
#include <QtCharts/QBarSeries>
#include <QtCharts/QBarSet>
#include <QtCharts/QChart>
#include <QtCharts/QChartView>
#include <QtCharts/QValueAxis>

#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include <cmath>

#include "gui/models/format.h"
#include "gui/models/sweep_model.h"
#include "gui/views/tables.h"

namespace foresight::gui {

namespace {
// More bars than this do not read as a chart; the table still has every point.
constexpr int kMaxBars = 48;
}  // namespace

SweepView::SweepView(QWidget* parent) : QWidget(parent) {
  controller_ = new SweepController(this);
  model_ = new SweepModel(this);
  proxy_ = new QSortFilterProxyModel(this);
  proxy_->setSourceModel(model_);
  proxy_->setSortRole(Qt::UserRole);

  auto* open = new QPushButton(tr("Open sweep spec..."));
  open->setToolTip(tr("a sweep spec such as scenarios/*.json (see `foresight sweep --help`)"));
  spec_label_ = new QLabel(tr("No sweep loaded."));
  spec_label_->setWordWrap(true);
  run_ = new QPushButton(tr("Run"));
  run_->setEnabled(false);
  cancel_ = new QPushButton(tr("Cancel"));
  cancel_->setEnabled(false);
  progress_ = new QProgressBar;
  progress_->setRange(0, 1);
  progress_->setValue(0);
  status_ = new QLabel;
  status_->setWordWrap(true);
  table_ = new QTableView;
  table_->setModel(proxy_);
  table_->setSortingEnabled(true);
  table_->sortByColumn(-1, Qt::AscendingOrder);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  make_compact(table_);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setStretchLastSection(true);
  auto* chart = new QChart;
  chart->setAnimationOptions(QChart::NoAnimation);
  chart->legend()->hide();
  chart_ = new QChartView(chart);
  chart_->setRenderHint(QPainter::Antialiasing);

  auto* bar = new QHBoxLayout;
  bar->addWidget(open);
  bar->addWidget(run_);
  bar->addWidget(cancel_);
  bar->addWidget(progress_, 1);
  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(table_);
  split->addWidget(chart_);
  split->setSizes({330, 370});
  auto* top = new QVBoxLayout(this);
  top->addWidget(spec_label_);
  top->addLayout(bar);
  top->addWidget(status_);
  top->addWidget(split, 1);

  connect(open, &QPushButton::clicked, this, &SweepView::open_dialog);
  connect(run_, &QPushButton::clicked, this, &SweepView::start);
  connect(cancel_, &QPushButton::clicked, this, &SweepView::cancel);
  connect(controller_, &SweepController::progress, this, [this](quint64 done, quint64 total) {
    progress_->setRange(0, static_cast<int>(std::max<quint64>(1, total)));
    progress_->setValue(static_cast<int>(done));
    progress_->setFormat(tr("%1 / %2 points").arg(done).arg(total));
  });
  connect(controller_, &SweepController::finished, this, &SweepView::show_outcome);
  connect(&loader_, &QFutureWatcher<Result<SweepSpec>>::finished, this, [this] {
    Result<SweepSpec> r = loader_.result();
    if (!r) {
      status_->setStyleSheet(QStringLiteral("color: #c62828;"));
      status_->setText(qstr(r.error().message()).toHtmlEscaped());
      return;
    }
    set_spec(std::move(*r));
  });
}

void SweepView::open_dialog() {
  const QString path =
      QFileDialog::getOpenFileName(this, tr("Open a sweep spec"), QString(), tr("Sweep specs (*.json);;All files (*)"));
  if (!path.isEmpty()) open_file(path);
}

void SweepView::open_file(const QString& path) {
  if (loader_.isRunning() || controller_->running()) return;
  status_->setStyleSheet(QString());
  status_->setText(tr("Checking %1...").arg(path));
  loader_.setFuture(QtConcurrent::run([p = path.toStdString()] { return load_sweep(p); }));
}

void SweepView::set_spec(SweepSpec spec) {
  spec_ = std::move(spec);
  have_spec_ = true;
  QStringList axes;
  for (const auto& [pointer, values] : spec_.axes) axes << tr("%1 (%2 values)").arg(qstr(pointer)).arg(values.size());
  spec_label_->setText(tr("<b>%1</b>: %2 points, %3 engine; axes: %4")
                           .arg(QFileInfo(qstr(spec_.file)).fileName().toHtmlEscaped())
                           .arg(spec_.points.size())
                           .arg(qstr(spec_.engine))
                           .arg(axes.join(QStringLiteral(", ")).toHtmlEscaped()));
  status_->setStyleSheet(QString());
  status_->setText(tr("Every point checked; press Run."));
  run_->setEnabled(!controller_->running());
}

std::vector<QWidget*> SweepView::plots() const { return {chart_}; }

QString SweepView::spec_file() const { return have_spec_ ? qstr(spec_.file) : QString(); }

void SweepView::start() {
  if (!have_spec_ || !controller_->start(spec_)) return;
  run_->setEnabled(false);
  cancel_->setEnabled(true);
  progress_->setRange(0, 0);
  status_->setStyleSheet(QString());
  status_->setText(tr("Running %1 points...").arg(spec_.points.size()));
}

void SweepView::cancel() {
  controller_->cancel();
  status_->setText(tr("Cancelling after the points in progress..."));
}

void SweepView::show_outcome(const SweepOutcome& out) {
  run_->setEnabled(have_spec_);
  cancel_->setEnabled(false);
  int ok = 0, failed = 0, missing = 0;
  for (const auto& row : out.rows) {
    if (row.is_null()) ++missing;
    else if (row.value("ok", false)) ++ok;
    else ++failed;
  }
  progress_->setRange(0, static_cast<int>(std::max<std::size_t>(1, out.rows.size())));
  progress_->setValue(ok + failed);
  progress_->setFormat(out.cancelled ? tr("cancelled") : tr("done"));
  status_->setStyleSheet(QString());
  status_->setText(tr("%1 points in %2: %3 predicted, %4 failed (the reason is in the Error column)%5.")
                       .arg(out.rows.size())
                       .arg(seconds_text(out.wall_s))
                       .arg(ok)
                       .arg(failed)
                       .arg(out.cancelled ? tr(", %1 not evaluated (cancelled)").arg(missing) : QString()));
  model_->set_outcome(out);
  rebuild_chart();
}

QString SweepView::status_text() const { return status_->text(); }

void SweepView::rebuild_chart() {
  QChart* c = chart_->chart();
  c->removeAllSeries();
  for (QAbstractAxis* a : c->axes()) {
    c->removeAxis(a);
    delete a;
  }
  auto* set = new QBarSet(tr("step time"));
  set->setColor(QColor(0x1f, 0x77, 0xb4));
  QStringList categories;
  double longest = 0;
  for (int r = 0; r < model_->rowCount() && categories.size() < kMaxBars; ++r) {
    const double s = model_->step_time(r);
    if (std::isnan(s)) continue;
    *set << s;
    longest = std::max(longest, s);
    categories << model_->point_label(r);
  }
  QStringList titles;
  for (const std::string& p : model_->outcome().axes) titles << axis_title(p);
  c->setTitle(categories.isEmpty() ? QString()
                                   : tr("Step time per point (%1)%2")
                                         .arg(titles.join(QStringLiteral(", ")))
                                         .arg(categories.size() == kMaxBars ? tr(", first %1").arg(kMaxBars) : QString()));
  if (categories.isEmpty()) {
    delete set;
    return;
  }
  auto* series = new QBarSeries;
  series->append(set);
  c->addSeries(series);
  auto* x = new QBarCategoryAxis;
  x->append(categories);
  if (categories.size() > 12) x->setLabelsAngle(-60);
  c->addAxis(x, Qt::AlignBottom);
  series->attachAxis(x);
  auto* y = new QValueAxis;
  y->setRange(0, longest * 1.1);
  y->applyNiceNumbers();
  y->setTitleText(tr("seconds per step"));
  y->setLabelFormat(QStringLiteral("%.3g"));
  c->addAxis(y, Qt::AlignLeft);
  series->attachAxis(y);
}

}  // namespace foresight::gui
