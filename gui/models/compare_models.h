// A CompareReport as two tables: error per op kind (incl. "idle"), and the ops with the largest
// differences. Qt::UserRole holds raw numbers (seconds, percent) for sorting.
//
//   CompareKindModel kinds;  kinds.set_report(comparison.report);
//   WorstOpsModel worst;     worst.set_report(comparison.report);
#pragma once

#include <QAbstractTableModel>

#include "sim/compare/compare.h"

namespace foresight::gui {

class CompareKindModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { kKind, kOps, kPredicted, kMeasured, kError, kColumnCount };

  explicit CompareKindModel(QObject* parent = nullptr);
  void set_report(const CompareReport& r);
  void clear();

  int rowCount(const QModelIndex& parent = QModelIndex()) const override;
  int columnCount(const QModelIndex& parent = QModelIndex()) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  const KindComparison& kind(int row) const { return kinds_[static_cast<std::size_t>(row)]; }

 private:
  std::vector<KindComparison> kinds_;
};

class WorstOpsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { kId, kKind, kPredicted, kMeasured, kDifference, kColumnCount };

  explicit WorstOpsModel(QObject* parent = nullptr);
  void set_report(const CompareReport& r);
  void clear();

  int rowCount(const QModelIndex& parent = QModelIndex()) const override;
  int columnCount(const QModelIndex& parent = QModelIndex()) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::vector<OpComparison> ops_;
};

}  // namespace foresight::gui
