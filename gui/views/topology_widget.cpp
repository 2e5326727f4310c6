// Topology painting, hit testing and tooltips.
#include "gui/views/topology_widget.h"

#include <QHelpEvent>
#include <QLinearGradient>
#include <QPainter>
#include <QPainterPath>
#include <QToolTip>
#include <cmath>

#include "gui/models/format.h"

namespace foresight::gui {

namespace {
constexpr double kLabelWidth = 96;  // row labels on the left
constexpr double kLegendHeight = 30;
constexpr double kMargin = 8;

// Distance from p to the segment ab.
double distance_to_segment(QPointF p, QPointF a, QPointF b) {
  const QPointF ab = b - a;
  const double len2 = QPointF::dotProduct(ab, ab);
  const double t = len2 > 0 ? std::clamp(QPointF::dotProduct(p - a, ab) / len2, 0.0, 1.0) : 0.0;
  const QPointF q = a + t * ab - p;
  return std::sqrt(QPointF::dotProduct(q, q));
}

QString bandwidth_text(double bytes_per_s) {
  return bytes_per_s >= 1e9 ? QStringLiteral("%1 GB/s").arg(bytes_per_s / 1e9, 0, 'f', 1)
                            : QStringLiteral("%1 MB/s").arg(bytes_per_s / 1e6, 0, 'f', 1);
}
}  // namespace

TopologyWidget::TopologyWidget(QWidget* parent) : QWidget(parent), message_(tr("No cluster yet.")) {
  setMouseTracking(true);
  setBackgroundRole(QPalette::Base);
  setAutoFillBackground(true);
}

void TopologyWidget::set_drawing(TopologyDrawing d) {
  drawing_ = std::move(d);
  has_drawing_ = true;
  update();
}

void TopologyWidget::clear(const QString& message) {
  drawing_ = {};
  has_drawing_ = false;
  message_ = message;
  update();
}

QRectF TopologyWidget::plot() const {
  return QRectF(kLabelWidth, kMargin, std::max(10.0, width() - kLabelWidth - kMargin),
                std::max(10.0, height() - 2 * kMargin - kLegendHeight));
}

double TopologyWidget::row_height() const { return plot().height() / std::max(1, drawing_.rows); }

double TopologyWidget::row_y(int row) const { return plot().top() + (row + 0.5) * row_height(); }

QSizeF TopologyWidget::vertex_size(const DrawnVertex& v) const {
  const double h = std::min(26.0, row_height() * 0.5);
  const double slot_w = drawing_.node_slots.empty()
                            ? plot().width()
                            : plot().width() * (drawing_.node_slots[0].x1 - drawing_.node_slots[0].x0);
  switch (v.kind) {
    case VertexKind::kDevice:
      return {std::clamp(slot_w / std::max(1, std::min(drawing_.devices_per_node, 16)) - 4, 6.0, 34.0), h};
    case VertexKind::kNic:
      return {std::clamp(slot_w / std::max(1, std::min(drawing_.nics_per_node, 16)) - 4, 6.0, 40.0), h * 0.8};
    case VertexKind::kNodeSwitch:
      return {slot_w * 0.6, h};
    case VertexKind::kSwitch:
      return {std::clamp(plot().width() / 12, 30.0, 64.0), h};
  }
  return {20, h};
}

QPointF TopologyWidget::vertex_position(int vertex) const {
  const DrawnVertex& v = drawing_.vertices[static_cast<std::size_t>(vertex)];
  return {plot().left() + v.x * plot().width(), row_y(v.row)};
}

std::optional<int> TopologyWidget::vertex_at_position(QPointF pos) const {
  for (std::size_t i = 0; i < drawing_.vertices.size(); ++i) {
    const QSizeF s = vertex_size(drawing_.vertices[i]);
    const QPointF c = vertex_position(static_cast<int>(i));
    if (QRectF(c - QPointF(s.width() / 2, s.height() / 2), s).contains(pos)) return static_cast<int>(i);
  }
  return std::nullopt;
}

std::optional<int> TopologyWidget::link_at_position(QPointF pos) const {
  std::optional<int> best;
  double best_d = 4.0;
  for (std::size_t i = 0; i < drawing_.links.size(); ++i) {
    const DrawnLink& l = drawing_.links[i];
    const double dist = distance_to_segment(pos, vertex_position(l.a), vertex_position(l.b));
    if (dist <= best_d) {
      best_d = dist;
      best = static_cast<int>(i);
    }
  }
  return best;
}

void TopologyWidget::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  const QPalette& pal = palette();
  p.fillRect(rect(), pal.base());
  if (!has_drawing_) {
    p.setPen(pal.color(QPalette::PlaceholderText));
    p.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap, message_);
    return;
  }
  QFont small = font();
  small.setPointSizeF(std::max(6.0, font().pointSizeF() * 0.85));
  paint_row_labels(p);
  p.setFont(small);
  paint_node_frames(p, small);
  paint_links(p);
  paint_vertices(p, QFontMetricsF(small));
  p.setFont(font());
  paint_legend(p);
}

// Row labels, and the count of switches not drawn at the end of each tier row.
void TopologyWidget::paint_row_labels(QPainter& p) const {
  const TopologyDrawing& d = drawing_;
  const QPalette& pal = palette();
  const QRectF area = plot();
  const double rh = row_height();
  const QFontMetricsF fm(font());
  p.setPen(pal.color(QPalette::Text));
  const int tiers = static_cast<int>(d.tier_names.size());
  for (int t = 0; t < tiers; ++t) {
    const int row = tiers - 1 - t;
    p.drawText(QRectF(4, row_y(row) - rh / 2, kLabelWidth - 8, rh), Qt::AlignVCenter | Qt::AlignLeft,
               tr("%1 (%2)").arg(qstr(d.tier_names[t])).arg(d.switches_per_tier[t]));
    if (d.hidden_switches_per_tier[t] > 0) {
      p.setPen(pal.color(QPalette::PlaceholderText));
      p.drawText(QRectF(area.left(), row_y(row) - rh / 2, area.width(), rh),
                 Qt::AlignVCenter | Qt::AlignRight, tr("+%1 more").arg(d.hidden_switches_per_tier[t]));
      p.setPen(pal.color(QPalette::Text));
    }
  }
  if (d.nic_row >= 0)
    p.drawText(QRectF(4, row_y(d.nic_row) - rh / 2, kLabelWidth - 8, rh), Qt::AlignVCenter | Qt::AlignLeft,
               tr("NICs"));
  // The accelerator's name on as many lines as it needs ("h100-sxm5-" / "80gb"), not elided.
  p.drawText(QRectF(4, row_y(d.device_row) - rh / 2, kLabelWidth - 8, rh),
             Qt::AlignVCenter | Qt::AlignLeft | Qt::TextWrapAnywhere, qstr(d.accelerator));
  p.drawText(QRectF(4, row_y(d.node_switch_row) - rh / 2, kLabelWidth - 8, rh),
             Qt::AlignVCenter | Qt::AlignLeft, tr("node fabric"));
}

// Node frames, and a dashed one for the nodes not drawn. Draws with `small`, leaves it set.
void TopologyWidget::paint_node_frames(QPainter& p, const QFont& small) const {
  const TopologyDrawing& d = drawing_;
  const QPalette& pal = palette();
  const QRectF area = plot();
  const double rh = row_height();
  const double frame_top = row_y(d.nic_row >= 0 ? d.nic_row : d.device_row) - rh * 0.45;
  const double frame_bottom = row_y(d.node_switch_row) + rh * 0.48;
  for (const NodeSlot& s : d.node_slots) {
    const QRectF frame(area.left() + s.x0 * area.width() + 3, frame_top, (s.x1 - s.x0) * area.width() - 6,
                       frame_bottom - frame_top);
    p.setPen(QPen(pal.color(QPalette::Mid), 1));
    p.setBrush(pal.color(QPalette::AlternateBase));
    p.drawRoundedRect(frame, 6, 6);
    p.setPen(pal.color(QPalette::Text));
    QString label = tr("node %1").arg(s.node);
    if (s.hidden_devices > 0) label += tr(" (+%1 devices)").arg(s.hidden_devices);
    p.drawText(frame.adjusted(6, 0, -6, -2), Qt::AlignBottom | Qt::AlignLeft, label);
  }
  if (d.more_x < 0) return;
  const double slot = area.width() / (d.node_slots.size() + 1);
  const QRectF frame(area.left() + d.more_x * area.width() - slot / 2 + 3, frame_top, slot - 6,
                     frame_bottom - frame_top);
  p.setPen(QPen(pal.color(QPalette::Mid), 1, Qt::DashLine));
  p.setBrush(Qt::NoBrush);
  p.drawRoundedRect(frame, 6, 6);
  p.setPen(pal.color(QPalette::Text));
  p.setFont(font());
  p.drawText(frame, Qt::AlignCenter | Qt::TextWordWrap,
             tr("+%1 more node%2\n(%3 accelerators)")
                 .arg(d.hidden_nodes)
                 .arg(d.hidden_nodes == 1 ? QString() : QStringLiteral("s"))
                 .arg(1LL * d.hidden_nodes * d.devices_per_node));
  p.setFont(small);
}

// Links: unreported ones first so that the coloured ones lie on top.
void TopologyWidget::paint_links(QPainter& p) const {
  const double rh = row_height();
  for (int pass = 0; pass < 2; ++pass)
    for (const DrawnLink& l : drawing_.links) {
      if (l.reported() != (pass == 1)) continue;
      const QPointF a = vertex_position(l.a), b = vertex_position(l.b);
      p.setPen(QPen(link_colour(drawing_, l), l.reported() ? 2.5 : 1.2));
      p.setBrush(Qt::NoBrush);
      if (std::abs(a.y() - b.y()) < 1) {
        // Same row (torus neighbours): an arc above the row so that rings do not overlap.
        QPainterPath path(a);
        const double lift = std::min(rh * 0.45, 0.15 * std::abs(b.x() - a.x()) + 8);
        path.quadTo(QPointF((a.x() + b.x()) / 2, a.y() - lift), b);
        p.drawPath(path);
      } else {
        p.drawLine(a, b);
      }
    }
  // The busiest links carry their figure on a small box, a quarter of the way down from their
  // upper end (where links that meet below are still apart); a box that would cover another is
  // left out.
  const QFont before = p.font();
  QFont small = before;
  small.setPointSizeF(small.pointSizeF() * 0.8);
  p.setFont(small);
  const QFontMetricsF fm(small);
  std::vector<QRectF> placed;
  for (std::size_t i : busiest_drawn_links(drawing_, 8)) {
    const DrawnLink& l = drawing_.links[i];
    QPointF top = vertex_position(l.a), bottom = vertex_position(l.b);
    if (top.y() > bottom.y()) std::swap(top, bottom);
    const QPointF at = top + 0.3 * (bottom - top);
    const QString text = percent_text(l.utilisation);
    const QRectF box(at.x() - fm.horizontalAdvance(text) / 2 - 2, at.y() - fm.height() / 2,
                     fm.horizontalAdvance(text) + 4, fm.height());
    if (std::any_of(placed.begin(), placed.end(), [&](const QRectF& r) { return r.intersects(box); }))
      continue;
    placed.push_back(box);
    p.setPen(QPen(link_colour(drawing_, l), 1));
    p.setBrush(Qt::white);
    p.drawRect(box);
    p.setPen(Qt::black);
    p.drawText(box, Qt::AlignCenter, text);
  }
  p.setBrush(Qt::NoBrush);
  p.setFont(before);
}

namespace {
QColor vertex_colour(VertexKind kind) {
  switch (kind) {
    case VertexKind::kDevice:
      return QColor(0x4c, 0x72, 0xb0);
    case VertexKind::kNic:
      return QColor(0x8c, 0x8c, 0x8c);
    case VertexKind::kNodeSwitch:
      return QColor(0x55, 0xa8, 0x68);
    case VertexKind::kSwitch:
      return QColor(0x81, 0x72, 0xb3);
  }
  return QColor();
}
}  // namespace

// Vertices: a rounded box of their kind's colour, labelled when the label fits (`sfm`: the font set).
void TopologyWidget::paint_vertices(QPainter& p, const QFontMetricsF& sfm) const {
  for (std::size_t i = 0; i < drawing_.vertices.size(); ++i) {
    const DrawnVertex& v = drawing_.vertices[i];
    const QSizeF s = vertex_size(v);
    const QRectF r(vertex_position(static_cast<int>(i)) - QPointF(s.width() / 2, s.height() / 2), s);
    const QColor fill = vertex_colour(v.kind);
    p.setPen(QPen(fill.darker(140), 1));
    p.setBrush(fill);
    p.drawRoundedRect(r, 3, 3);
    const QString text = qstr(v.label);
    if (sfm.horizontalAdvance(text) <= r.width() - 2) {
      p.setPen(Qt::white);
      p.drawText(r, Qt::AlignCenter, text);
    }
  }
}

// Legend: the colour scale and what grey means.
void TopologyWidget::paint_legend(QPainter& p) const {
  const TopologyDrawing& d = drawing_;
  const QPalette& pal = palette();
  const QRectF area = plot();
  const QFontMetricsF fm(font());
  const QRectF legend(area.left(), height() - kMargin - kLegendHeight + 6, area.width(), kLegendHeight - 6);
  const double bar_w = std::min(220.0, legend.width() / 4);
  QLinearGradient grad(legend.left(), 0, legend.left() + bar_w, 0);
  for (double u : {0.0, 0.25, 0.5, 0.75, 1.0}) grad.setColorAt(u, utilisation_colour(u));
  p.setPen(Qt::NoPen);
  p.setBrush(grad);
  p.drawRect(QRectF(legend.left(), legend.top() + 4, bar_w, 10));
  p.setPen(pal.color(QPalette::Text));
  p.drawText(QRectF(legend.left(), legend.top() + 12, bar_w, legend.height() - 12),
             Qt::AlignLeft | Qt::AlignVCenter, QStringLiteral("0%"));
  p.drawText(QRectF(legend.left(), legend.top() + 12, bar_w, legend.height() - 12),
             Qt::AlignRight | Qt::AlignVCenter, percent_text(utilisation_scale(d)));
  const QString note =
      d.reported_links > 0
          ? tr("utilisation in the simulated step (%1), scaled to the busiest link; grey: not among its %2 "
               "busiest")
                .arg(seconds_text(d.step_s))
                .arg(d.reported_links)
          : tr("grey: no simulation yet -- press \"Simulate network use\"");
  p.drawText(QRectF(legend.left() + bar_w + 12, legend.top(), legend.width() - bar_w - 12, legend.height()),
             Qt::AlignLeft | Qt::AlignVCenter,
             fm.elidedText(note, Qt::ElideRight, legend.width() - bar_w - 12));
}

bool TopologyWidget::event(QEvent* event) {
  if (event->type() != QEvent::ToolTip || !has_drawing_) return QWidget::event(event);
  auto* help = static_cast<QHelpEvent*>(event);
  QString text;
  if (auto v = vertex_at_position(help->pos())) {
    const DrawnVertex& dv = drawing_.vertices[static_cast<std::size_t>(*v)];
    text = qstr(dv.name);
  } else if (auto l = link_at_position(help->pos())) {
    const DrawnLink& dl = drawing_.links[static_cast<std::size_t>(*l)];
    text = tr("%1 <-> %2\n%3, %4 per direction")
               .arg(qstr(drawing_.vertices[dl.a].name), qstr(drawing_.vertices[dl.b].name), qstr(dl.kind),
                    bandwidth_text(dl.bandwidth));
    if (dl.reported())
      text += tr("\nutilisation %1 (busier direction), %2 in the step")
                  .arg(percent_text(dl.utilisation), bytes_text(dl.bytes));
    else
      text += tr("\nnot among the busiest links reported");
  }
  if (text.isEmpty())
    QToolTip::hideText();
  else
    QToolTip::showText(help->globalPos(), text, this);
  return true;
}

}  // namespace foresight::gui
