// Sweep view: spec loading, run/cancel, results table and chart.
#include "gui/views/sweep_view.h"

#include <QComboBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>
#include <QtCharts/QBarCategoryAxis>
#include <QtCharts/QBarSeries>
#include <QtCharts/QBarSet>
#include <QtCharts/QChart>
#include <QtCharts/QChartView>
#include <QtCharts/QLineSeries>
#include <QtCharts/QValueAxis>
#include <QtConcurrent/QtConcurrentRun>
#include <cmath>

#include "gui/models/format.h"
#include "gui/models/search_plot.h"
#include "gui/models/sweep_model.h"
#include "gui/views/chart_axes.h"
#include "gui/views/tables.h"

namespace foresight::gui {

namespace {
// More bars than this do not read as a chart; the table still has every point.
constexpr int kMaxBars = 48;
constexpr int kMaxSeries = 8;
// The metrics a chart can show: row key and title.
constexpr std::pair<const char*, const char*> kMetrics[] = {{"step_time_s", "step time (s)"},
                                                            {"tokens_per_s", "tokens/s"},
                                                            {"mfu", "MFU"},
                                                            {"memory_gib", "memory per device (GiB)"},
                                                            {"exposed_comm_s", "exposed communication (s)"},
                                                            {"bubble_s", "pipeline bubble (s)"},
                                                            {"dp_comm_s", "data-parallel communication (s)"},
                                                            {"cost_per_mtok_usd", "$ per million tokens"},
                                                            {"energy_per_mtok_kwh", "kWh per million tokens"},
                                                            {"effective_time", "effective training time"}};

// A numeric axis: one line per combination of the other axes (`names`, the first few), on value
// axes (logarithmic where the values span decades: 8 to 2,048 GPUs); a failed point leaves a gap.
void add_lines(QChart* c, const SweepChart& data, const std::vector<QString>& names, std::size_t cats,
               const QString& x_title, const QString& y_title) {
  std::vector<double> xs(data.x.begin(), data.x.begin() + static_cast<std::ptrdiff_t>(cats)), ys;
  std::vector<QLineSeries*> lines;
  for (std::size_t i = 0; i < names.size(); ++i) {
    auto* line = new QLineSeries;
    line->setName(names[i]);
    line->setPointsVisible(true);
    for (std::size_t j = 0; j < cats; ++j) {
      const double v = data.values[i][j];
      if (std::isnan(v)) continue;
      line->append(data.x[j], v);
      ys.push_back(v);
    }
    c->addSeries(line);
    lines.push_back(line);
  }
  if (ys.empty()) ys.push_back(0);
  QAbstractAxis* x = value_axis(fit_axis(xs), x_title);
  QAbstractAxis* y = value_axis(fit_axis(ys), y_title);
  c->addAxis(x, Qt::AlignBottom);
  c->addAxis(y, Qt::AlignLeft);
  for (QLineSeries* l : lines) {
    l->attachAxis(x);
    l->attachAxis(y);
  }
}

// Named values: one bar set per combination of the other axes (the first few), categories = the
// axis' values; a failed point shows no bar.
void add_bars(QChart* c, const SweepChart& data, const std::vector<QString>& names, std::size_t cats,
              const QString& x_title, const QString& y_title) {
  auto* series = new QBarSeries;
  double top = 0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    auto* set = new QBarSet(names[i]);
    for (std::size_t j = 0; j < cats; ++j) {
      const double v = data.values[i][j];
      *set << (std::isnan(v) ? 0.0 : v);
      if (!std::isnan(v)) top = std::max(top, v);
    }
    series->append(set);
  }
  c->addSeries(series);
  QStringList categories;
  for (std::size_t j = 0; j < cats; ++j) categories << qstr(data.categories[j]);
  auto* x = new QBarCategoryAxis;
  x->append(categories);
  if (categories.size() > 12) x->setLabelsAngle(-60);
  x->setTitleText(x_title);
  c->addAxis(x, Qt::AlignBottom);
  series->attachAxis(x);
  auto* y = new QValueAxis;
  y->setRange(0, top > 0 ? top * 1.1 : 1.0);
  y->applyNiceNumbers();
  y->setTitleText(y_title);
  y->setLabelFormat(QStringLiteral("%.3g"));
  c->addAxis(y, Qt::AlignLeft);
  series->attachAxis(y);
}
}  // namespace

SweepView::SweepView(QWidget* parent) : QWidget(parent) {
  controller_ = new SweepController(this);
  model_ = new SweepModel(this);
  proxy_ = new QSortFilterProxyModel(this);
  proxy_->setSourceModel(model_);
  proxy_->setSortRole(Qt::UserRole);
  create_widgets();
  auto* top = new QVBoxLayout(this);
  top->addWidget(spec_label_);
  top->addLayout(file_bar());
  top->addWidget(status_);
  top->addWidget(results_split(), 1);
  connect_run();
}

void SweepView::create_widgets() {
  metric_ = new QComboBox;
  for (const auto& [key, title] : kMetrics) metric_->addItem(tr(title), QString::fromLatin1(key));
  axis_ = new QComboBox;
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
}

QHBoxLayout* SweepView::file_bar() {
  auto* open = new QPushButton(tr("Open sweep spec..."));
  open->setToolTip(tr("a sweep spec such as scenarios/*.json (see `foresight sweep --help`)"));
  auto* open_results_button = new QPushButton(tr("Open results..."));
  open_results_button->setToolTip(tr("a results.jsonl or results.csv written by `foresight sweep`"));
  connect(open, &QPushButton::clicked, this, &SweepView::open_dialog);
  connect(open_results_button, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("Open sweep results"), QString(),
                                                      tr("Sweep results (*.jsonl *.csv);;All files (*)"));
    if (!path.isEmpty()) (void)open_results(path.toStdString());
  });
  auto* bar = new QHBoxLayout;
  bar->addWidget(open);
  bar->addWidget(open_results_button);
  bar->addWidget(run_);
  bar->addWidget(cancel_);
  bar->addWidget(progress_, 1);
  return bar;
}

QSplitter* SweepView::results_split() {
  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(table_);
  auto* chart_box = new QWidget;
  auto* chart_controls = new QHBoxLayout;
  chart_controls->addWidget(new QLabel(tr("Plot")));
  chart_controls->addWidget(metric_);
  chart_controls->addWidget(new QLabel(tr("against")));
  chart_controls->addWidget(axis_);
  chart_controls->addStretch();
  auto* chart_layout = new QVBoxLayout(chart_box);
  chart_layout->setContentsMargins(0, 0, 0, 0);
  chart_layout->addLayout(chart_controls);
  chart_layout->addWidget(chart_, 1);
  split->addWidget(chart_box);
  split->setSizes({330, 370});
  return split;
}

void SweepView::connect_run() {
  connect(metric_, &QComboBox::currentIndexChanged, this, &SweepView::rebuild_chart);
  connect(axis_, &QComboBox::currentIndexChanged, this, &SweepView::rebuild_chart);
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
  const QString path = QFileDialog::getOpenFileName(this, tr("Open a sweep spec"), QString(),
                                                    tr("Sweep specs (*.json);;All files (*)"));
  if (!path.isEmpty()) open_file(path);
}

void SweepView::open_file(const QString& path) {
  if (loader_.isRunning() || controller_->running()) return;
  // A results file (results.jsonl or results.csv of `foresight sweep`) opens as the Open results
  // button opens it; anything else is a spec.
  if (path.endsWith(QStringLiteral(".jsonl"), Qt::CaseInsensitive) ||
      path.endsWith(QStringLiteral(".csv"), Qt::CaseInsensitive)) {
    (void)open_results(path.toStdString());
    return;
  }
  status_->setStyleSheet(QString());
  status_->setText(tr("Checking %1...").arg(path));
  loader_.setFuture(QtConcurrent::run([p = path.toStdString()] { return load_sweep(p); }));
}

void SweepView::set_spec(SweepSpec spec) {
  spec_ = std::move(spec);
  have_spec_ = true;
  QStringList axes;
  for (const auto& [pointer, values] : spec_.axes)
    axes << tr("%1 (%2 values)").arg(qstr(pointer)).arg(values.size());
  spec_label_->setText(tr("<b>%1</b>: %2 points, %3 engine; base: %4; axes: %5")
                           .arg(QFileInfo(qstr(spec_.file)).fileName().toHtmlEscaped())
                           .arg(spec_.points.size())
                           .arg(qstr(spec_.engine))
                           .arg(qstr(sweep_base_text(spec_.base)).toHtmlEscaped())
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
    if (row.is_null())
      ++missing;
    else if (row.value("ok", false))
      ++ok;
    else
      ++failed;
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
  fill_axis_choices();
  rebuild_chart();
}

Status SweepView::open_results(const std::string& jsonl) {
  auto out = load_sweep_results(jsonl);
  if (!out) {
    status_->setStyleSheet(QStringLiteral("color: #c62828;"));
    status_->setText(qstr(out.error().message()).toHtmlEscaped());
    return out.error();
  }
  // A results file has no base; its plans tell the batch.
  QString batch;
  for (const auto& row : out->rows)
    if (row.is_object() && row.contains("plan") && row["plan"].contains("global_batch")) {
      batch = tr("; global batch %1").arg(qstr(row["plan"]["global_batch"].dump()));
      break;
    }
  QStringList axes;
  for (const std::string& a : out->axes) axes << qstr(a);
  spec_label_->setText(tr("<b>Results</b>: %1 (%2 points%3); axes: %4")
                           .arg(qstr(jsonl).toHtmlEscaped())
                           .arg(out->rows.size())
                           .arg(batch)
                           .arg(axes.join(QStringLiteral(", ")).toHtmlEscaped()));
  show_outcome(*out);
  return Status::Ok();
}

void SweepView::fill_axis_choices() {
  const QSignalBlocker block(axis_);
  const int keep = axis_->currentIndex();
  axis_->clear();
  for (const std::string& a : model_->outcome().axes) axis_->addItem(axis_title(a));
  if (axis_->count() > 0) axis_->setCurrentIndex(std::clamp(keep, 0, axis_->count() - 1));
}

void SweepView::set_chart(const std::string& metric, int axis) {
  const QSignalBlocker block_metric(metric_), block_axis(axis_);
  const int m = metric_->findData(qstr(metric));
  if (m >= 0) metric_->setCurrentIndex(m);
  if (axis >= 0 && axis < axis_->count()) axis_->setCurrentIndex(axis);
  rebuild_chart();
}

std::string SweepView::chart_metric() const { return metric_->currentData().toString().toStdString(); }
int SweepView::chart_axis() const { return axis_->currentIndex(); }

QString SweepView::status_text() const { return status_->text(); }
QString SweepView::header_text() const { return spec_label_->text(); }
QChart* SweepView::chart() const { return chart_->chart(); }

void SweepView::rebuild_chart() {
  QChart* c = chart_->chart();
  c->removeAllSeries();
  for (QAbstractAxis* a : c->axes()) {
    c->removeAxis(a);
    delete a;
  }
  const std::string metric = chart_metric();
  const SweepChart data = sweep_chart(model_->outcome(), metric, std::max(0, chart_axis()));
  if (data.categories.empty()) {
    c->setTitle(QString());
    return;
  }
  const std::size_t sets = std::min<std::size_t>(data.series.size(), kMaxSeries);
  const std::size_t cats = std::min<std::size_t>(data.categories.size(), kMaxBars);
  std::vector<QString> names;
  for (std::size_t i = 0; i < sets; ++i)
    names.push_back(data.series[i].empty() ? metric_->currentText() : qstr(data.series[i]));
  const QString x_title = axis_->currentText(), y_title = metric_->currentText();
  if (data.numeric)
    add_lines(c, data, names, cats,
              data.x_unit.empty() ? x_title : tr("%1 (%2)").arg(x_title, qstr(data.x_unit)), y_title);
  else
    add_bars(c, data, names, cats, x_title, y_title);
  if (sets > 1)
    c->legend()->show();
  else
    c->legend()->hide();
  // The legend has no title of its own: the chart's title names what its entries are.
  c->setTitle(tr("%1 against %2%3%4")
                  .arg(y_title, x_title)
                  .arg(sets > 1 ? tr(", one %1 per %2")
                                      .arg(data.numeric ? tr("line") : tr("bar colour"))
                                      .arg(qstr(data.series_title))
                                : QString())
                  .arg(data.series.size() > sets
                           ? tr(" (first %1 of %2 series)").arg(sets).arg(data.series.size())
                           : QString()));
}

}  // namespace foresight::gui
