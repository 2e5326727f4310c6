// Value axes for fitted ranges.
#include "gui/views/chart_axes.h"

#include <QtCharts/QLogValueAxis>
#include <QtCharts/QValueAxis>

namespace foresight::gui {

QAbstractAxis* value_axis(const AxisRange& r, const QString& title) {
  if (r.log) {
    auto* a = new QLogValueAxis;
    a->setBase(10);
    a->setRange(r.lo, r.hi);
    a->setMinorTickCount(8);
    a->setLabelFormat(QStringLiteral("%.3g"));
    a->setTitleText(title);
    return a;
  }
  auto* a = new QValueAxis;
  a->setRange(r.lo, r.hi);
  a->applyNiceNumbers();
  a->setLabelFormat(QStringLiteral("%.3g"));
  a->setTitleText(title);
  return a;
}

}  // namespace foresight::gui
