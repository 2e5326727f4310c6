// Paints a TopologyDrawing: network tiers on top, each drawn node framed below with its NICs,
// accelerators and node switch, links coloured by utilisation (utilisation_colour), and a legend.
// Hovering a link or a vertex shows its name, kind, bandwidth and traffic. No logic: what is drawn
// and where comes from draw_topology().
#pragma once

#include <QWidget>
#include <optional>

#include "gui/models/topology_graph.h"

class QFont;
class QFontMetricsF;
class QPainter;

namespace foresight::gui {

class TopologyWidget : public QWidget {
  Q_OBJECT
 public:
  explicit TopologyWidget(QWidget* parent = nullptr);

  void set_drawing(TopologyDrawing d);
  void clear(const QString& message);
  const TopologyDrawing& drawing() const { return drawing_; }
  bool has_drawing() const { return has_drawing_; }

  // Pixel centre of a drawn vertex, and the link / vertex under a position (tooltips, tests).
  QPointF vertex_position(int vertex) const;
  std::optional<int> link_at_position(QPointF pos) const;
  std::optional<int> vertex_at_position(QPointF pos) const;

  QSize sizeHint() const override { return {900, 520}; }
  QSize minimumSizeHint() const override { return {400, 260}; }

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override;

 private:
  // paintEvent's layers, bottom to top.
  void paint_row_labels(QPainter& p) const;
  void paint_node_frames(QPainter& p, const QFont& small) const;
  void paint_links(QPainter& p) const;
  void paint_vertices(QPainter& p, const QFontMetricsF& sfm) const;
  void paint_legend(QPainter& p) const;
  QRectF plot() const;
  double row_height() const;
  double row_y(int row) const;
  QSizeF vertex_size(const DrawnVertex& v) const;

  TopologyDrawing drawing_;
  bool has_drawing_ = false;
  QString message_;
};

}  // namespace foresight::gui
