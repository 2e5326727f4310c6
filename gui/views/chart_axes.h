// A chart axis for a fitted range (gui/models/search_plot.h's fit_axis): a logarithmic axis where
// the values span decades, else a linear one with nice numbers; "%.3g" labels and a title.
#pragma once

#include <QString>
#include <QtCharts/QAbstractAxis>

#include "gui/models/search_plot.h"

namespace foresight::gui {

QAbstractAxis* value_axis(const AxisRange& range, const QString& title);

}  // namespace foresight::gui
