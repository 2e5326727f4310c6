// A Timeline's bars as a table (one row per op), and the Timeline itself for the Gantt widget,
// which draws from timeline() and redraws on modelReset.
//
//   TimelineModel m;  m.set_timeline(std::move(*load_timeline("step.json")));
//   m.rowCount() == number of ops in the trace;  m.timeline().lanes.size() == ranks x streams
#pragma once

#include <QAbstractTableModel>

#include "gui/models/timeline.h"

namespace foresight::gui {

class TimelineModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { kLane, kName, kId, kKind, kStart, kDuration, kBytes, kColumnCount };
  // Qt::UserRole: raw numbers (seconds, bytes) for sorting; Qt::ToolTipRole: bar_tooltip().

  explicit TimelineModel(QObject* parent = nullptr);

  void set_timeline(Timeline t);
  void clear();
  const Timeline& timeline() const { return timeline_; }
  bool empty() const { return timeline_.bars.empty(); }

  int rowCount(const QModelIndex& parent = QModelIndex()) const override;
  int columnCount(const QModelIndex& parent = QModelIndex()) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  Timeline timeline_;
};

}  // namespace foresight::gui
