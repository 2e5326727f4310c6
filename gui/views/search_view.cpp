// Search view: controls, ranked table, Pareto scatter.
#include "gui/views/search_view.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>
#include <QtCharts/QChart>
#include <QtCharts/QChartView>
#include <QtCharts/QLogValueAxis>
#include <QtCharts/QScatterSeries>
#include <QtCharts/QValueAxis>
#include <algorithm>
#include <array>

#include "gui/models/format.h"
#include "gui/models/ranked_plan_model.h"
#include "gui/views/tables.h"

namespace foresight::gui {

SearchView::SearchView(QWidget* parent) : QWidget(parent) {
  controller_ = new SearchController(this);
  plans_ = new RankedPlanModel(this);
  proxy_ = new QSortFilterProxyModel(this);
  proxy_->setSourceModel(plans_);
  proxy_->setSortRole(Qt::UserRole);
  proxy_->setFilterKeyColumn(RankedPlanModel::kLayout);
  proxy_->setFilterCaseSensitivity(Qt::CaseInsensitive);
  create_controls();
  create_results();
  lay_out();
  connect_signals();
}

void SearchView::create_controls() {
  context_label_ = new QLabel;
  context_label_->setWordWrap(true);
  objective_ = new QComboBox;
  for (Objective o : {Objective::kTime, Objective::kCost, Objective::kEnergy})
    objective_->addItem(qstr(to_string(o)), static_cast<int>(o));
  top_k_ = new QSpinBox;
  top_k_->setRange(1, 10000);
  top_k_->setValue(50);
  top_k_->setToolTip(tr("plans listed"));
  resimulate_ = new QSpinBox;
  resimulate_->setRange(0, 100);
  resimulate_->setValue(5);
  resimulate_->setToolTip(tr("re-rank the best N with the discrete-event simulator"));
  run_ = new QPushButton(tr("Search"));
  cancel_ = new QPushButton(tr("Cancel"));
  cancel_->setEnabled(false);
  use_ = new QPushButton(tr("Use selected plan"));
  use_->setEnabled(false);
  use_->setToolTip(tr("copy the selected plan into Setup and show its details (or double-click a row)"));
  progress_ = new QProgressBar;
  progress_->setRange(0, 1);
  progress_->setValue(0);
  progress_->setTextVisible(true);
  status_ = new QLabel;
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  filter_ = new QLineEdit;
  filter_->setPlaceholderText(tr("filter layouts, e.g. pp2 or cp"));
  filter_->setClearButtonEnabled(true);
}

void SearchView::create_results() {
  table_ = new QTableView;
  table_->setModel(proxy_);
  table_->setSortingEnabled(true);
  table_->sortByColumn(RankedPlanModel::kRank, Qt::AscendingOrder);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  make_compact(table_);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setStretchLastSection(true);

  auto* chart = new QChart;
  chart->setAnimationOptions(QChart::NoAnimation);
  chart->setTitle(tr("Step time vs cost"));
  chart->legend()->setAlignment(Qt::AlignBottom);
  scatter_ = new QChartView(chart);
  scatter_->setRenderHint(QPainter::Antialiasing);
  scatter_->setMinimumWidth(360);
}

void SearchView::lay_out() {
  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(tr("Objective")));
  controls->addWidget(objective_);
  controls->addWidget(new QLabel(tr("Top")));
  controls->addWidget(top_k_);
  controls->addWidget(new QLabel(tr("Re-simulate")));
  controls->addWidget(resimulate_);
  controls->addWidget(run_);
  controls->addWidget(cancel_);
  controls->addWidget(progress_, 1);
  auto* table_bar = new QHBoxLayout;
  table_bar->addWidget(filter_, 1);
  table_bar->addWidget(use_);

  auto* left = new QWidget;
  auto* left_layout = new QVBoxLayout(left);
  left_layout->setContentsMargins(0, 0, 0, 0);
  left_layout->addLayout(table_bar);
  left_layout->addWidget(table_, 1);
  auto* split = new QSplitter(Qt::Horizontal);
  split->addWidget(left);
  split->addWidget(scatter_);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  split->setSizes({760, 420});

  auto* top = new QVBoxLayout(this);
  top->addWidget(context_label_);
  top->addLayout(controls);
  top->addWidget(status_);
  top->addWidget(split, 1);
}

void SearchView::connect_signals() {
  connect(run_, &QPushButton::clicked, this, &SearchView::start);
  connect(cancel_, &QPushButton::clicked, this, &SearchView::cancel);
  connect(use_, &QPushButton::clicked, this, &SearchView::choose_selected);
  connect(table_, &QTableView::doubleClicked, this, &SearchView::choose_selected);
  connect(filter_, &QLineEdit::textChanged, proxy_, &QSortFilterProxyModel::setFilterFixedString);
  connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          &SearchView::selection_changed);
  connect(controller_, &SearchController::progress, this, [this](quint64 done, quint64 total) {
    progress_->setRange(0, 1000);
    progress_->setValue(total ? static_cast<int>(1000 * done / total) : 0);
    progress_->setFormat(tr("%1 / %2 plans").arg(done).arg(total));
  });
  connect(controller_, &SearchController::finished, this, &SearchView::show_outcome);
}

std::vector<QWidget*> SearchView::plots() const { return {scatter_}; }

void SearchView::set_context(const PlanInputs& in) {
  context_ = in;
  context_label_->setText(
      tr("Searching layouts of <b>%1</b> on <b>%2</b> accelerators of <b>%3</b>, global batch "
         "<b>%4</b> sequences (from Setup).")
          .arg(qstr(in.model))
          .arg(1LL * in.plan.tp * in.plan.pp * in.plan.dp * in.plan.cp)
          .arg(qstr(in.cluster))
          .arg(in.plan.global_batch));
}

SearchRequest SearchView::request() const {
  SearchRequest r;
  r.model = context_.model;
  r.cluster = context_.cluster;
  r.gpus = context_.plan.gpus();
  r.global_batch = context_.plan.global_batch;
  r.objective = static_cast<Objective>(objective_->currentData().toInt());
  r.top_k = top_k_->value();
  r.resimulate = resimulate_->value();
  return r;
}

void SearchView::start() {
  if (!controller_->start(request())) return;
  run_->setEnabled(false);
  cancel_->setEnabled(true);
  progress_->setRange(0, 0);  // busy until the first progress report
  status_->setStyleSheet(QString());
  status_->setText(tr("Searching..."));
}

void SearchView::cancel() {
  controller_->cancel();
  status_->setText(tr("Cancelling..."));
}

void SearchView::show_outcome(const SearchOutcome& out) {
  run_->setEnabled(true);
  cancel_->setEnabled(false);
  progress_->setRange(0, 1);
  progress_->setValue(out.ok() ? 1 : 0);
  progress_->setFormat(out.ok() ? tr("done") : tr("stopped"));
  if (out.cancelled) {
    status_->setStyleSheet(QString());
    status_->setText(tr("Search cancelled; the previous results are kept."));
    return;
  }
  if (!out.error.empty()) {
    status_->setStyleSheet(QStringLiteral("color: #c62828;"));
    status_->setText(qstr(out.error));
    plans_->clear();
    rebuild_scatter(out);
    return;
  }
  const SearchResult& r = out.result;
  QString rejected;
  for (const auto& [reason, count] : r.rejected) rejected += tr("%1 %2; ").arg(count).arg(qstr(reason));
  if (rejected.endsWith(QStringLiteral("; "))) rejected.chop(2);
  status_->setStyleSheet(QString());
  status_->setText(
      tr("%1 candidate plans, %2 fit and were timed in %3; rejected: %4. Pareto front: %5 plans.")
          .arg(r.candidates)
          .arg(r.evaluated)
          .arg(seconds_text(r.wall_s))
          .arg(rejected.isEmpty() ? tr("none") : rejected)
          .arg(r.pareto.size()) +
      (r.simulated > 0 ? tr(" Ranked by the simulator's step: %1 plans re-simulated until no other could "
                            "enter the top.")
                             .arg(r.simulated)
                       : QString()));
  plans_->set_plans(r.plans, r.pareto);
  table_->sortByColumn(RankedPlanModel::kRank, Qt::AscendingOrder);
  rebuild_scatter(out);
}

namespace {

// A scatter series of one colour and marker.
QScatterSeries* scatter_series_of(const QString& name, qreal size, const QColor& colour) {
  auto* s = new QScatterSeries;
  s->setName(name);
  s->setMarkerSize(size);
  s->setColor(colour);
  return s;
}

// The ranked plans split by memory headroom on their fullest device (share of its capacity free).
class HeadroomBands {
 public:
  HeadroomBands()
      : bands_{{{0.10, SearchView::tr("< 10% free"), QColor(0xc6, 0x28, 0x28)},
                {0.30, SearchView::tr("10-30% free"), QColor(0xef, 0x9a, 0x1a)},
                {0.50, SearchView::tr("30-50% free"), QColor(0x43, 0xa0, 0x47)},
                {2.00, SearchView::tr("> 50% free"), QColor(0x1f, 0x77, 0xb4)}}} {
    for (const Band& b : bands_) series_.push_back(scatter_series_of(b.name, 8, b.color));
  }
  QScatterSeries* series_for(const RankedPlan& p) const {
    const double capacity = p.prediction.memory.capacity;
    const double free = capacity > 0 ? p.memory_headroom / capacity : 1.0;
    std::size_t i = 0;
    while (i + 1 < bands_.size() && free >= bands_[i].below) ++i;
    return series_[i];
  }
  const std::vector<QScatterSeries*>& series() const { return series_; }

 private:
  struct Band {
    double below;
    QString name;
    QColor color;
  };
  std::array<Band, 4> bands_;
  std::vector<QScatterSeries*> series_;
};

// The extent of the points added, for the axes' ranges.
struct Extent {
  double x0 = 1e300, x1 = 0, y0 = 1e300, y1 = 0;
  void add(QScatterSeries* s, const RankedPlan& p) {
    const double x = p.prediction.step_time_s, y = p.economics.cost_per_mtok_usd;
    s->append(x, y);
    x0 = std::min(x0, x);
    x1 = std::max(x1, x);
    y0 = std::min(y0, y);
    y1 = std::max(y1, y);
  }
};

// Step time on x, $/Mtok on y, each with 8% of the range as margin, attached to every series.
void add_axes(QChart* c, const Extent& e) {
  auto* x = new QValueAxis;
  auto* y = new QValueAxis;
  const double dx = std::max(1e-9, (e.x1 - e.x0) * 0.08), dy = std::max(1e-9, (e.y1 - e.y0) * 0.08);
  x->setRange(std::max(0.0, e.x0 - dx), e.x1 + dx);
  y->setRange(std::max(0.0, e.y0 - dy), e.y1 + dy);
  x->setTitleText(SearchView::tr("step time (s, analytic or re-simulated)"));
  y->setTitleText(SearchView::tr("$ per million tokens"));
  x->applyNiceNumbers();
  y->applyNiceNumbers();
  x->setLabelFormat(QStringLiteral("%.3g"));
  y->setLabelFormat(QStringLiteral("%.3g"));
  c->addAxis(x, Qt::AlignBottom);
  c->addAxis(y, Qt::AlignLeft);
  for (QAbstractSeries* s : c->series()) {
    s->attachAxis(x);
    s->attachAxis(y);
  }
}

}  // namespace

void SearchView::rebuild_scatter(const SearchOutcome& out) {
  QChart* c = scatter_->chart();
  c->removeAllSeries();
  for (QAbstractAxis* a : c->axes()) {
    c->removeAxis(a);
    delete a;
  }
  selected_ = nullptr;
  if (!out.ok()) return;
  const HeadroomBands bands;
  auto* front = scatter_series_of(tr("Pareto front"), 9, QColor(0x6a, 0x1b, 0x9a));
  front->setMarkerShape(QScatterSeries::MarkerShapeRectangle);
  selected_ = scatter_series_of(tr("selected"), 16, QColor(0, 0, 0, 0));
  selected_->setBorderColor(QColor(0xc6, 0x28, 0x28));
  Extent extent;
  for (const RankedPlan& p : out.result.plans) extent.add(bands.series_for(p), p);
  for (const RankedPlan& p : out.result.pareto) extent.add(front, p);
  // The Pareto front (over time, $/Mtok and memory headroom) first, so the ranked plans draw on top.
  c->addSeries(front);
  for (QScatterSeries* s : bands.series()) {
    if (s->count() > 0)
      c->addSeries(s);
    else
      delete s;
  }
  c->addSeries(selected_);
  add_axes(c, extent);
  selection_changed();
}

std::vector<std::pair<QString, int>> SearchView::scatter_series() const {
  std::vector<std::pair<QString, int>> out;
  for (QAbstractSeries* s : scatter_->chart()->series())
    if (auto* xy = qobject_cast<QXYSeries*>(s)) out.emplace_back(xy->name(), static_cast<int>(xy->count()));
  return out;
}

void SearchView::select_row(int proxy_row) {
  if (proxy_row < 0 || proxy_row >= proxy_->rowCount()) return;
  table_->selectRow(proxy_row);
}

void SearchView::selection_changed() {
  const QModelIndexList rows = table_->selectionModel()->selectedRows();
  use_->setEnabled(!rows.isEmpty());
  if (!selected_) return;
  selected_->clear();
  if (rows.isEmpty()) return;
  const RankedPlan& p = plans_->plan(proxy_->mapToSource(rows.front()).row());
  selected_->append(p.prediction.step_time_s, p.economics.cost_per_mtok_usd);
}

void SearchView::choose_selected() {
  const QModelIndexList rows = table_->selectionModel()->selectedRows();
  if (rows.isEmpty()) return;
  Q_EMIT plan_chosen(plans_->plan(proxy_->mapToSource(rows.front()).row()).plan);
}

}  // namespace foresight::gui
