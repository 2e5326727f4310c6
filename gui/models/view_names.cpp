// View names.
#include "gui/models/view_names.h"

namespace foresight::gui {

std::optional<View> parse_view(const QString& name) {
  for (View v : kAllViews)
    if (name == view_name(v)) return v;
  return std::nullopt;
}

QString view_name(View v) {
  switch (v) {
    case View::kSetup:
      return QStringLiteral("setup");
    case View::kDetails:
      return QStringLiteral("details");
    case View::kSearch:
      return QStringLiteral("search");
    case View::kTimeline:
      return QStringLiteral("timeline");
    case View::kCompare:
      return QStringLiteral("compare");
    case View::kSweep:
      return QStringLiteral("sweep");
    case View::kTopology:
      return QStringLiteral("topology");
  }
  return QStringLiteral("setup");
}

QStringList view_names() {
  QStringList out;
  for (View v : kAllViews) out << view_name(v);
  return out;
}

}  // namespace foresight::gui
