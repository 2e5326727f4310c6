// Topology view: header, simulate button, the picture; drawings come from a worker thread.
#include "gui/views/topology_view.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "gui/models/format.h"
#include "gui/views/topology_widget.h"

namespace foresight::gui {

TopologyView::TopologyView(QWidget* parent) : QWidget(parent) {
  summary_ = new QLabel;
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  status_ = new QLabel;
  status_->setWordWrap(true);
  simulate_ = new QPushButton(tr("Simulate network use"));
  simulate_->setToolTip(
      tr("run the discrete-event simulator on the Setup's plan and colour the links by utilisation"));
  picture_ = new TopologyWidget;
  auto* bar = new QHBoxLayout;
  bar->addWidget(summary_, 1);
  bar->addWidget(simulate_);
  auto* top = new QVBoxLayout(this);
  top->addLayout(bar);
  top->addWidget(status_);
  top->addWidget(picture_, 1);

  connect(simulate_, &QPushButton::clicked, this, &TopologyView::simulate);
  connect(&simulation_, &QFutureWatcher<Result<LinkReport>>::finished, this, [this] {
    simulate_->setEnabled(evaluation_.ok());
    Result<LinkReport> r = simulation_.result();
    if (!r) {
      status_->setStyleSheet(QStringLiteral("color: #c62828;"));
      status_->setText(tr("Simulation failed: %1").arg(qstr(r.error().message())));
    } else {
      set_link_report(std::move(*r));
    }
    Q_EMIT simulated();
  });
}

void TopologyView::set_evaluation(const Evaluation& e) {
  evaluation_ = e;
  simulate_->setEnabled(e.ok() && !simulation_.isRunning());
  if (!e.has_prediction) {
    ++generation_;  // a drawing still on its way is stale
    summary_->setText(QString());
    status_->setStyleSheet(QStringLiteral("color: #c62828;"));
    status_->setText(qstr(e.error));
    picture_->clear(tr("No valid plan: the topology is drawn for a plan's cluster."));
    return;
  }
  request_drawing();
}

void TopologyView::set_link_report(LinkReport report) {
  links_ = std::move(report);
  have_links_ = true;
  if (evaluation_.has_prediction && links_match()) request_drawing();
}

void TopologyView::simulate() {
  if (simulation_.isRunning() || !evaluation_.ok()) return;
  simulate_->setEnabled(false);
  status_->setStyleSheet(QString());
  status_->setText(tr("Simulating one step..."));
  simulation_.setFuture(QtConcurrent::run([in = evaluation_.inputs] { return simulate_link_use(in); }));
}

void TopologyView::request_drawing() {
  const quint64 gen = ++generation_;
  const bool linked = links_match();
  auto* watcher = new QFutureWatcher<Result<TopologyDrawing>>(this);
  connect(watcher, &QFutureWatcher<Result<TopologyDrawing>>::finished, this, [this, watcher, gen] {
    watcher->deleteLater();
    if (gen == generation_) show_drawing(watcher->result());
  });
  watcher->setFuture(QtConcurrent::run([cluster = evaluation_.cluster,
                                        busiest = linked ? links_.busiest : std::vector<LinkUse>{},
                                        step = linked ? links_.step_s : 0.0]() -> Result<TopologyDrawing> {
    FS_ASSIGN_OR_RETURN(TopologyDrawing d, draw_topology(cluster, busiest));
    d.step_s = step;
    return d;
  }));
}

void TopologyView::draw_now() {
  ++generation_;
  if (!evaluation_.has_prediction) return;
  const bool linked = links_match();
  Result<TopologyDrawing> d =
      draw_topology(evaluation_.cluster, linked ? links_.busiest : std::vector<LinkUse>{});
  if (d && linked) d->step_s = links_.step_s;
  show_drawing(d);
}

void TopologyView::show_drawing(const Result<TopologyDrawing>& d) {
  if (!d) {
    status_->setStyleSheet(QStringLiteral("color: #c62828;"));
    status_->setText(qstr(d.error().message()));
    picture_->clear(tr("Cannot draw this cluster."));
    Q_EMIT drawn();
    return;
  }
  summary_->setText(qstr(describe(*d)));
  status_->setStyleSheet(QString());
  if (d->reported_links > 0)
    status_->setText(
        tr("Coloured: the %1 busiest links of a simulated step of %2 (%3 of them drawn); the simulator "
           "reports only its busiest links, the others stay grey.")
            .arg(d->reported_links)
            .arg(seconds_text(d->step_s))
            .arg(d->drawn_reported_links));
  else
    status_->setText(tr(
        "Not simulated yet: links are grey until \"Simulate network use\" (or the Setup's Simulate) runs."));
  picture_->set_drawing(*d);
  Q_EMIT drawn();
}

std::vector<QWidget*> TopologyView::plots() const { return {picture_}; }

bool TopologyView::links_match() const {
  return have_links_ && links_.inputs == evaluation_.inputs && links_.cluster == evaluation_.cluster;
}

QString TopologyView::status_text() const { return status_->text(); }

}  // namespace foresight::gui
