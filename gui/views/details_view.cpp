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
#include <QtCharts/QValueAxis>
#include <algorithm>

#include "gui/models/breakdown_model.h"
#include "gui/models/format.h"
#include "gui/views/tables.h"

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
  top->addLayout(figures_);
  top->addLayout(grid, 1);
}

std::vector<QWidget*> DetailsView::plots() const { return {time_chart_, memory_chart_}; }

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
  figure_values_[5]->setStyleSheet(p.fits() ? QString() : QStringLiteral("color: #c62828;"));
  rebuild_time_chart();
  rebuild_memory_chart(p);
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

void DetailsView::rebuild_memory_chart(const Prediction& p) {
  QChart* c = memory_chart_->chart();
  clear_chart(c);
  auto* series = new QHorizontalStackedBarSeries;
  for (int r = 0; r < memory_->rowCount(); ++r) {
    auto* set = new QBarSet(qstr(memory_->category(r)));
    set->setColor(memory_color(memory_->category(r)));
    *set << memory_->amount(r) / kGiB;
    series->append(set);
  }
  const double free_bytes = p.memory.capacity - p.memory.total;
  if (free_bytes > 0) {
    auto* set = new QBarSet(tr("free"));
    set->setColor(QColor(0xe0, 0xe0, 0xe0));
    set->setBorderColor(QColor(0xa0, 0xa0, 0xa0));
    *set << free_bytes / kGiB;
    series->append(set);
  }
  series->setBarWidth(0.6);
  c->addSeries(series);
  auto* y = new QBarCategoryAxis;
  y->append(tr("stage %1").arg(p.memory.stage));
  c->addAxis(y, Qt::AlignLeft);
  series->attachAxis(y);
  auto* x = new QValueAxis;
  // The axis ends at the device's capacity, so the bar fills it exactly when the plan fits and
  // runs past it when it does not.
  x->setRange(0, std::max(p.memory.capacity, p.memory.total) / kGiB);
  x->setTitleText(tr("GiB on the most loaded device (capacity %1)").arg(bytes_text(p.memory.capacity)));
  x->setLabelFormat(QStringLiteral("%.0f"));
  c->addAxis(x, Qt::AlignBottom);
  series->attachAxis(x);
  c->legend()->show();
  c->setTitle(p.fits() ? tr("Memory per device: %1 of %2 (%3)")
                             .arg(bytes_text(p.memory.total), bytes_text(p.memory.capacity),
                                  percent_text(p.memory.total / p.memory.capacity))
                       : tr("Memory per device: %1 of %2 -- does not fit")
                             .arg(bytes_text(p.memory.total), bytes_text(p.memory.capacity)));
}

}  // namespace foresight::gui
