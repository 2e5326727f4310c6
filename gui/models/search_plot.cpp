// The search view's plots: axes, points, 2-D Pareto front, fitted ranges.
#include "gui/models/search_plot.h"

#include <QCoreApplication>
#include <algorithm>
#include <cmath>
#include <numeric>

#include "gui/models/ranked_plan_model.h"

namespace foresight::gui {

namespace {
QString tr(const char* s) { return QCoreApplication::translate("SearchPlot", s); }
double step_of(const RankedPlan& p) {
  return p.simulated_step_s >= 0 ? p.simulated_step_s : p.prediction.step_time_s;
}
double free_percent(const RankedPlan& p) { return 100 * free_share(p); }
double mfu_percent(const RankedPlan& p) { return 100 * p.prediction.mfu; }
double cost_of(const RankedPlan& p) { return p.economics.cost_per_mtok_usd; }
}  // namespace

PlotAxes plot_axes(SearchPlot plot) {
  const QString free = tr("memory free on the fullest device (%)");
  const QString step = tr("step time (s; simulated where re-simulated)");
  switch (plot) {
    case SearchPlot::kMfuVsFree:
      return {plot, tr("MFU vs memory free"), free, tr("MFU (%)"), true, true, free_percent, mfu_percent};
    case SearchPlot::kTimeVsCost:
      return {plot,   tr("Step time vs cost"), tr("$ per million tokens"), step, false, false, cost_of,
              step_of};
    case SearchPlot::kTimeVsFree:
    default:
      return {plot, tr("Step time vs memory free"), free, step, true, false, free_percent, step_of};
  }
}

std::vector<SearchPlot> useful_plots(const std::vector<RankedPlan>& plans) {
  std::vector<SearchPlot> out = {SearchPlot::kTimeVsFree, SearchPlot::kMfuVsFree};
  double lo = INFINITY, hi = 0;
  for (const RankedPlan& p : plans) {
    const double t = p.prediction.step_time_s;
    if (t <= 0) continue;
    const double per_second = cost_of(p) / t;
    lo = std::min(lo, per_second);
    hi = std::max(hi, per_second);
  }
  if (hi > 0 && hi > lo * 1.01) out.push_back(SearchPlot::kTimeVsCost);
  return out;
}

std::vector<QPointF> plot_points(const std::vector<RankedPlan>& plans, const PlotAxes& axes) {
  std::vector<QPointF> out;
  out.reserve(plans.size());
  for (const RankedPlan& p : plans) out.emplace_back(axes.x(p), axes.y(p));
  return out;
}

std::vector<std::size_t> pareto_2d(const std::vector<QPointF>& points, const PlotAxes& axes) {
  // Oriented so that smaller is better on both: sort by x, then keep each point whose y beats
  // every point before it (ties on x: the better y first).
  auto ox = [&](const QPointF& p) { return axes.x_higher_better ? -p.x() : p.x(); };
  auto oy = [&](const QPointF& p) { return axes.y_higher_better ? -p.y() : p.y(); };
  std::vector<std::size_t> order(points.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (ox(points[a]) != ox(points[b])) return ox(points[a]) < ox(points[b]);
    return oy(points[a]) < oy(points[b]);
  });
  std::vector<std::size_t> front;
  double best = INFINITY;
  for (std::size_t i : order)
    if (oy(points[i]) < best) {
      best = oy(points[i]);
      front.push_back(i);
    }
  std::sort(front.begin(), front.end(),
            [&](std::size_t a, std::size_t b) { return points[a].x() < points[b].x(); });
  return front;
}

AxisRange fit_axis(const std::vector<double>& values) {
  AxisRange r;
  if (values.empty()) return r;
  const auto [lo_it, hi_it] = std::minmax_element(values.begin(), values.end());
  const double lo = *lo_it, hi = *hi_it;
  if (lo > 0 && hi / lo > std::pow(10.0, 1.5)) {
    r.log = true;
    r.lo = lo / 1.25;
    r.hi = hi * 1.25;
    return r;
  }
  const double span = hi - lo, margin = span > 0 ? 0.08 * span : std::max(1e-9, 0.05 * std::abs(hi));
  r.lo = lo - margin;
  r.hi = hi + margin;
  if (lo >= 0) r.lo = std::max(0.0, r.lo);
  return r;
}

}  // namespace foresight::gui
