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
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "gui/models/format.h"
#include "gui/models/timeline_model.h"
#include "gui/views/tables.h"
#include "gui/views/timeline_widget.h"

namespace foresight::gui {

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
  model_ = new TimelineModel(this);
  proxy_ = new QSortFilterProxyModel(this);
  proxy_->setSourceModel(model_);
  proxy_->setSortRole(Qt::UserRole);
  proxy_->setFilterKeyColumn(TimelineModel::kId);
  proxy_->setFilterCaseSensitivity(Qt::CaseInsensitive);

  auto* open = new QPushButton(tr("Open trace..."));
  auto* fit = new QPushButton(tr("Fit"));
  collapse_ = new QCheckBox(tr("One rank per stage"));
  collapse_->setToolTip(tr("ranks of a pipeline stage run the same program: show the lowest rank of each"));
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
  bar->addWidget(info_, 1);
  auto* lower = new QWidget;
  auto* lower_layout = new QVBoxLayout(lower);
  lower_layout->setContentsMargins(0, 0, 0, 0);
  lower_layout->addWidget(filter_);
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
  connect(filter_, &QLineEdit::textChanged, proxy_, &QSortFilterProxyModel::setFilterFixedString);
  connect(table_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& current) {
            if (current.isValid())
              gantt_->show_bar(static_cast<std::size_t>(proxy_->mapToSource(current).row()));
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
  what += tr(". Wheel: zoom, drag: pan, Shift+wheel: scroll rows, double-click: fit.");
  info_->setStyleSheet(QString());
  info_->setText(what);
  full_ = std::move(t);
  model_->set_timeline(collapse_->isChecked() ? collapse_by_stage(full_) : full_);
  Q_EMIT loaded();
}

void TimelineView::set_collapsed(bool on) {
  if (collapse_->isChecked() != on) {
    collapse_->setChecked(on);  // toggled() comes back here
    return;
  }
  model_->set_timeline(on ? collapse_by_stage(full_) : full_);
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
