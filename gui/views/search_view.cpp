// Search view: controls, ranked table, plot, side-by-side comparison.
#include "gui/views/search_view.h"

#include <QAction>
#include <QComboBox>
#include <QDialog>
#include <QDoubleSpinBox>
#include <QFile>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableView>
#include <QToolButton>
#include <QVBoxLayout>
#include <QtCharts/QChart>
#include <QtCharts/QChartView>
#include <QtCharts/QLegendMarker>
#include <QtCharts/QLineSeries>
#include <QtCharts/QLogValueAxis>
#include <QtCharts/QScatterSeries>
#include <QtCharts/QValueAxis>
#include <algorithm>
#include <array>

#include "gui/models/format.h"
#include "gui/models/ranked_plan_model.h"
#include "gui/views/chart_axes.h"
#include "gui/views/plan_timelines.h"
#include "gui/views/tables.h"

namespace foresight::gui {

SearchView::SearchView(QWidget* parent) : QWidget(parent) {
  controller_ = new SearchController(this);
  plans_ = new RankedPlanModel(this);
  proxy_ = new RankedPlanFilter(this);
  proxy_->setSourceModel(plans_);
  side_by_side_ = new PlanSideBySideModel(this);
  create_controls();
  create_results();
  create_column_menu();
  lay_out();
  connect_signals();
}

QSortFilterProxyModel* SearchView::proxy() const { return proxy_; }

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
  min_free_ = new QDoubleSpinBox;
  min_free_->setRange(0, 90);
  min_free_->setDecimals(1);
  min_free_->setSingleStep(1);
  min_free_->setSuffix(QStringLiteral(" %"));
  min_free_->setValue(100 * kDefaultMinHeadroom);
  min_free_->setToolTip(
      tr("memory every plan must leave free on its fullest device: a margin for the allocator's "
         "fragmentation, which the memory model does not price. Filters the table now; the next search "
         "applies it too."));
  run_ = new QPushButton(tr("Search"));
  cancel_ = new QPushButton(tr("Cancel"));
  cancel_->setEnabled(false);
  use_ = new QPushButton(tr("Use selected plan"));
  use_->setEnabled(false);
  use_->setToolTip(tr("copy the selected plan into Setup and show its details (or double-click a row)"));
  compare_ = new QPushButton(tr("Compare selected"));
  compare_->setEnabled(false);
  compare_->setToolTip(
      tr("select two or more rows (Ctrl+click) to see their breakdown and memory side by side"));
  export_ = new QPushButton(tr("Export CSV..."));
  export_->setToolTip(tr("the table as shown: filtered, sorted, shown columns"));
  columns_ = new QToolButton;
  columns_->setText(tr("Columns"));
  columns_->setPopupMode(QToolButton::InstantPopup);
  progress_ = new QProgressBar;
  progress_->setRange(0, 1);
  progress_->setValue(0);
  progress_->setTextVisible(true);
  status_ = new QLabel;
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  filter_ = new QLineEdit;
  filter_->setPlaceholderText(tr("filter plans, e.g. pp2, ZeRO-1 or recompute full"));
  filter_->setClearButtonEnabled(true);
  plot_choice_ = new QComboBox;
}

void SearchView::create_results() {
  table_ = new QTableView;
  table_->setModel(proxy_);
  table_->setSortingEnabled(true);
  table_->sortByColumn(RankedPlanModel::kRank, Qt::AscendingOrder);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  make_compact(table_);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setStretchLastSection(true);
  // The knobs the Layout column already names start hidden; the column chooser shows them.
  for (int c : {RankedPlanModel::kMicroBatch, RankedPlanModel::kZero, RankedPlanModel::kRecompute,
                RankedPlanModel::kSchedule, RankedPlanModel::kOffload, RankedPlanModel::kEnergyPerMtok,
                RankedPlanModel::kPareto})
    table_->setColumnHidden(c, true);

  auto* chart = new QChart;
  chart->setAnimationOptions(QChart::NoAnimation);
  chart->legend()->setAlignment(Qt::AlignBottom);
  chart->legend()->setShowToolTips(true);  // the whole name where a narrow window elides it
  scatter_ = new QChartView(chart);
  scatter_->setRenderHint(QPainter::Antialiasing);
  scatter_->setMinimumWidth(360);
}

// The Columns button and the header's context menu: one checkable entry per column.
void SearchView::create_column_menu() {
  auto* menu = new QMenu(this);
  for (int c = 0; c < RankedPlanModel::kColumnCount; ++c) {
    if (c == RankedPlanModel::kLayout) continue;  // always shown
    QAction* a = menu->addAction(plans_->headerData(c, Qt::Horizontal).toString());
    a->setCheckable(true);
    a->setChecked(!table_->isColumnHidden(c));
    connect(a, &QAction::toggled, this, [this, c](bool on) { table_->setColumnHidden(c, !on); });
  }
  connect(menu, &QMenu::aboutToShow, this, [this, menu] {
    const auto actions = menu->actions();
    int i = 0;
    for (int c = 0; c < RankedPlanModel::kColumnCount; ++c) {
      if (c == RankedPlanModel::kLayout) continue;
      QSignalBlocker block(actions[i]);
      actions[i++]->setChecked(!table_->isColumnHidden(c));
    }
  });
  columns_->setMenu(menu);
  table_->horizontalHeader()->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(table_->horizontalHeader(), &QWidget::customContextMenuRequested, this,
          [this, menu](const QPoint& at) { menu->popup(table_->horizontalHeader()->mapToGlobal(at)); });
}

void SearchView::lay_out() {
  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(tr("Objective")));
  controls->addWidget(objective_);
  controls->addWidget(new QLabel(tr("Top")));
  controls->addWidget(top_k_);
  controls->addWidget(new QLabel(tr("Re-simulate")));
  controls->addWidget(resimulate_);
  controls->addWidget(new QLabel(tr("Min. free")));
  controls->addWidget(min_free_);
  controls->addWidget(run_);
  controls->addWidget(cancel_);
  controls->addWidget(progress_, 1);
  auto* table_bar = new QHBoxLayout;
  table_bar->addWidget(filter_, 1);
  table_bar->addWidget(columns_);
  table_bar->addWidget(export_);
  table_bar->addWidget(compare_);
  table_bar->addWidget(use_);

  auto* left = new QWidget;
  auto* left_layout = new QVBoxLayout(left);
  left_layout->setContentsMargins(0, 0, 0, 0);
  left_layout->addLayout(table_bar);
  left_layout->addWidget(table_, 1);
  auto* right = new QWidget;
  auto* right_layout = new QVBoxLayout(right);
  right_layout->setContentsMargins(0, 0, 0, 0);
  auto* plot_bar = new QHBoxLayout;
  plot_bar->addWidget(new QLabel(tr("Plot")));
  plot_bar->addWidget(plot_choice_, 1);
  right_layout->addLayout(plot_bar);
  right_layout->addWidget(scatter_, 1);
  auto* split = new QSplitter(Qt::Horizontal);
  split->addWidget(left);
  split->addWidget(right);
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
  connect(compare_, &QPushButton::clicked, this, &SearchView::compare_selected);
  connect(export_, &QPushButton::clicked, this, &SearchView::ask_export_csv);
  connect(table_, &QTableView::doubleClicked, this, &SearchView::choose_selected);
  connect(filter_, &QLineEdit::textChanged, proxy_, &QSortFilterProxyModel::setFilterFixedString);
  connect(min_free_, &QDoubleSpinBox::valueChanged, this, [this](double percent) {
    proxy_->set_min_free(percent / 100);
    rebuild_plot();
  });
  connect(plot_choice_, &QComboBox::activated, this,
          [this](int i) { set_plot(static_cast<SearchPlot>(plot_choice_->itemData(i).toInt())); });
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
QChart* SearchView::chart() const { return scatter_->chart(); }

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
  r.min_headroom = min_free();
  return r;
}

void SearchView::set_min_free(double share) { min_free_->setValue(100 * share); }
double SearchView::min_free() const { return min_free_->value() / 100; }

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
    rebuild_plot_choices();
    rebuild_plot();
    return;
  }
  const SearchResult& r = out.result;
  QString rejected;
  for (const auto& [reason, count] : r.rejected) rejected += tr("%1 %2; ").arg(count).arg(qstr(reason));
  if (rejected.endsWith(QStringLiteral("; "))) rejected.chop(2);
  status_->setStyleSheet(QString());
  status_->setText(
      tr("%1 candidate plans, %2 fit with %3% of memory free and were timed in %4; rejected: %5.")
          .arg(r.candidates)
          .arg(r.evaluated)
          .arg(100 * out.request.min_headroom, 0, 'g', 3)
          .arg(seconds_text(r.wall_s))
          .arg(rejected.isEmpty() ? tr("none") : rejected) +
      (r.simulated > 0 ? tr(" Ranked by the simulator's step: %1 plans re-simulated until no other could "
                            "enter the top; the Simulated column has their times.")
                             .arg(r.simulated)
                       : QString()));
  plans_->set_plans(r.plans, r.pareto);
  table_->sortByColumn(RankedPlanModel::kRank, Qt::AscendingOrder);
  rebuild_plot_choices();
  rebuild_plot();
}

namespace {

// A scatter series of one colour and marker.
QScatterSeries* scatter_series_of(const QString& name, qreal size, const QColor& colour) {
  auto* s = new QScatterSeries;
  s->setName(name);
  s->setMarkerSize(size);
  s->setColor(colour);
  s->setBorderColor(colour.darker(130));
  return s;
}

QString plot_name(SearchPlot p) { return plot_axes(p).title; }

// The ranked plans split by memory headroom on their fullest device (share of its capacity free).
// Plain-text names: the legend reads "<" as the start of a tag.
class HeadroomBands {
 public:
  HeadroomBands()
      : bands_{{{0.10, SearchView::tr("under 10% free"), QColor(0xc6, 0x28, 0x28)},
                {0.30, SearchView::tr("10-30% free"), QColor(0xef, 0x9a, 0x1a)},
                {0.50, SearchView::tr("30-50% free"), QColor(0x43, 0xa0, 0x47)},
                {2.00, SearchView::tr("over 50% free"), QColor(0x1f, 0x77, 0xb4)}}} {
    for (const Band& b : bands_) series_.push_back(scatter_series_of(b.name, 8, b.color));
  }
  QScatterSeries* series_for(const RankedPlan& p) const {
    const double free = p.prediction.memory.capacity > 0 ? free_share(p) : 1.0;
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

}  // namespace

std::vector<SearchPlot> SearchView::offered_plots() const { return useful_plots(plans_->plans()); }

void SearchView::rebuild_plot_choices() {
  QSignalBlocker block(plot_choice_);
  plot_choice_->clear();
  const auto offered = offered_plots();
  for (SearchPlot p : offered) plot_choice_->addItem(plot_name(p), static_cast<int>(p));
  if (std::find(offered.begin(), offered.end(), plot_) == offered.end()) plot_ = offered.front();
  plot_choice_->setCurrentIndex(plot_choice_->findData(static_cast<int>(plot_)));
}

void SearchView::set_plot(SearchPlot plot) {
  const auto offered = offered_plots();
  if (std::find(offered.begin(), offered.end(), plot) == offered.end()) return;
  plot_ = plot;
  QSignalBlocker block(plot_choice_);
  plot_choice_->setCurrentIndex(plot_choice_->findData(static_cast<int>(plot_)));
  rebuild_plot();
}

// The ranked plans that pass the table's filters, drawn on the chosen axes: coloured by memory
// free, the Pareto front of the points drawn (in these two dimensions), the allocator margin
// where the x axis is memory free, the selection on top; axes fitted to the drawn points.
void SearchView::rebuild_plot() {
  QChart* c = scatter_->chart();
  c->removeAllSeries();
  for (QAbstractAxis* a : c->axes()) {
    c->removeAxis(a);
    delete a;
  }
  selected_ = nullptr;
  const PlotAxes axes = plot_axes(plot_);
  c->setTitle(axes.title);
  points_ = plot_points(plans_->plans(), axes);
  std::vector<QPointF> shown;
  for (int row = 0; row < plans_->rowCount(); ++row)
    if (proxy_->mapFromSource(plans_->index(row, 0)).isValid()) shown.push_back(points_[row]);
  if (shown.empty()) return;

  // Where memory free is the x axis the plans are one series; against cost, colour says how much
  // memory each leaves free.
  const HeadroomBands bands;
  const std::vector<QScatterSeries*> plan_series =
      plot_ != SearchPlot::kTimeVsCost
          ? std::vector<QScatterSeries*>{scatter_series_of(tr("ranked plans"), 8, QColor(0x1f, 0x77, 0xb4))}
          : bands.series();
  if (plot_ != SearchPlot::kTimeVsCost)
    for (QScatterSeries* s : bands.series()) delete s;
  for (int row = 0; row < plans_->rowCount(); ++row)
    if (proxy_->mapFromSource(plans_->index(row, 0)).isValid())
      (plan_series.size() == 1 ? plan_series.front() : bands.series_for(plans_->plan(row)))
          ->append(points_[row]);
  auto* front = new QLineSeries;
  front->setName(tr("Pareto front"));
  front->setColor(QColor(0x6a, 0x1b, 0x9a));
  front->setPointsVisible(true);
  for (std::size_t i : pareto_2d(shown, axes)) front->append(shown[i]);
  c->addSeries(front);
  for (QScatterSeries* s : plan_series) {
    if (s->count() > 0) {
      c->addSeries(s);
      connect(s, &QScatterSeries::clicked, this, &SearchView::click_point);
    } else {
      delete s;
    }
  }
  std::vector<double> xs, ys;
  for (const QPointF& p : shown) {
    xs.push_back(p.x());
    ys.push_back(p.y());
  }
  AxisRange xr = fit_axis(xs);
  const AxisRange yr = fit_axis(ys);
  const double margin = 100 * min_free();
  if (plot_ != SearchPlot::kTimeVsCost && !xr.log && margin >= xr.lo - 0.15 * (xr.hi - xr.lo)) {
    // The margin every plan must leave: a dashed line at it, when it is near the plans (a line far
    // to the left of them all would squeeze them to one side).
    xr.lo = std::max(0.0, std::min(xr.lo, margin - 0.02 * (xr.hi - xr.lo)));
    auto* line = new QLineSeries;
    line->setName(tr("min. free %1%").arg(margin, 0, 'g', 3));
    QPen pen(QColor(0xc6, 0x28, 0x28));
    pen.setStyle(Qt::DashLine);
    line->setPen(pen);
    line->append(margin, yr.lo);
    line->append(margin, yr.hi);
    c->addSeries(line);
  }
  selected_ = scatter_series_of(tr("selected"), 16, QColor(0, 0, 0, 0));
  selected_->setBorderColor(QColor(0x21, 0x21, 0x21));
  c->addSeries(selected_);
  QAbstractAxis* x = value_axis(xr, axes.x_title);
  QAbstractAxis* y = value_axis(yr, axes.y_title);
  c->addAxis(x, Qt::AlignBottom);
  c->addAxis(y, Qt::AlignLeft);
  for (QAbstractSeries* s : c->series()) {
    s->attachAxis(x);
    s->attachAxis(y);
  }
  // The selection ring is not a legend entry.
  for (QLegendMarker* m : c->legend()->markers(selected_)) m->setVisible(false);
  selection_changed();
}

std::vector<std::pair<QString, int>> SearchView::scatter_series() const {
  std::vector<std::pair<QString, int>> out;
  for (QAbstractSeries* s : scatter_->chart()->series())
    if (auto* xy = qobject_cast<QXYSeries*>(s)) out.emplace_back(xy->name(), static_cast<int>(xy->count()));
  return out;
}

void SearchView::click_point(const QPointF& point) {
  // The plan drawn nearest to the click, in the axes' own scale (a point is where its plan is).
  int best = -1;
  double best_d = INFINITY;
  for (int row = 0; row < static_cast<int>(points_.size()); ++row) {
    const QModelIndex at = proxy_->mapFromSource(plans_->index(row, 0));
    if (!at.isValid()) continue;
    const double dx = (points_[row].x() - point.x()) / std::max(1e-12, std::abs(point.x()) + 1e-9),
                 dy = (points_[row].y() - point.y()) / std::max(1e-12, std::abs(point.y()) + 1e-9);
    const double d = dx * dx + dy * dy;
    if (d < best_d) {
      best_d = d;
      best = at.row();
    }
  }
  if (best >= 0) select_row(best);
}

void SearchView::select_row(int proxy_row) {
  if (proxy_row < 0 || proxy_row >= proxy_->rowCount()) return;
  table_->selectRow(proxy_row);
  table_->scrollTo(proxy_->index(proxy_row, 0));
}

std::vector<int> SearchView::selected_plan_rows() const {
  QModelIndexList rows = table_->selectionModel()->selectedRows();
  std::sort(rows.begin(), rows.end(),
            [](const QModelIndex& a, const QModelIndex& b) { return a.row() < b.row(); });
  std::vector<int> out;
  for (const QModelIndex& r : rows) out.push_back(proxy_->mapToSource(r).row());
  return out;
}

void SearchView::selection_changed() {
  const std::vector<int> rows = selected_plan_rows();
  use_->setEnabled(rows.size() == 1);
  compare_->setEnabled(rows.size() >= 2);
  if (!selected_) return;
  selected_->clear();
  for (int row : rows)
    if (row < static_cast<int>(points_.size())) selected_->append(points_[row]);
}

void SearchView::choose_selected() {
  const std::vector<int> rows = selected_plan_rows();
  if (rows.empty()) return;
  Q_EMIT plan_chosen(plans_->plan(rows.front()).plan);
}

void SearchView::set_column_shown(int column, bool shown) { table_->setColumnHidden(column, !shown); }

QString SearchView::visible_csv() const {
  std::vector<int> columns;
  for (int v = 0; v < RankedPlanModel::kColumnCount; ++v) {
    const int c = table_->horizontalHeader()->logicalIndex(v);
    if (!table_->isColumnHidden(c)) columns.push_back(c);
  }
  return table_csv(*proxy_, columns);
}

bool SearchView::export_csv(const QString& path, QString* error) const {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) {
    if (error) *error = path + QStringLiteral(": ") + f.errorString();
    return false;
  }
  const QByteArray bytes = visible_csv().toUtf8();
  if (f.write(bytes) != bytes.size()) {
    if (error) *error = path + QStringLiteral(": ") + f.errorString();
    return false;
  }
  return true;
}

void SearchView::ask_export_csv() {
  const QString path = QFileDialog::getSaveFileName(this, tr("Export ranked plans"),
                                                    QStringLiteral("plans.csv"), tr("CSV (*.csv)"));
  if (path.isEmpty()) return;
  QString error;
  if (!export_csv(path, &error)) QMessageBox::warning(this, tr("Export ranked plans"), error);
}

void SearchView::compare_selected() {
  const std::vector<int> rows = selected_plan_rows();
  if (rows.size() < 2) return;
  std::vector<RankedPlan> chosen;
  for (int row : rows) chosen.push_back(plans_->plan(row));
  side_by_side_->set_plans(std::move(chosen));
  if (!compare_window_) {
    compare_window_ = new QDialog(this);
    compare_window_->setWindowTitle(tr("Plans side by side"));
    auto* table = new QTableView;
    table->setModel(side_by_side_);
    make_compact(table);
    table->verticalHeader()->show();
    table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    auto* top = new QWidget;
    auto* top_layout = new QVBoxLayout(top);
    top_layout->setContentsMargins(0, 0, 0, 0);
    top_layout->addWidget(
        new QLabel(tr("The best of each row in bold. Times are the slowest stage's; memory is "
                      "the fullest device's.")));
    top_layout->addWidget(table);
    timelines_ = new PlanTimelines;
    // The simulations the timelines ran fill the table's simulated step where the search did not.
    connect(timelines_, &PlanTimelines::ready, this, [this] {
      for (int i = 0; i < timelines_->count(); ++i) side_by_side_->set_simulated(i, timelines_->step_s(i));
    });
    auto* split = new QSplitter(Qt::Vertical);
    split->addWidget(top);
    split->addWidget(timelines_);
    split->setStretchFactor(1, 1);
    auto* layout = new QVBoxLayout(compare_window_);
    layout->addWidget(split);
    compare_window_->resize(1000, 800);
  }
  std::vector<PlanInputs> inputs;
  for (int row : rows) inputs.push_back({context_.model, context_.cluster, plans_->plan(row).plan});
  timelines_->set_plans(inputs);
  compare_window_->show();
  compare_window_->raise();
}

}  // namespace foresight::gui
