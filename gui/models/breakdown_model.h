// A Prediction's step time or device memory by category, as a table: category, amount, share.
// The Details view draws its bar charts from the rows and shows the table next to them.
//
//   BreakdownModel time(BreakdownModel::Kind::kTime);
//   time.set_prediction(evaluation.prediction);
//   time.amount(0);   // seconds (kTime) or bytes (kMemory) of row 0
//
// Only categories with a non-zero amount are rows. Time shares are of the step; memory shares are
// of the device's capacity (so a plan that does not fit sums past 100%).
#pragma once

#include <QAbstractTableModel>
#include <string>
#include <vector>

#include "sim/analytic/prediction.h"

namespace foresight::gui {

class BreakdownModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum class Kind { kTime, kMemory };
  enum Column { kCategory, kAmount, kShare, kColumnCount };
  // Qt::UserRole: the raw number (seconds, bytes or the share as a fraction) for sorting and charts.

  explicit BreakdownModel(Kind kind, QObject* parent = nullptr);

  void set_prediction(const Prediction& p);
  void clear();

  int rowCount(const QModelIndex& parent = QModelIndex()) const override;
  int columnCount(const QModelIndex& parent = QModelIndex()) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  Kind kind() const { return kind_; }
  const std::string& category(int row) const { return rows_[static_cast<std::size_t>(row)].category; }
  double amount(int row) const { return rows_[static_cast<std::size_t>(row)].amount; }
  double denominator() const { return denominator_; }  // step time or device capacity

 private:
  struct Row {
    std::string category;
    double amount = 0;
  };
  Kind kind_;
  std::vector<Row> rows_;
  double denominator_ = 0;
};

}  // namespace foresight::gui
