// Trace ops as table rows.
#include "gui/models/timeline_model.h"

#include "gui/models/format.h"

namespace foresight::gui {

TimelineModel::TimelineModel(QObject* parent) : QAbstractTableModel(parent) {}

void TimelineModel::set_timeline(Timeline t) {
  beginResetModel();
  timeline_ = std::move(t);
  endResetModel();
}

void TimelineModel::clear() { set_timeline(Timeline{}); }

int TimelineModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(timeline_.bars.size());
}

int TimelineModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant TimelineModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
  const auto row = static_cast<std::size_t>(index.row());
  const TimelineBar& b = timeline_.bars[row];
  const TimelineLane& lane = timeline_.lanes[static_cast<std::size_t>(b.lane)];
  if (role == Qt::ToolTipRole) return qstr(bar_tooltip(timeline_, row));
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case kLane:
        return qstr(lane_label(lane));
      case kName:
        return qstr(b.name);
      case kId:
        return qstr(b.id);
      case kKind:
        return qstr(b.kind);
      // Microsecond resolution over a whole step: fixed milliseconds rather than 3 significant digits.
      case kStart:
        return QString::number(b.start_s * 1e3, 'f', 3) + QStringLiteral(" ms");
      case kDuration:
        return seconds_text(b.dur_s);
      case kBytes:
        return b.bytes >= 0 ? bytes_text(b.bytes) : QString();
      default:
        return {};
    }
  }
  if (role == Qt::UserRole) {
    switch (index.column()) {
      case kLane:
        return b.lane;
      case kName:
        return qstr(b.name);
      case kId:
        return qstr(b.id);
      case kKind:
        return qstr(b.kind);
      case kStart:
        return b.start_s;
      case kDuration:
        return b.dur_s;
      case kBytes:
        return b.bytes;
      default:
        return {};
    }
  }
  if (role == Qt::TextAlignmentRole && index.column() >= kStart)
    return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
  return {};
}

QVariant TimelineModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* const names[kColumnCount] = {"Lane", "Op", "Id", "Kind", "Start", "Duration", "Bytes"};
  if (section < 0 || section >= kColumnCount) return {};
  return QString::fromLatin1(names[section]);
}

}  // namespace foresight::gui
