// Text for the views: quantities with their unit, plan layouts. One place so that every table,
// chart label and tooltip says "45.6 ms" and "tp2 pp2 dp4 sp" the same way the CLI does.
//
//   seconds_text(0.0456)  // "45.6 ms"
//   layout_text(plan)     // "tp2 pp2 dp4 sp"
#pragma once

#include <QString>
#include <string>

#include "sim/spec/plan.h"

namespace foresight::gui {

inline QString qstr(const std::string& s) { return QString::fromStdString(s); }

QString seconds_text(double seconds);
QString bytes_text(double bytes);
QString percent_text(double fraction);  // 0.461 -> "46.1%"
// A time-axis label with as many digits as the tick step needs: tick_text(1.702, 0.002) is
// "1702 ms", tick_text(0.5, 0.5) is "0.5 s", tick_text(0, x) is "0".
QString tick_text(double seconds, double step);
// "tp2 pp2 dp4 cp2 ep4 sp v2", the CLI's layout column.
QString layout_text(const Plan& p);
// The whole plan in one line, as the search table shows it: the layout, then the micro-batch and
// ZeRO stage, and what is not the default (recompute, a schedule other than (interleaved) 1F1B,
// offload): "tp2 pp4 dp8 sp v2 | mb1 | ZeRO-1 | recompute selective". The precision is the
// search's, the same for every plan, and left out.
QString plan_text(const Plan& p);

}  // namespace foresight::gui
