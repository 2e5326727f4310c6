// Topology: the Setup's cluster, sized to the plan, as the simulator's graph -- network tiers,
// nodes with their NICs, accelerators and node switch -- with the links coloured by how busy they
// were in the last simulation of the plan ("Simulate network use" here, or the Setup's
// "Simulate"). The graph is built and laid out on a worker thread (draw_topology); the newest
// request wins.
#pragma once

#include <QFutureWatcher>
#include <QWidget>
#include <vector>

#include "gui/models/plan_inputs.h"
#include "gui/models/topology_graph.h"

class QLabel;
class QPushButton;

namespace foresight::gui {

class TopologyWidget;

class TopologyView : public QWidget {
  Q_OBJECT
 public:
  explicit TopologyView(QWidget* parent = nullptr);

  // The Setup's plan changed: draw its cluster, with the last utilisation if that simulation was
  // of this very plan.
  void set_evaluation(const Evaluation& e);
  // Utilisation from a simulation of `report.inputs` (kept; shown while that plan is the Setup's).
  void set_link_report(LinkReport report);
  // Simulates the current plan on a worker thread; simulated() follows.
  void simulate();
  // Draws the current cluster and links now, on this thread (screenshot mode, tests).
  void draw_now();

  TopologyWidget* picture() const { return picture_; }
  // For File > Export: the picture.
  std::vector<QWidget*> plots() const;
  QString status_text() const;

 Q_SIGNALS:
  void drawn();
  void simulated();

 private:
  void request_drawing();
  void show_drawing(const Result<TopologyDrawing>& d);
  bool links_match() const;

  Evaluation evaluation_;
  LinkReport links_;
  bool have_links_ = false;
  quint64 generation_ = 0;
  QLabel* summary_;
  QLabel* status_;
  QPushButton* simulate_;
  TopologyWidget* picture_;
  QFutureWatcher<Result<LinkReport>> simulation_;
};

}  // namespace foresight::gui
