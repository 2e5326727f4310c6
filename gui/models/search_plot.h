// What the search view plots: a ranked plan as a point on two axes chosen to separate plans
// (step time or MFU against memory free, or against $/Mtok when cost is not just step time times
// a constant), the Pareto front in the two dimensions shown, and axes fitted to the points.
//
//   const auto axes = plot_axes(SearchPlot::kTimeVsFree);
//   std::vector<QPointF> pts = plot_points(plans, axes);
//   std::vector<std::size_t> front = pareto_2d(pts, axes);   // indices, by x
//   AxisRange x = fit_axis(xs), y = fit_axis(ys);            // y.log when it spans decades
#pragma once

#include <QPointF>
#include <QString>
#include <vector>

#include "sim/search/search.h"

namespace foresight::gui {

enum class SearchPlot { kTimeVsFree, kMfuVsFree, kTimeVsCost };

struct PlotAxes {
  SearchPlot plot;
  QString title, x_title, y_title;
  bool x_higher_better, y_higher_better;
  double (*x)(const RankedPlan&);
  double (*y)(const RankedPlan&);
};

PlotAxes plot_axes(SearchPlot plot);

// The plots that separate these plans. Step time against $/Mtok only when cost is not step time
// times one constant (it is whenever every plan uses the same devices at the same price: then the
// plot is a straight line and says nothing the time axis does not).
std::vector<SearchPlot> useful_plots(const std::vector<RankedPlan>& plans);

std::vector<QPointF> plot_points(const std::vector<RankedPlan>& plans, const PlotAxes& axes);

// The points no other point beats on both axes (each in its better direction), ordered by x.
std::vector<std::size_t> pareto_2d(const std::vector<QPointF>& points, const PlotAxes& axes);

struct AxisRange {
  double lo = 0, hi = 1;
  bool log = false;  // the values span more than a decade and a half: a log axis
};
// A range holding every value with 8% of the span as margin (a log range with a factor of margin),
// not below 0 for a linear axis of non-negative values.
AxisRange fit_axis(const std::vector<double>& values);

}  // namespace foresight::gui
