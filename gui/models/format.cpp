// Quantity and layout text for the views.
#include "gui/models/format.h"

#include <algorithm>
#include <cmath>

#include "sim/core/units.h"

namespace foresight::gui {

QString seconds_text(double seconds) {
  // pretty_quantity writes zero in its smallest unit ("0.00 ns").
  return seconds == 0 ? QStringLiteral("0 s") : qstr(pretty_quantity(seconds, Dimension::kSeconds));
}

QString bytes_text(double bytes) { return qstr(pretty_quantity(bytes, Dimension::kBytes)); }

QString percent_text(double fraction) { return QString::number(100.0 * fraction, 'f', 1) + QLatin1Char('%'); }

QString tick_text(double seconds, double step) {
  if (std::abs(seconds) < step * 1e-6) return QStringLiteral("0");
  // The largest unit the step is at least a tenth of: a 2 ms step labels in ms, 0.5 s in s.
  struct Unit {
    double scale;
    const char* name;
  };
  static const Unit units[] = {{1, "s"}, {1e-3, "ms"}, {1e-6, "us"}, {1e-9, "ns"}};
  const Unit* u = &units[3];
  for (const Unit& c : units)
    if (step >= c.scale * 0.0999) {
      u = &c;
      break;
    }
  const double in_unit = step / u->scale;
  const int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(in_unit) - 1e-9)), 0, 6);
  return QString::number(seconds / u->scale, 'f', decimals) + QLatin1Char(' ') + QLatin1String(u->name);
}

QString layout_text(const Plan& p) { return qstr(layout_string(p)); }

QString plan_text(const Plan& p) {
  std::string s = layout_string(p);
  s.append(" | mb").append(std::to_string(p.micro_batch));
  s.append(" | ZeRO-").append(std::to_string(p.zero_stage));
  if (p.recompute != Recompute::kNone) s.append(" | recompute ").append(recompute_string(p));
  if (p.schedule != Schedule::k1F1B && p.schedule != Schedule::kInterleaved1F1B)
    s.append(" | ").append(to_string(p.schedule));
  if (!offload_string(p).empty()) s.append(" | offload ").append(offload_string(p));
  if (!overlap_string(p).empty()) s.append(" | overlap ").append(overlap_string(p));
  return qstr(s);
}

}  // namespace foresight::gui
