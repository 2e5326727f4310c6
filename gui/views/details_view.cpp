// Plan details view: figures, breakdown charts and tables.
#include "gui/views/details_view.h"

#include <QGridLayout>
#include <QHeaderView>
#include <QLabel>
#include <QTableView>
#include <QVBoxLayout>
#include <QtCharts/QBarCategoryAxis>
#include <QtCharts/QBarSet>
#include <QtCharts/QChart>
#include <QtCharts/QChartView>
#include <QtCharts/QHorizontalBarSeries>
#include <QtCharts/QHorizontalStackedBarSeries>
#include <QtCharts/QLineSeries>
#include <QtCharts/QValueAxis>
#include <algorithm>

#include "gui/models/breakdown_model.h"
#include "gui/models/format.h"
#include "gui/views/tables.h"
#include "sim/validate/error_band.h"

namespace foresight::gui {

namespace {

constexpr double kGiB = 1073741824.0;

// One colour per memory category (weights, gradients, optimizer, activations, buffers, reserved).
QColor memory_color(const std::string& category) {
  if (category == "weights") return QColor(0x1f, 0x77, 0xb4);
  if (category == "gradients") return QColor(0xff, 0x7f, 0x0e);
  if (category == "optimizer state") return QColor(0x2c, 0xa0, 0x2c);
  if (category == "activations") return QColor(0x94, 0x67, 0xbd);
  if (category == "buffers") return QColor(0x8c, 0x56, 0x4b);
  return QColor(0x7f, 0x7f, 0x7f);
}

QTableView* table_for(QAbstractItemModel* m) {
  auto* t = new QTableView;
  t->setModel(m);
  make_compact(t);
  t->setAlternatingRowColors(false);
  t->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  t->setSelectionMode(QAbstractItemView::NoSelection);
  t->setMaximumHeight(240);
  return t;
}

QChartView* chart_view() {
  auto* chart = new QChart;
  chart->setAnimationOptions(QChart::NoAnimation);
  chart->legend()->setAlignment(Qt::AlignBottom);
  auto* v = new QChartView(chart);
  v->setRenderHint(QPainter::Antialiasing);
  v->setMinimumHeight(260);
  return v;
}

void clear_chart(QChart* c) {
  c->removeAllSeries();
  for (QAbstractAxis* a : c->axes()) {
    c->removeAxis(a);
    delete a;
  }
}

}  // namespace

DetailsView::DetailsView(QWidget* parent) : QWidget(parent) {
  time_ = new BreakdownModel(BreakdownModel::Kind::kTime, this);
  memory_ = new BreakdownModel(BreakdownModel::Kind::kMemory, this);
  title_ = new QLabel;
  QFont f = title_->font();
  f.setPointSizeF(f.pointSizeF() * 1.25);
  f.setBold(true);
  title_->setFont(f);
  title_->setWordWrap(true);
  message_ = new QLabel;
  message_->setWordWrap(true);
  message_->setStyleSheet(QStringLiteral("color: #c62828;"));
  message_->hide();

  figures_ = new QGridLayout;
  static const char* const names[] = {"Step time",  "Tokens/s",           "MFU",
                                      "HFU",        "TFLOP/s per device", "Memory per device",
                                      "$ per Mtok", "kWh per Mtok",       "$ per step"};
  int i = 0;
  for (const char* n : names) {
    auto* name = new QLabel(tr(n));
    name->setStyleSheet(QStringLiteral("color: palette(mid);"));
    auto* value = new QLabel(QStringLiteral("-"));
    QFont vf = value->font();
    vf.setPointSizeF(vf.pointSizeF() * 1.4);
    vf.setBold(true);
    value->setFont(vf);
    figures_->addWidget(name, 0, i);
    figures_->addWidget(value, 1, i);
    figure_values_.append(value);
    ++i;
  }

  time_chart_ = chart_view();
  memory_chart_ = chart_view();
  time_table_ = table_for(time_);
  memory_table_ = table_for(memory_);

  auto* grid = new QGridLayout;
  grid->addWidget(time_chart_, 0, 0);
  grid->addWidget(memory_chart_, 0, 1);
  grid->addWidget(time_table_, 1, 0);
  grid->addWidget(memory_table_, 1, 1);
  grid->setRowStretch(0, 3);
  grid->setRowStretch(1, 2);

  auto* top = new QVBoxLayout(this);
  top->addWidget(title_);
  top->addWidget(message_);
  band_ = new QLabel;
  band_->setWordWrap(true);
  band_->setStyleSheet(QStringLiteral("color: palette(mid);"));
  top->addLayout(figures_);
  top->addWidget(band_);
  top->addLayout(grid, 1);
}

std::vector<QWidget*> DetailsView::plots() const { return {time_chart_, memory_chart_}; }
QChart* DetailsView::memory_chart() const { return memory_chart_->chart(); }
QString DetailsView::band_text() const { return band_->text(); }

void DetailsView::set_evaluation(const Evaluation& e) {
  const PlanInputs& in = e.inputs;
  if (e.has_prediction) {
    const Prediction& p = e.prediction;
    title_->setText(
        tr("%1 on %2 x %3 (%4)  --  %5, micro-batch %6 x %7 = global batch %8, %9, ZeRO-%10, recompute %11")
            .arg(qstr(e.model.name))
            .arg(p.devices)
            .arg(qstr(e.cluster.node.accelerator().name))
            .arg(qstr(e.cluster.name))
            .arg(layout_text(in.plan))
            .arg(in.plan.micro_batch)
            .arg(p.micro_batches)
            .arg(in.plan.global_batch)
            .arg(qstr(to_string(in.plan.schedule)))
            .arg(in.plan.zero_stage)
            .arg(qstr(to_string(in.plan.recompute))));
  } else {
    title_->setText(tr("%1 on %2  --  %3").arg(qstr(in.model), qstr(in.cluster), layout_text(in.plan)));
  }
  message_->setVisible(!e.ok());
  message_->setText(qstr(e.error));
  if (!e.has_prediction) {
    time_->clear();
    memory_->clear();
    for (QLabel* v : figure_values_) v->setText(QStringLiteral("-"));
    band_->clear();
    clear_chart(time_chart_->chart());
    clear_chart(memory_chart_->chart());
    time_chart_->chart()->setTitle(QString());
    memory_chart_->chart()->setTitle(QString());
    return;
  }
  const Prediction& p = e.prediction;
  time_->set_prediction(p);
  memory_->set_prediction(p);
  const QString values[] = {
      seconds_text(p.step_time_s),
      QString::number(p.tokens_per_s, 'f', 0),
      percent_text(p.mfu),
      percent_text(p.hfu),
      QString::number(p.tflops_per_device, 'f', 0),
      bytes_text(p.memory.total) + QStringLiteral(" / ") + bytes_text(p.memory.capacity),
      QStringLiteral("$") + QString::number(e.economics.cost_per_mtok_usd, 'f', 3),
      QString::number(e.economics.energy_per_mtok_kwh, 'f', 3),
      QStringLiteral("$") + QString::number(e.economics.cost_per_step_usd, 'f', 3)};
  for (int i = 0; i < figure_values_.size(); ++i) figure_values_[i]->setText(values[i]);
  // Where published runs like this one measured: the validation's error band of its class.
  if (auto band = error_band(in.plan, p.devices)) {
    const auto [lo, hi] = band->measured_range(p.step_time_s);
    band_->setText(tr("Likely %1 to %2 per step: published runs of its class (%3 %4, %5 runs) measured "
                      "between %6x and %7x the model's step (10th to 90th percentile; table of %8).")
                       .arg(seconds_text(lo), seconds_text(hi), qstr(band->dimension), qstr(band->cls))
                       .arg(band->cases)
                       .arg(lo / p.step_time_s, 0, 'f', 2)
                       .arg(hi / p.step_time_s, 0, 'f', 2)
                       .arg(qstr(band->generated.substr(0, 10))));
  } else {
    band_->setText(qstr(band.error().message()));
  }
  figure_values_[5]->setStyleSheet(p.fits() ? QString() : QStringLiteral("color: #c62828;"));
  rebuild_time_chart();
  rebuild_memory_chart(p, e.stages);
}

void DetailsView::rebuild_time_chart() {
  QChart* c = time_chart_->chart();
  clear_chart(c);
  // Horizontal bars list bottom-up; insert in reverse so the table's first row is on top.
  auto* set = new QBarSet(tr("milliseconds"));
  set->setColor(QColor(0x1f, 0x77, 0xb4));
  QStringList categories;
  double longest = 0;
  for (int r = time_->rowCount() - 1; r >= 0; --r) {
    const double ms = time_->amount(r) * 1e3;
    *set << ms;
    longest = std::max(longest, ms);
    categories << qstr(time_->category(r));
  }
  auto* series = new QHorizontalBarSeries;
  series->append(set);
  c->addSeries(series);
  auto* y = new QBarCategoryAxis;
  y->append(categories);
  c->addAxis(y, Qt::AlignLeft);
  series->attachAxis(y);
  auto* x = new QValueAxis;
  x->setRange(0, longest > 0 ? longest * 1.15 : 1.0);
  x->applyNiceNumbers();
  x->setTitleText(tr("ms per step (slowest pipeline stage)"));
  x->setLabelFormat(QStringLiteral("%.0f"));
  c->addAxis(x, Qt::AlignBottom);
  series->attachAxis(x);
  c->legend()->hide();
  c->setTitle(tr("Step time %1 by category").arg(seconds_text(time_->denominator())));
}

namespace {

// The stages drawn: all of them up to 16; past that the first and last four, every stage in
// between at an even stride, and the fullest (a 64-stage pipeline stays readable).
std::vector<int> drawn_stages(const std::vector<MemoryBreakdown>& stages, int fullest) {
  const int n = static_cast<int>(stages.size());
  std::vector<int> out;
  for (int st = 0; st < n; ++st)
    if (n <= 16 || st < 4 || st >= n - 4 || st == fullest || st % ((n + 7) / 8) == 0) out.push_back(st);
  return out;
}

}  // namespace

void DetailsView::rebuild_memory_chart(const Prediction& p, const std::vector<MemoryBreakdown>& stages_in) {
  QChart* c = memory_chart_->chart();
  clear_chart(c);
  // Every stage's bar (the fullest's breakdown is the table's); a single-stage plan: that one.
  const std::vector<MemoryBreakdown> stages =
      stages_in.empty() ? std::vector<MemoryBreakdown>{p.memory} : stages_in;
  const int fullest = stages_in.empty() ? 0 : p.memory.stage;
  const std::vector<int> drawn = drawn_stages(stages, fullest);
  auto* series = new QHorizontalStackedBarSeries;
  const auto parts = memory_parts(MemoryBreakdown{});
  double widest = p.memory.capacity;
  // Stage 0 on top: a horizontal bar chart draws its first category at the bottom.
  std::vector<int> order(drawn.rbegin(), drawn.rend());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    double any = 0;
    for (int st : order) any += memory_parts(stages[static_cast<std::size_t>(st)])[i].amount;
    if (any <= 0) continue;  // a kind no stage holds (no buffers) takes no legend entry
    auto* set = new QBarSet(QString::fromLatin1(parts[i].name));
    set->setColor(memory_color(parts[i].name));
    for (int st : order) *set << memory_parts(stages[static_cast<std::size_t>(st)])[i].amount / kGiB;
    series->append(set);
  }
  auto* free_set = new QBarSet(tr("free"));
  free_set->setColor(QColor(0xe0, 0xe0, 0xe0));
  free_set->setBorderColor(QColor(0xa0, 0xa0, 0xa0));
  for (int st : order) {
    const MemoryBreakdown& m = stages[static_cast<std::size_t>(st)];
    *free_set << std::max(0.0, m.capacity - m.total) / kGiB;
    widest = std::max(widest, m.total);
  }
  series->append(free_set);
  series->setBarWidth(0.6);
  c->addSeries(series);
  auto* y = new QBarCategoryAxis;
  for (int st : order)
    y->append(st == fullest && drawn.size() > 1 ? tr("stage %1 (fullest)").arg(st) : tr("stage %1").arg(st));
  c->addAxis(y, Qt::AlignLeft);
  series->attachAxis(y);
  auto* x = new QValueAxis;
  // Past the capacity by a margin, so a plan that does not fit shows by how much.
  x->setRange(0, widest * (widest > p.memory.capacity ? 1.05 : 1.0) / kGiB);
  x->setTitleText(tr("GiB per device (capacity %1)").arg(bytes_text(p.memory.capacity)));
  x->setLabelFormat(QStringLiteral("%.0f"));
  c->addAxis(x, Qt::AlignBottom);
  series->attachAxis(x);
  // The capacity as a line across the bars, on a hidden axis holding the categories' span.
  auto* cap = new QLineSeries;
  cap->setName(tr("capacity"));
  QPen pen(QColor(0xc6, 0x28, 0x28));
  pen.setWidth(2);
  pen.setStyle(Qt::DashLine);
  cap->setPen(pen);
  cap->append(p.memory.capacity / kGiB, -0.5);
  cap->append(p.memory.capacity / kGiB, static_cast<double>(drawn.size()) - 0.5);
  c->addSeries(cap);
  auto* span = new QValueAxis;
  span->setRange(-0.5, static_cast<double>(drawn.size()) - 0.5);
  span->setVisible(false);
  c->addAxis(span, Qt::AlignRight);
  cap->attachAxis(x);
  cap->attachAxis(span);
  c->legend()->setAlignment(Qt::AlignRight);  // beside the bars: the names fit unelided
  c->legend()->show();
  const QString shown = drawn.size() < stages.size()
                            ? tr(" (%1 of %2 stages drawn)").arg(drawn.size()).arg(stages.size())
                            : QString();
  c->setTitle((p.fits() ? tr("Memory per device: %1 of %2 (%3) on the fullest stage")
                              .arg(bytes_text(p.memory.total), bytes_text(p.memory.capacity),
                                   percent_text(p.memory.total / p.memory.capacity))
                        : tr("Memory per device: %1 of %2 -- does not fit")
                              .arg(bytes_text(p.memory.total), bytes_text(p.memory.capacity))) +
              shown);
}

}  // namespace foresight::gui
