// Writes the plots of a view (charts, Gantt charts, the topology picture) to a PNG or an SVG file,
// laid out as they are on screen. Charts (QChartView) and the custom widgets paint through the
// same QPainter calls into either device, so the SVG holds vectors, not a screenshot.
//
//   Status s = export_plots(window.plots(View::kDetails), "details.svg");
#pragma once

#include <QString>
#include <QWidget>
#include <vector>

#include "sim/core/status.h"

namespace foresight::gui {

// The widgets must be laid out (shown, or rendered off-screen once); they are placed relative to
// the first one's window, as on screen.
Status export_plots(const std::vector<QWidget*>& plots, const QString& path);

}  // namespace foresight::gui
