// The main window's views by name, as `--view`, sessions and the tab order know them.
//
//   parse_view(QStringLiteral("topology"))  // View::kTopology
//   view_name(View::kSweep)                 // "sweep"
#pragma once

#include <QString>
#include <QStringList>
#include <optional>

namespace foresight::gui {

// Tab order.
enum class View { kSetup, kDetails, kSearch, kTimeline, kCompare, kSweep, kTopology };
inline constexpr View kAllViews[] = {View::kSetup,   View::kDetails, View::kSearch,  View::kTimeline,
                                     View::kCompare, View::kSweep,   View::kTopology};

// setup, details, search, timeline, compare, sweep, topology
std::optional<View> parse_view(const QString& name);
QString view_name(View v);
QStringList view_names();

}  // namespace foresight::gui
