// Gantt painting, zoom and pan.
#include "gui/views/timeline_widget.h"

#include <QFontMetrics>
#include <QHelpEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>
#include <map>

#include "gui/models/format.h"
#include "gui/models/timeline_model.h"
#include "sim/core/units.h"

namespace foresight::gui {

namespace {

constexpr int kLabelWidth = 150;
constexpr int kAxisHeight = 24;
constexpr int kLegendHeight = 22;
constexpr int kRowHeight = 20;  // at least; rows grow to fill the chart when there are few
constexpr int kMaxRowHeight = 40;
constexpr int kBarMargin = 3;
// The critical path: a line in the margin under its bars, in a colour no kind uses.
constexpr int kCriticalLine = 3;
const QColor kCriticalColor(0x11, 0x11, 0x11);

// Fixed colours for the kinds every trace has; other kinds (collective names) get one of a few
// warm colours by hash, so communication reads as one family.
QColor kind_color(const std::string& kind) {
  static const std::map<std::string, QColor> fixed = {
      {"gemm", QColor(0x1f, 0x77, 0xb4)},
      {"attention", QColor(0x94, 0x67, 0xbd)},
      {"elementwise", QColor(0x17, 0xbe, 0xcf)},
      {"lm_head", QColor(0x3b, 0x4c, 0xc0)},
      {"optimizer", QColor(0x8c, 0x56, 0x4b)},
      {"p2p", QColor(0x2c, 0xa0, 0x2c)},
      {"copy", QColor(0x7f, 0x7f, 0x7f)},
      // Collectives, by group: TP oranges, CP pinks, DP gradient reds, parameter gathers olive.
      {"tp_all_reduce", QColor(0xff, 0x7f, 0x0e)},
      {"tp_all_gather", QColor(0xff, 0xa5, 0x3b)},
      {"tp_reduce_scatter", QColor(0xd9, 0x5f, 0x02)},
      {"cp_kv_all_gather", QColor(0xe3, 0x77, 0xc2)},
      {"cp_dkv_reduce_scatter", QColor(0xc5, 0x1b, 0x7d)},
      {"grad_reduce", QColor(0xd6, 0x27, 0x28)},
      {"grad_all_reduce", QColor(0xd6, 0x27, 0x28)},
      {"grad_reduce_scatter", QColor(0xa5, 0x0f, 0x15)},
      {"expert_grad_reduce", QColor(0xfb, 0x6a, 0x4a)},
      {"param_all_gather", QColor(0xbc, 0xbd, 0x22)},
      {"expert_param_all_gather", QColor(0x8c, 0x8d, 0x10)}};
  if (auto it = fixed.find(kind); it != fixed.end()) return it->second;
  static const QColor warm[] = {QColor(0xff, 0x7f, 0x0e), QColor(0xd6, 0x27, 0x28), QColor(0xe3, 0x77, 0xc2),
                                QColor(0xbc, 0xbd, 0x22), QColor(0xff, 0xb0, 0x3b)};
  return warm[std::hash<std::string>{}(kind) % std::size(warm)];
}

// 1-2-5 tick step that gives about `target` ticks over `span`.
double nice_step(double span, int target) {
  const double raw = span / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

}  // namespace

TimelineWidget::TimelineWidget(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setBackgroundRole(QPalette::Base);
  setAutoFillBackground(true);
  setFocusPolicy(Qt::WheelFocus);
}

void TimelineWidget::set_model(const TimelineModel* model) {
  if (model_) disconnect(model_, nullptr, this, nullptr);
  model_ = model;
  if (model_) connect(model_, &QAbstractItemModel::modelReset, this, &TimelineWidget::model_reset);
  model_reset();
}

void TimelineWidget::model_reset() {
  kinds_.clear();
  critical_.clear();
  if (model_) {
    const auto& bars = model_->timeline().bars;
    for (std::size_t i = 0; i < bars.size(); ++i) {
      if (std::find(kinds_.begin(), kinds_.end(), bars[i].kind) == kinds_.end())
        kinds_.push_back(bars[i].kind);
      if (bars[i].critical) critical_.push_back(i);
    }
    std::stable_sort(critical_.begin(), critical_.end(), [&](std::size_t a, std::size_t b) {
      return bars[a].start_s != bars[b].start_s ? bars[a].start_s < bars[b].start_s
                                                : bars[a].end_s() < bars[b].end_s();
    });
  }
  fit();
}

void TimelineWidget::set_show_critical(bool on) {
  show_critical_ = on;
  update();
}

QSize TimelineWidget::sizeHint() const { return {900, 360}; }

QSize TimelineWidget::minimumSizeHint() const {
  return {kLabelWidth + 200, kAxisHeight + kLegendHeight + 2 * kRowHeight};
}

int TimelineWidget::rows() const {
  return model_ ? static_cast<int>(model_->timeline().lanes.size() + model_->timeline().counters.size()) : 0;
}

int TimelineWidget::row_height() const {
  const int lanes = rows();
  if (lanes == 0) return kRowHeight;
  return std::clamp((lanes_bottom() - lanes_top()) / lanes, kRowHeight, kMaxRowHeight);
}

int TimelineWidget::plot_left() const { return kLabelWidth; }
int TimelineWidget::plot_width() const { return std::max(1, width() - kLabelWidth - 8); }
int TimelineWidget::lanes_top() const { return kAxisHeight; }
int TimelineWidget::lanes_bottom() const { return height() - kLegendHeight; }

double TimelineWidget::time_at(double x) const {
  return t0_ + (x - plot_left()) / plot_width() * (t1_ - t0_);
}
double TimelineWidget::x_at(double t) const { return plot_left() + (t - t0_) / (t1_ - t0_) * plot_width(); }

void TimelineWidget::set_range(double t0_s, double t1_s) {
  if (!(t1_s > t0_s)) return;
  if (t0_s == t0_ && t1_s == t1_) return;
  t0_ = t0_s;
  t1_ = t1_s;
  update();
  Q_EMIT range_changed(t0_, t1_);
}

void TimelineWidget::fit() {
  select(std::nullopt);
  row_offset_ = 0;
  if (!model_ || model_->empty()) {
    set_range(0, 1);
    update();
    return;
  }
  const Timeline& t = model_->timeline();
  const double span = std::max(1e-9, t.end_s - t.begin_s);
  set_range(t.begin_s - 0.01 * span, t.end_s + 0.01 * span);
  update();
}

void TimelineWidget::show_bar(std::size_t bar) {
  if (!model_ || bar >= model_->timeline().bars.size()) return;
  const TimelineBar& b = model_->timeline().bars[bar];
  const double pad = std::max(b.dur_s * 10, 1e-6);
  select(bar);
  // Scroll so the bar's row is visible.
  const int row_y = b.lane * row_height();
  const int visible = lanes_bottom() - lanes_top();
  if (row_y < row_offset_ || row_y + row_height() > row_offset_ + visible)
    row_offset_ = std::max(0, row_y - visible / 2);
  set_range(b.start_s - pad, b.end_s() + pad);
  update();
}

void TimelineWidget::scroll_rows(int dy) {
  const int lanes = rows();
  const int max_offset = std::max(0, lanes * row_height() - (lanes_bottom() - lanes_top()));
  row_offset_ = std::clamp(row_offset_ + dy, 0, max_offset);
  update();
}

std::optional<std::size_t> TimelineWidget::bar_at_position(QPoint pos) const {
  if (!model_ || model_->empty() || pos.x() < plot_left() || pos.y() < lanes_top() ||
      pos.y() >= lanes_bottom())
    return std::nullopt;
  const int lane = (pos.y() - lanes_top() + row_offset_) / row_height();
  if (lane >= static_cast<int>(model_->timeline().lanes.size())) return std::nullopt;
  const double per_pixel = (t1_ - t0_) / plot_width();
  return foresight::gui::bar_at(model_->timeline(), lane, time_at(pos.x()), 2 * per_pixel);
}

void TimelineWidget::paintEvent(QPaintEvent*) {
  QPainter p(this);
  const QPalette& pal = palette();
  p.fillRect(rect(), pal.base());
  if (!model_ || model_->empty()) {
    p.setPen(pal.color(QPalette::PlaceholderText));
    p.drawText(rect(), Qt::AlignCenter,
               tr("No trace loaded. Open a trace from `foresight simulate --trace` or "
                  "`foresight run --trace`."));
    return;
  }
  const Timeline& t = model_->timeline();
  const QFontMetrics fm(font());
  const int top = lanes_top(), bottom = lanes_bottom();
  p.setClipRect(0, top, width(), bottom - top);
  const int rh = row_height();
  const int margin = std::max(kBarMargin, rh / 6);
  const int first_lane = row_offset_ / rh;
  for (int lane = first_lane; lane < static_cast<int>(t.lanes.size()); ++lane) {
    const int y = top + lane * rh - row_offset_;
    if (y >= bottom) break;
    if (lane % 2 == 1) p.fillRect(0, y, width(), rh, pal.alternateBase());
    const TimelineLane& l = t.lanes[static_cast<std::size_t>(lane)];
    p.setPen(pal.color(QPalette::Text));
    p.drawText(QRect(4, y, kLabelWidth - 8, rh), Qt::AlignVCenter | Qt::AlignLeft,
               fm.elidedText(qstr(lane_label(l)), Qt::ElideRight, kLabelWidth - 8));
    // Bars narrower than a pixel are merged: at most one rectangle per pixel column.
    const auto [first, last] = visible_bars(t, lane, t0_, t1_);
    double drawn_until = -1e300;
    p.setPen(Qt::NoPen);
    for (std::size_t i = first; i < last; ++i) {
      const TimelineBar& b = t.bars[i];
      double x0 = x_at(b.start_s), x1 = x_at(b.end_s());
      x0 = std::max(x0, static_cast<double>(plot_left()));
      x1 = std::min(x1, static_cast<double>(plot_left() + plot_width()));
      if (x1 < plot_left() || x0 > plot_left() + plot_width()) continue;
      if (x1 - x0 < 1.0) {
        if (std::floor(x0) <= drawn_until) continue;
        x1 = x0 + 1.0;
      }
      drawn_until = std::floor(x1);
      // A one-pixel gap after bars wide enough to spare it, so back-to-back ops stay distinct.
      const double w = x1 - x0 > 3 ? x1 - x0 - 1 : x1 - x0;
      p.fillRect(QRectF(x0, y + margin, w, rh - 2 * margin), kind_color(b.kind));
      // A label inside bars wide enough to hold one.
      if (x1 - x0 > 40) {
        p.setPen(Qt::white);
        p.drawText(QRectF(x0 + 2, y, x1 - x0 - 4, rh), Qt::AlignVCenter | Qt::AlignLeft,
                   fm.elidedText(qstr(b.name), Qt::ElideRight, static_cast<int>(x1 - x0 - 4)));
        p.setPen(Qt::NoPen);
      }
    }
    // The critical path under its bars, over the merged ones too: a line no narrower than a pixel.
    if (show_critical())
      for (std::size_t i = first; i < last; ++i) {
        const TimelineBar& b = t.bars[i];
        if (!b.critical) continue;
        const double x0 = std::max(x_at(b.start_s), static_cast<double>(plot_left()));
        const double x1 = std::min(x_at(b.end_s()), static_cast<double>(plot_left() + plot_width()));
        if (x1 < plot_left() || x0 > plot_left() + plot_width()) continue;
        p.fillRect(QRectF(x0, y + rh - margin, std::max(1.0, x1 - x0), std::min(kCriticalLine, margin)),
                   kCriticalColor);
      }
  }
  draw_counters(p);
  if (show_critical()) draw_critical_arrows(p);
  draw_dependency_arrows(p);
  if (highlight_ && *highlight_ < t.bars.size()) {
    const TimelineBar& b = t.bars[*highlight_];
    const int y = top + b.lane * rh - row_offset_;
    const double x0 = x_at(b.start_s), x1 = std::max(x_at(b.end_s()), x0 + 2);
    p.setPen(QPen(pal.color(QPalette::Highlight), 2));
    p.setBrush(Qt::NoBrush);
    p.drawRect(QRectF(x0 - 1, y + 1, x1 - x0 + 2, rh - 2));
  }
  p.setClipping(false);
  draw_axis(p);
  draw_legend(p);
}

void TimelineWidget::draw_axis(QPainter& p) {
  const QPalette& pal = palette();
  const QFontMetrics fm(font());
  p.fillRect(0, 0, width(), kAxisHeight, pal.window());
  p.setPen(pal.color(QPalette::Text));
  const double span = t1_ - t0_;
  const double step = nice_step(span, std::max(2, plot_width() / 110));
  const double first = std::ceil(t0_ / step) * step;
  for (double tick = first; tick <= t1_; tick += step) {
    const double x = x_at(tick);
    p.drawLine(QPointF(x, kAxisHeight - 5), QPointF(x, kAxisHeight));
    const QString label = tick_text(tick, step);
    p.drawText(QRectF(x - 50, 2, 100, kAxisHeight - 7), Qt::AlignHCenter | Qt::AlignBottom, label);
  }
  p.drawText(QRect(4, 0, kLabelWidth - 8, kAxisHeight), Qt::AlignVCenter | Qt::AlignLeft,
             fm.elidedText(tr("rank / stream"), Qt::ElideRight, kLabelWidth - 8));
  p.setPen(pal.color(QPalette::Mid));
  p.drawLine(0, kAxisHeight - 1, width(), kAxisHeight - 1);
}

// Counters (the memory in use per rank) in rows under the lanes: a step line filled below, scaled
// to the counter's largest value, which the row's label gives.
void TimelineWidget::draw_counters(QPainter& p) {
  const Timeline& t = model_->timeline();
  const QPalette& pal = palette();
  const QFontMetrics fm(font());
  const int rh = row_height();
  const QColor line(0x2c, 0x7f, 0xb8), fill(0x2c, 0x7f, 0xb8, 60);
  for (std::size_t k = 0; k < t.counters.size(); ++k) {
    const TimelineCounter& c = t.counters[k];
    const int y = lanes_top() + static_cast<int>(t.lanes.size() + k) * rh - row_offset_;
    if (y + rh < lanes_top() || y >= lanes_bottom()) continue;
    if ((t.lanes.size() + k) % 2 == 1) p.fillRect(0, y, width(), rh, pal.alternateBase());
    p.setPen(pal.color(QPalette::Text));
    p.drawText(QRect(4, y, kLabelWidth - 8, rh), Qt::AlignVCenter | Qt::AlignLeft,
               fm.elidedText(qstr(counter_label(c)), Qt::ElideRight, kLabelWidth - 8));
    if (c.samples.empty()) continue;
    // The samples in view, with the one before the view (its value holds into it).
    auto first = std::upper_bound(c.samples.begin(), c.samples.end(), t0_,
                                  [](double v, const auto& s) { return v < s.first; });
    if (first != c.samples.begin()) --first;
    // Scaled from just under the smallest value to the largest, so that what changes shows.
    const double top = y + 3, height = rh - 6;
    const double low = c.min - 0.1 * std::max(c.max - c.min, 1e-9 * std::abs(c.max)), span = c.max - low;
    auto y_of = [&](double v) { return span > 0 ? top + height * (1 - (v - low) / span) : top; };
    QPolygonF area;
    area << QPointF(std::max(x_at(first->first), static_cast<double>(plot_left())), top + height);
    for (auto it = first; it != c.samples.end(); ++it) {
      const double x = std::clamp(x_at(it->first), static_cast<double>(plot_left()),
                                  static_cast<double>(plot_left() + plot_width()));
      if (it != first) area << QPointF(x, area.back().y());
      area << QPointF(x, y_of(it->second));
      if (it->first > t1_) break;
    }
    area << QPointF(plot_left() + plot_width(), area.back().y())
         << QPointF(plot_left() + plot_width(), top + height);
    p.setPen(QPen(line, 1));
    p.setBrush(fill);
    p.drawPolygon(area);
    p.setBrush(Qt::NoBrush);
    p.setPen(pal.color(QPalette::Text));
    p.drawText(QRect(plot_left() + 4, y, plot_width() - 8, rh), Qt::AlignVCenter | Qt::AlignRight,
               qstr(counter_range(c)));
  }
}

// Where the critical path moves to another lane (a stream waiting on another, a stage on the one
// before it), an arrow from the end of the op it leaves to the start of the one it reaches.
void TimelineWidget::draw_critical_arrows(QPainter& p) {
  const Timeline& t = model_->timeline();
  // The path's ops by start; the first that ends inside the view, on to the last that starts in it.
  auto it = std::lower_bound(critical_.begin(), critical_.end(), t0_,
                             [&](std::size_t i, double v) { return t.bars[i].end_s() < v; });
  if (it != critical_.begin()) --it;
  begin_arrows(p, kCriticalColor);
  for (; it != critical_.end() && it + 1 != critical_.end(); ++it) {
    const TimelineBar& a = t.bars[*it];
    const TimelineBar& b = t.bars[*(it + 1)];
    if (a.start_s > t1_) break;
    if (a.lane != b.lane) draw_arrow(p, a, b);
  }
  p.restore();
}

// The painter saved and set for arrows over the lanes (clipped to them) in `colour`.
void TimelineWidget::begin_arrows(QPainter& p, const QColor& colour) const {
  p.save();
  p.setClipRect(plot_left(), lanes_top(), plot_width(), lanes_bottom() - lanes_top());
  p.setRenderHint(QPainter::Antialiasing, true);
  p.setPen(QPen(colour, 1.5));
  p.setBrush(colour);
}

// From the end of bar `a` to the start of bar `b`, each at its lane's middle: a line with a small
// triangle at its end pointing along it.
void TimelineWidget::draw_arrow(QPainter& p, const TimelineBar& a, const TimelineBar& b) const {
  const int rh = row_height();
  auto mid_y = [&](int lane) { return lanes_top() + lane * rh - row_offset_ + rh / 2.0; };
  const QPointF from(x_at(a.end_s()), mid_y(a.lane)), to(x_at(b.start_s), mid_y(b.lane));
  p.drawLine(from, to);
  const double dx = to.x() - from.x(), dy = to.y() - from.y(), len = std::hypot(dx, dy);
  if (len < 1) return;
  const double ux = dx / len, uy = dy / len, s = 6;
  const QPointF head[3] = {to, QPointF(to.x() - s * ux - s / 2 * uy, to.y() - s * uy + s / 2 * ux),
                           QPointF(to.x() - s * ux + s / 2 * uy, to.y() - s * uy - s / 2 * ux)};
  p.drawPolygon(head, 3);
}

// The selection's arrows are found here, once, not on every repaint (the ops after it are a scan
// of its rank's bars).
void TimelineWidget::select(std::optional<std::size_t> bar) {
  highlight_ = bar;
  arrows_.clear();
  if (!model_ || !bar || *bar >= model_->timeline().bars.size()) return;
  const Timeline& t = model_->timeline();
  for (std::size_t b : bars_before(t, *bar)) arrows_.emplace_back(b, *bar);
  for (std::size_t b : bars_after(t, *bar)) arrows_.emplace_back(*bar, b);
}

// The selected op's dependencies: an arrow from the end of each op it waited for to its start,
// and from its end to the start of each op that waited for it (on its rank; the trace's edges).
void TimelineWidget::draw_dependency_arrows(QPainter& p) {
  if (arrows_.empty()) return;
  const Timeline& t = model_->timeline();
  begin_arrows(p, palette().color(QPalette::Highlight));
  for (const auto& [a, b] : arrows_) draw_arrow(p, t.bars[a], t.bars[b]);
  p.restore();
}

// The legend's entries as they fit the width: the critical path (when shown), then the kinds in
// order of first appearance; where they do not all fit, the last place says how many are left out
// ("+3 more", the tooltip over the legend lists them all).
std::vector<TimelineWidget::LegendEntry> TimelineWidget::legend_layout() const {
  const QFontMetrics fm(font());
  std::vector<LegendEntry> all;
  if (show_critical()) all.push_back({tr("critical path"), "", true, 0, 0});
  for (const std::string& k : kinds_) all.push_back({qstr(k), k, false, 0, 0});
  auto width_of = [&](const QString& text) { return 14 + fm.horizontalAdvance(text) + 12; };
  std::vector<LegendEntry> out;
  int x = 4;
  for (std::size_t i = 0; i < all.size(); ++i) {
    LegendEntry e = all[i];
    e.x = x;
    e.w = width_of(e.text);
    const std::size_t left = all.size() - i - 1;
    const int more = left > 0 ? fm.horizontalAdvance(tr("+%1 more").arg(left)) + 8 : 0;
    if (x + e.w + more > width()) {
      const QString rest = tr("+%1 more").arg(all.size() - i);
      out.push_back({rest, "", false, x, fm.horizontalAdvance(rest) + 8});
      break;
    }
    out.push_back(e);
    x += e.w;
  }
  return out;
}

QStringList TimelineWidget::legend_texts() const {
  QStringList out;
  for (const LegendEntry& e : legend_layout()) out << e.text;
  return out;
}

void TimelineWidget::draw_legend(QPainter& p) {
  const QPalette& pal = palette();
  const int y = lanes_bottom();
  p.fillRect(0, y, width(), kLegendHeight, pal.window());
  p.setPen(pal.color(QPalette::Text));
  for (const LegendEntry& e : legend_layout()) {
    if (e.critical)
      p.fillRect(e.x, y + 11, 10, kCriticalLine, kCriticalColor);
    else if (!e.kind.empty())
      p.fillRect(e.x, y + 6, 10, 10, kind_color(e.kind));
    const int text_x = e.critical || !e.kind.empty() ? e.x + 14 : e.x;
    p.drawText(QRect(text_x, y, e.w - (text_x - e.x), kLegendHeight), Qt::AlignVCenter | Qt::AlignLeft,
               e.text);
  }
}

void TimelineWidget::wheelEvent(QWheelEvent* event) {
  const double delta = event->angleDelta().y() != 0 ? event->angleDelta().y() : event->angleDelta().x();
  if (event->modifiers() & Qt::ShiftModifier) {
    scroll_rows(static_cast<int>(-delta / 120.0 * row_height()));
    event->accept();
    return;
  }
  // 120 units (one notch) zooms by 1.25x around the time under the pointer.
  const double factor = std::pow(1.25, -delta / 120.0);
  const double x = std::clamp(event->position().x(), static_cast<double>(plot_left()),
                              static_cast<double>(plot_left() + plot_width()));
  const double pivot = time_at(x);
  const double span = std::max((t1_ - t0_) * factor, 1e-9);  // never below a nanosecond
  const double left = (pivot - t0_) / (t1_ - t0_);
  set_range(pivot - left * span, pivot + (1 - left) * span);
  event->accept();
}

void TimelineWidget::mousePressEvent(QMouseEvent* event) {
  if (event->button() != Qt::LeftButton) return;
  dragging_ = true;
  dragged_ = false;
  drag_start_ = event->position().toPoint();
  drag_t0_ = t0_;
  drag_t1_ = t1_;
  drag_row_offset_ = row_offset_;
  setCursor(Qt::ClosedHandCursor);
}

void TimelineWidget::mouseMoveEvent(QMouseEvent* event) {
  if (!dragging_) return;
  const QPoint d = event->position().toPoint() - drag_start_;
  if (d.manhattanLength() > 3) dragged_ = true;
  const double dt = -d.x() * (drag_t1_ - drag_t0_) / plot_width();
  set_range(drag_t0_ + dt, drag_t1_ + dt);
  row_offset_ = drag_row_offset_;
  scroll_rows(-d.y());
}

void TimelineWidget::mouseReleaseEvent(QMouseEvent* event) {
  const bool click = dragging_ && !dragged_;
  dragging_ = false;
  unsetCursor();
  if (!click) return;
  // A click selects the bar under it (and draws its dependencies), or clears the selection.
  const auto bar = bar_at_position(event->position().toPoint());
  select(bar);
  update();
  if (bar) Q_EMIT bar_selected(*bar);
}

void TimelineWidget::mouseDoubleClickEvent(QMouseEvent*) { fit(); }

bool TimelineWidget::event(QEvent* event) {
  if (event->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(event);
    if (help->pos().y() >= lanes_bottom() && !kinds_.empty()) {  // the legend: every kind
      QStringList kinds;
      for (const std::string& k : kinds_) kinds << qstr(k);
      QToolTip::showText(help->globalPos(), kinds.join(QStringLiteral(", ")), this);
    } else if (auto bar = bar_at_position(help->pos()))
      QToolTip::showText(help->globalPos(), qstr(bar_tooltip(model_->timeline(), *bar)), this);
    else
      QToolTip::hideText();
    return true;
  }
  return QWidget::event(event);
}

}  // namespace foresight::gui
