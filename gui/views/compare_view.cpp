// Compare view: two files, the report tables and two synchronised Gantt charts.
#include "gui/views/compare_view.h"

#include <QFileDialog>
#include <QFileInfo>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>
#include <cmath>

#include "gui/models/compare_models.h"
#include "gui/models/format.h"
#include "gui/models/timeline_model.h"
#include "gui/views/tables.h"
#include "gui/views/timeline_widget.h"

namespace foresight::gui {

namespace {

// `stretch`: the column that takes the width left over.
QTableView* sorted_table(QAbstractItemModel* source, QObject* owner, int stretch) {
  auto* proxy = new QSortFilterProxyModel(owner);
  proxy->setSourceModel(source);
  proxy->setSortRole(Qt::UserRole);
  auto* t = new QTableView;
  t->setModel(proxy);
  t->setSortingEnabled(true);
  t->sortByColumn(-1, Qt::AscendingOrder);  // the report's own order until a header is clicked
  t->setSelectionBehavior(QAbstractItemView::SelectRows);
  make_compact(t);
  t->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  t->horizontalHeader()->setSectionResizeMode(stretch, QHeaderView::Stretch);
  return t;
}

QWidget* titled(const QString& title, QWidget* w) {
  auto* box = new QWidget;
  auto* l = new QVBoxLayout(box);
  l->setContentsMargins(0, 0, 0, 0);
  l->setSpacing(2);
  auto* label = new QLabel(title);
  QFont f = label->font();
  f.setBold(true);
  label->setFont(f);
  l->addWidget(label);
  l->addWidget(w, 1);
  return box;
}

// The comparison's notes as lines under the summary; a synthetic trace's in the warning colour.
QString notes_html(const Comparison& c) {
  QString out;
  for (const std::string& n : c.notes)
    out += QStringLiteral("<br>") +
           (c.synthetic ? QStringLiteral("<span style=\"color:#b36b00\"><b>Note:</b> ")
                        : QStringLiteral("<span><b>Note:</b> ")) +
           qstr(n).toHtmlEscaped() + QStringLiteral("</span>");
  return out;
}

}  // namespace

CompareView::CompareView(QWidget* parent) : QWidget(parent) {
  kinds_ = new CompareKindModel(this);
  worst_ = new WorstOpsModel(this);
  predicted_ = new TimelineModel(this);
  measured_ = new TimelineModel(this);

  auto* pick_predicted = new QPushButton(tr("Predicted trace..."));
  auto* pick_measured = new QPushButton(tr("Measured trace..."));
  predicted_label_ = new QLabel(tr("(none)"));
  measured_label_ = new QLabel(tr("(none)"));
  compare_ = new QPushButton(tr("Compare"));
  compare_->setEnabled(false);
  summary_ =
      new QLabel(tr("Open a trace from `foresight simulate --trace` and, of the same plan, one from "
                    "`foresight run --trace` or a PyTorch profiler trace (compared by kind of op)."));
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);

  predicted_gantt_ = new TimelineWidget;
  predicted_gantt_->set_model(predicted_);
  measured_gantt_ = new TimelineWidget;
  measured_gantt_->set_model(measured_);
  // One time axis: zooming or panning either chart moves the other.
  connect(predicted_gantt_, &TimelineWidget::range_changed, measured_gantt_, &TimelineWidget::set_range);
  connect(measured_gantt_, &TimelineWidget::range_changed, predicted_gantt_, &TimelineWidget::set_range);

  auto* files = new QGridLayout;
  files->addWidget(pick_predicted, 0, 0);
  files->addWidget(predicted_label_, 0, 1);
  files->addWidget(pick_measured, 1, 0);
  files->addWidget(measured_label_, 1, 1);
  files->addWidget(compare_, 0, 2, 2, 1);
  files->setColumnStretch(1, 1);

  auto* tables = new QSplitter(Qt::Horizontal);
  tables->addWidget(titled(tr("Error per op kind"), sorted_table(kinds_, this, CompareKindModel::kKind)));
  tables->addWidget(titled(tr("Largest differences"), sorted_table(worst_, this, WorstOpsModel::kId)));
  tables->setStretchFactor(0, 2);
  tables->setStretchFactor(1, 3);
  tables->setSizes({500, 680});
  auto* charts = new QSplitter(Qt::Vertical);
  charts->addWidget(titled(tr("Predicted"), predicted_gantt_));
  QWidget* measured_box = titled(tr("Measured"), measured_gantt_);
  measured_title_ = measured_box->findChild<QLabel*>();
  charts->addWidget(measured_box);
  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(tables);
  split->addWidget(charts);
  split->setStretchFactor(0, 2);
  split->setStretchFactor(1, 3);
  split->setSizes({230, 470});

  auto* top = new QVBoxLayout(this);
  top->addLayout(files);
  top->addWidget(summary_);
  top->addWidget(split, 1);

  auto pick = [this](bool predicted) {
    const QString path = QFileDialog::getOpenFileName(
        this, predicted ? tr("Predicted trace") : tr("Measured trace"), QString(),
        tr("Chrome and PyTorch profiler traces, Nsight Systems SQLite exports (*.json *.sqlite);;All files "
           "(*)"));
    if (path.isEmpty()) return;
    set_files(predicted ? path : predicted_path_, predicted ? measured_path_ : path);
  };
  connect(pick_predicted, &QPushButton::clicked, this, [pick] { pick(true); });
  connect(pick_measured, &QPushButton::clicked, this, [pick] { pick(false); });
  connect(compare_, &QPushButton::clicked, this, &CompareView::compare);
  connect(&watcher_, &QFutureWatcher<Result<Comparison>>::finished, this, [this] {
    compare_->setEnabled(true);
    Result<Comparison> r = watcher_.result();
    if (!r)
      show_error(qstr(r.error().message()));
    else
      set_comparison(std::move(*r));
  });
}

std::vector<QWidget*> CompareView::plots() const { return {predicted_gantt_, measured_gantt_}; }

void CompareView::set_files(const QString& predicted, const QString& measured) {
  predicted_path_ = predicted;
  measured_path_ = measured;
  predicted_label_->setText(predicted.isEmpty() ? tr("(none)") : predicted);
  measured_label_->setText(measured.isEmpty() ? tr("(none)") : measured);
  compare_->setEnabled(!predicted.isEmpty() && !measured.isEmpty());
}

void CompareView::compare() {
  if (predicted_path_.isEmpty() || measured_path_.isEmpty() || watcher_.isRunning()) return;
  compare_->setEnabled(false);
  summary_->setStyleSheet(QString());
  summary_->setText(tr("Comparing..."));
  watcher_.setFuture(QtConcurrent::run([p = predicted_path_.toStdString(), m = measured_path_.toStdString()] {
    return load_comparison(p, m);
  }));
}

void CompareView::set_comparison(Comparison c) {
  const CompareReport& r = c.report;
  set_files(qstr(r.predicted_file), qstr(r.measured_file));
  const double err = r.step_time_error_pct;
  const QString colour = std::abs(err) <= 10   ? QStringLiteral("#1b7f3b")
                         : std::abs(err) <= 25 ? QStringLiteral("#b36b00")
                                               : QStringLiteral("#c62828");
  summary_->setStyleSheet(QString());
  summary_->setText(tr("Step time: predicted <b>%1</b>, measured <b>%2</b>, error <b><span "
                       "style=\"color:%3\">%4%5%</span></b>"
                       " -- %6 ops matched on %7 rank%8.")
                        .arg(seconds_text(r.predicted_step_s), seconds_text(r.measured_step_s), colour,
                             err >= 0 ? QStringLiteral("+") : QString(), QString::number(err, 'f', 1))
                        .arg(r.matched_ops)
                        .arg(r.ranks.size())
                        .arg(r.ranks.size() == 1 ? QString() : QStringLiteral("s")) +
                    notes_html(c));
  measured_title_->setText(c.synthetic ? tr("Measured (synthetic: not a measurement)")
                           : c.measured_source == "foresight"
                               ? tr("Measured")
                               : tr("Measured (%1)").arg(qstr(c.measured_source)));
  kinds_->set_report(r);
  worst_->set_report(r);
  predicted_->set_timeline(std::move(c.predicted));
  measured_->set_timeline(std::move(c.measured));
  // Both charts on the longer of the two steps.
  const Timeline& p = predicted_->timeline();
  const Timeline& m = measured_->timeline();
  const double t0 = std::min(p.begin_s, m.begin_s), t1 = std::max(p.end_s, m.end_s);
  const double pad = 0.01 * (t1 - t0);
  predicted_gantt_->set_range(t0 - pad, t1 + pad);
  Q_EMIT compared();
}

void CompareView::show_error(const QString& message) {
  summary_->setStyleSheet(QStringLiteral("color: #c62828;"));
  summary_->setText(message.toHtmlEscaped());
}

QString CompareView::summary_text() const { return summary_->text(); }
QString CompareView::measured_title() const { return measured_title_->text(); }

}  // namespace foresight::gui
