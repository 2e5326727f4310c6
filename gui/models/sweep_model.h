// A sweep's results as a table: one row per point, one column per axis (its value at the point),
// then the predicted figures and, for points that failed, the reason. Qt::UserRole holds raw
// numbers for sorting (NaN where a point has none).
//
//   SweepModel m;  m.set_outcome(run_sweep_points(*example_sweep()));
//   m.step_time(r);   // seconds, or NaN for a failed or unevaluated point
#pragma once

#include <QAbstractTableModel>

#include "gui/models/sweep_runner.h"

namespace foresight::gui {

class SweepModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Metric {
    kStepTime,
    kTokensPerS,
    kMfu,
    kMemory,
    kExposedComm,
    kBubble,
    kCostPerMtok,
    kEnergyPerMtok,
    kLayout,
    kError,
    kMetricCount
  };

  explicit SweepModel(QObject* parent = nullptr);
  void set_outcome(SweepOutcome out);
  void clear();

  int rowCount(const QModelIndex& parent = QModelIndex()) const override;
  int columnCount(const QModelIndex& parent = QModelIndex()) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  int axis_count() const { return static_cast<int>(outcome_.axes.size()); }
  int column_of(Metric m) const { return axis_count() + m; }
  const SweepOutcome& outcome() const { return outcome_; }
  bool point_ok(int row) const;
  double step_time(int row) const;
  // "32, 200Gbps": the point's axis values, for chart categories.
  QString point_label(int row) const;

 private:
  QVariant metric(const nlohmann::json& row, Metric m, bool raw) const;

  SweepOutcome outcome_;
};

// "/cluster/node/nic/bandwidth" -> "nic/bandwidth": the last two steps of a pointer.
QString axis_title(const std::string& pointer);

}  // namespace foresight::gui
