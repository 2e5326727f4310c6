// A Gantt chart of a TimelineModel: one row per (rank, stream), one bar per op, coloured by op
// kind. Wheel zooms around the pointer (Shift+wheel scrolls the rows), dragging pans, a double
// click fits the whole step; hovering a bar shows its op id, duration and bytes; clicking one
// selects it and draws its dependencies (where the trace has them). Two widgets can
// share their time range (range_changed -> set_range), as the Compare view does.
#pragma once

#include <QStringList>
#include <QWidget>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

class QColor;
class QHelpEvent;

namespace foresight::gui {

class TimelineModel;
struct TimelineBar;

class TimelineWidget : public QWidget {
  Q_OBJECT
 public:
  explicit TimelineWidget(QWidget* parent = nullptr);

  void set_model(const TimelineModel* model);
  double range_begin() const { return t0_; }
  double range_end() const { return t1_; }
  // The bar under a widget position (for tooltips and tests), if any.
  std::optional<std::size_t> bar_at_position(QPoint pos) const;
  // The legend's texts as drawn at the current width, "+N more" last where some did not fit.
  QStringList legend_texts() const;

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 public Q_SLOTS:
  void set_range(double t0_s, double t1_s);
  void fit();
  // Zooms to one bar (with context around it) and outlines it.
  void show_bar(std::size_t bar);
  // Underlines the ops on the step's critical path (where the trace marks them); on by default.
  void set_show_critical(bool on);

 public:
  // The selected bar (show_bar, or a click), and the dependency arrows drawn for it: (from, to)
  // bars, from each op it waited for to it and from it to each op that waited for it.
  std::optional<std::size_t> selected_bar() const { return highlight_; }
  const std::vector<std::pair<std::size_t, std::size_t>>& dependency_arrows() const { return arrows_; }

 Q_SIGNALS:
  void range_changed(double t0_s, double t1_s);
  void bar_selected(std::size_t bar);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mouseReleaseEvent(QMouseEvent* event) override;
  void mouseDoubleClickEvent(QMouseEvent* event) override;
  bool event(QEvent* event) override;

 private:
  int row_height() const;
  int plot_left() const;
  int plot_width() const;
  int lanes_top() const;
  int lanes_bottom() const;
  double time_at(double x) const;
  double x_at(double t) const;
  void scroll_rows(int dy);
  void draw_axis(QPainter& p);
  void draw_legend(QPainter& p);
  void draw_critical_arrows(QPainter& p);
  void draw_dependency_arrows(QPainter& p);
  void begin_arrows(QPainter& p, const QColor& colour) const;  // p.save()d: restore after
  void draw_arrow(QPainter& p, const TimelineBar& a, const TimelineBar& b) const;
  struct LegendEntry {
    QString text;
    std::string kind;  // "" for the critical path and "+N more"
    bool critical = false;
    int x = 0, w = 0;
  };
  std::vector<LegendEntry> legend_layout() const;
  void draw_counters(QPainter& p);
  int rows() const;  // lanes and counters

  void model_reset();

  const TimelineModel* model_ = nullptr;
  std::vector<std::string> kinds_;  // op kinds in order of first appearance, for the legend
  bool show_critical_ = true;
  bool show_critical() const { return show_critical_ && !critical_.empty(); }  // marked and shown
  std::vector<std::size_t> critical_;  // its bars in path order (by start: each starts after the last ends)
  double t0_ = 0, t1_ = 1;
  int row_offset_ = 0;  // pixels scrolled down
  std::optional<std::size_t> highlight_;
  std::vector<std::pair<std::size_t, std::size_t>> arrows_;  // highlight_'s dependencies, found once
  void select(std::optional<std::size_t> bar);               // sets highlight_ and arrows_
  QPoint drag_start_;
  double drag_t0_ = 0, drag_t1_ = 0;
  int drag_row_offset_ = 0;
  bool dragging_ = false;
  bool dragged_ = false;  // the press moved the view: its release is no click
};

}  // namespace foresight::gui
