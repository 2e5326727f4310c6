// Timeline view: file loading, Gantt and op table.
#include "gui/views/timeline_view.h"

#include <QCheckBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "gui/models/format.h"
#include "gui/models/timeline_model.h"
#include "gui/views/tables.h"
#include "gui/views/timeline_widget.h"

namespace foresight::gui {

namespace {

// The op table's proxy: the id filter, and (when on) only the ops that overlap the Gantt's range.
class RangeFilter : public QSortFilterProxyModel {
 public:
  using QSortFilterProxyModel::QSortFilterProxyModel;
  void set_range(bool on, double t0, double t1) {
    if (on == on_ && t0 == t0_ && t1 == t1_) return;
    on_ = on;
    t0_ = t0;
    t1_ = t1;
    invalidateRowsFilter();
  }

 protected:
  bool filterAcceptsRow(int row, const QModelIndex& parent) const override {
    if (!QSortFilterProxyModel::filterAcceptsRow(row, parent)) return false;
    if (!on_) return true;
    const auto* m = static_cast<const TimelineModel*>(sourceModel());
    const TimelineBar& b = m->timeline().bars[static_cast<std::size_t>(row)];
    return b.end_s() >= t0_ && b.start_s <= t1_;
  }

 private:
  bool on_ = false;
  double t0_ = 0, t1_ = 0;
};

}  // namespace

// Over 80 lines, on purpose: it builds the view's widgets, lays them out and wires their signals
// in reading order, a few lines each; split, one screen's layout would be scattered over helpers
// that each run once.
TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
  model_ = new TimelineModel(this);
  proxy_ = new RangeFilter(this);
  proxy_->setSourceModel(model_);
  proxy_->setSortRole(Qt::UserRole);
  proxy_->setFilterKeyColumn(TimelineModel::kId);
  proxy_->setFilterCaseSensitivity(Qt::CaseInsensitive);

  auto* open = new QPushButton(tr("Open trace..."));
  auto* fit = new QPushButton(tr("Fit"));
  collapse_ = new QCheckBox(tr("One rank per stage"));
  collapse_->setToolTip(tr("ranks of a pipeline stage run the same program: show the lowest rank of each"));
  critical_ = new QCheckBox(tr("Critical path"));
  critical_->setChecked(true);
  critical_->setToolTip(
      tr("underline the ops the step waits on, from its start to its last end (simulate --trace marks them; "
         "Perfetto draws them as arrows)"));
  fit->setToolTip(tr("show the whole step (or double-click the chart)"));
  info_ = new QLabel(tr("No trace loaded."));
  info_->setWordWrap(true);
  info_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  gantt_ = new TimelineWidget;
  gantt_->set_model(model_);
  gantt_->setToolTip(QString());
  filter_ = new QLineEdit;
  filter_->setPlaceholderText(tr("filter op ids, e.g. L3/mb2 or grad_reduce"));
  filter_->setClearButtonEnabled(true);
  in_view_ = new QCheckBox(tr("Only ops in view"));
  in_view_->setChecked(true);
  in_view_->setToolTip(tr("the table lists the ops the chart shows, and follows zoom and pan"));
  stats_ = new QLabel;
  stats_->setWordWrap(true);
  stats_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  // Zoom and pan re-filter the table and re-sum the range once the wheel rests.
  refresh_ = new QTimer(this);
  refresh_->setSingleShot(true);
  refresh_->setInterval(120);
  table_ = new QTableView;
  table_->setModel(proxy_);
  table_->setSortingEnabled(true);
  table_->sortByColumn(TimelineModel::kStart, Qt::AscendingOrder);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  make_compact(table_);
  table_->horizontalHeader()->setStretchLastSection(true);
  for (auto [column, width] : {std::pair{TimelineModel::kLane, 140},
                               {TimelineModel::kName, 150},
                               {TimelineModel::kId, 280},
                               {TimelineModel::kKind, 130},
                               {TimelineModel::kStart, 100},
                               {TimelineModel::kDuration, 100}})
    table_->setColumnWidth(column, width);

  auto* bar = new QHBoxLayout;
  bar->addWidget(open);
  bar->addWidget(fit);
  bar->addWidget(collapse_);
  bar->addWidget(critical_);
  bar->addWidget(info_, 1);
  auto* lower = new QWidget;
  auto* lower_layout = new QVBoxLayout(lower);
  lower_layout->setContentsMargins(0, 0, 0, 0);
  auto* filters = new QHBoxLayout;
  filters->addWidget(filter_, 1);
  filters->addWidget(in_view_);
  lower_layout->addWidget(stats_);
  lower_layout->addLayout(filters);
  lower_layout->addWidget(table_, 1);
  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(gantt_);
  split->addWidget(lower);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  split->setSizes({440, 260});
  auto* top = new QVBoxLayout(this);
  top->addLayout(bar);
  top->addWidget(split, 1);

  connect(open, &QPushButton::clicked, this, &TimelineView::open_dialog);
  connect(fit, &QPushButton::clicked, gantt_, &TimelineWidget::fit);
  connect(collapse_, &QCheckBox::toggled, this, &TimelineView::set_collapsed);
  connect(critical_, &QCheckBox::toggled, gantt_, &TimelineWidget::set_show_critical);
  connect(filter_, &QLineEdit::textChanged, proxy_, &QSortFilterProxyModel::setFilterFixedString);
  connect(gantt_, &TimelineWidget::range_changed, refresh_, qOverload<>(&QTimer::start));
  connect(refresh_, &QTimer::timeout, this, &TimelineView::refresh_range);
  connect(in_view_, &QCheckBox::toggled, this, &TimelineView::refresh_range);
  connect(table_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& current) {
            if (current.isValid() && !following_chart_)
              gantt_->show_bar(static_cast<std::size_t>(proxy_->mapToSource(current).row()));
          });
  // A bar clicked in the chart is selected in the table too (where the table shows it).
  connect(gantt_, &TimelineWidget::bar_selected, this, [this](std::size_t clicked) {
    const QModelIndex row = proxy_->mapFromSource(model_->index(static_cast<int>(clicked), 0));
    if (!row.isValid()) return;
    following_chart_ = true;
    table_->selectionModel()->setCurrentIndex(
        row, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    table_->scrollTo(row);
    following_chart_ = false;
  });
  connect(&watcher_, &QFutureWatcher<Result<Timeline>>::finished, this, [this] {
    Result<Timeline> r = watcher_.result();
    if (!r)
      show_error(qstr(r.error().message()));
    else
      set_timeline(std::move(*r));
  });
}

std::vector<QWidget*> TimelineView::plots() const { return {gantt_}; }

void TimelineView::open_dialog() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open a Chrome trace"), QString(),
                                                    tr("Chrome traces (*.json);;All files (*)"));
  if (!path.isEmpty()) open_file(path);
}

void TimelineView::open_file(const QString& path) {
  if (watcher_.isRunning()) return;
  info_->setStyleSheet(QString());
  info_->setText(tr("Loading %1...").arg(path));
  watcher_.setFuture(QtConcurrent::run([p = path.toStdString()] { return load_timeline(p); }));
}

void TimelineView::set_timeline(Timeline t) {
  QString what = tr("<b>%1</b>: %2 ops on %3 lanes, step %4")
                     .arg(QFileInfo(qstr(t.file)).fileName().toHtmlEscaped())
                     .arg(t.bars.size())
                     .arg(t.lanes.size())
                     .arg(seconds_text(t.step_s));
  if (!t.kind.empty() || !t.model.empty())
    what += tr(" -- %1 %2 on %3").arg(qstr(t.kind), qstr(t.model), qstr(t.cluster)).toHtmlEscaped();
  if (!t.clock_note.empty()) what += QStringLiteral("; ") + qstr(t.clock_note).toHtmlEscaped();
  if (!t.critical_note.empty()) what += QStringLiteral("; ") + qstr(t.critical_note).toHtmlEscaped();
  what += tr(". Wheel: zoom, drag: pan, Shift+wheel: scroll rows, double-click: fit.");
  info_->setStyleSheet(QString());
  info_->setText(what);
  full_ = std::move(t);
  model_->set_timeline(collapse_->isChecked() ? collapse_by_stage(full_) : full_);
  refresh_range();
  Q_EMIT loaded();
}

void TimelineView::show_busy(const QString& message) {
  info_->setStyleSheet(QString());
  info_->setText(message.toHtmlEscaped());
}

void TimelineView::refresh_range() {
  refresh_->stop();
  const double t0 = gantt_->range_begin(), t1 = gantt_->range_end();
  static_cast<RangeFilter*>(proxy_)->set_range(in_view_->isChecked(), t0, t1);
  if (model_->rowCount() == 0) {
    stats_->clear();
    return;
  }
  // What the view holds, summed over its lanes: the largest kinds and streams, and the
  // communication no compute of its rank hides.
  const Timeline& tl = model_->timeline();
  const RangeStats r = range_stats(tl, std::max(t0, tl.begin_s), std::min(t1, tl.end_s));
  auto top = [](const std::vector<std::pair<std::string, double>>& v, std::size_t n) {
    QStringList out;
    for (std::size_t i = 0; i < std::min(n, v.size()); ++i)
      out << QStringLiteral("%1 %2").arg(qstr(v[i].first), seconds_text(v[i].second));
    return out.join(QStringLiteral(", "));
  };
  stats_->setText(tr("In view %1 to %2 (%3): by kind %4; by stream %5; exposed communication %6 over %7 "
                     "rank(s).")
                      .arg(seconds_text(r.t0), seconds_text(r.t1), seconds_text(r.t1 - r.t0), top(r.kinds, 5),
                           top(r.streams, 4), seconds_text(r.exposed_communication_s))
                      .arg(r.ranks));
}

QString TimelineView::info_text() const { return info_->text(); }
QString TimelineView::range_text() const { return stats_->text(); }
int TimelineView::table_rows() const { return proxy_->rowCount(); }

void TimelineView::set_collapsed(bool on) {
  if (collapse_->isChecked() != on) {
    collapse_->setChecked(on);  // toggled() comes back here
    return;
  }
  model_->set_timeline(on ? collapse_by_stage(full_) : full_);
  refresh_range();
}

void TimelineView::focus_bar(std::size_t bar) {
  const QModelIndex index = proxy_->mapFromSource(model_->index(static_cast<int>(bar), 0));
  if (!index.isValid()) return;
  table_->setCurrentIndex(index);
  table_->scrollTo(index, QAbstractItemView::PositionAtCenter);
}

void TimelineView::show_error(const QString& message) {
  info_->setStyleSheet(QStringLiteral("color: #c62828;"));
  info_->setText(message.toHtmlEscaped());
}

}  // namespace foresight::gui
