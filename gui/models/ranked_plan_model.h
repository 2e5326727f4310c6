// Ranked plans of a search as a table, one row per plan, best first. Sort it with a
// QSortFilterProxyModel whose sortRole is Qt::UserRole: every cell has its raw number there
// (seconds, bytes, fractions), so "1.2 s" sorts after "900 ms". RankedPlanFilter is that proxy
// with the search view's two filters (layout text, minimum free memory).
//
//   RankedPlanModel m;  m.set_plans(result.plans, result.pareto);
//   RankedPlanFilter f;  f.setSourceModel(&m);  f.set_min_free(0.05);
//   const RankedPlan& best = m.plan(f.mapToSource(f.index(0, 0)).row());
//   QString csv = table_csv(f, {RankedPlanModel::kLayout, RankedPlanModel::kStepTime});
#pragma once

#include <QAbstractTableModel>
#include <QSortFilterProxyModel>
#include <functional>
#include <vector>

#include "sim/search/search.h"

namespace foresight::gui {

class RankedPlanModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  // The figures people rank and choose by come first (times side by side, memory with its
  // margin), the knobs the Layout already names after them (hidden by default in the view).
  enum Column {
    kRank,
    kLayout,
    kStepTime,
    kSimulated,
    kMfu,
    kHeadroom,
    kMemory,
    kCostPerMtok,
    kTokensPerS,
    kMicroBatch,
    kZero,
    kRecompute,
    kSchedule,
    kOffload,
    kEnergyPerMtok,
    kPareto,
    kColumnCount
  };
  // The header's role for a column's CSV name with its unit ("step_s", "memory_bytes").
  static constexpr int kCsvNameRole = Qt::UserRole + 1;

  explicit RankedPlanModel(QObject* parent = nullptr);

  // `pareto` marks the rows that are on the Pareto front (time vs cost vs memory headroom).
  void set_plans(std::vector<RankedPlan> plans, const std::vector<RankedPlan>& pareto = {});
  void clear();

  int rowCount(const QModelIndex& parent = QModelIndex()) const override;
  int columnCount(const QModelIndex& parent = QModelIndex()) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  const RankedPlan& plan(int row) const { return plans_[static_cast<std::size_t>(row)]; }
  const std::vector<RankedPlan>& plans() const { return plans_; }
  bool on_pareto_front(int row) const { return pareto_[static_cast<std::size_t>(row)] != 0; }

 private:
  QVariant display(const RankedPlan& r, int row, int column) const;
  QVariant raw(const RankedPlan& r, int row, int column) const;

  std::vector<RankedPlan> plans_;
  std::vector<char> pareto_;
};

// The share of its fullest device's memory a ranked plan leaves free (0 when the capacity is
// unknown).
double free_share(const RankedPlan& p);

// Sorts by the raw values and keeps the rows whose layout text contains the filter string and
// that leave at least `min_free` of the fullest device's memory free.
class RankedPlanFilter : public QSortFilterProxyModel {
  Q_OBJECT
 public:
  explicit RankedPlanFilter(QObject* parent = nullptr);
  void set_min_free(double share);
  double min_free() const { return min_free_; }

 protected:
  bool filterAcceptsRow(int source_row, const QModelIndex& source_parent) const override;

 private:
  double min_free_ = 0;
};

// The rows of `m` (in its order) as CSV, with the given columns: the header's kCsvNameRole names
// (DisplayRole where a model has none), then per cell the raw number where Qt::UserRole holds a
// double (seconds, bytes, shares), else the shown text. Fields with a comma or quote are quoted.
QString table_csv(const QAbstractItemModel& m, const std::vector<int>& columns);

// Two or more ranked plans side by side: one column per plan, one row per figure (times, the
// step's breakdown, memory by kind, headroom, cost). The best value of each row is in bold.
class PlanSideBySideModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  explicit PlanSideBySideModel(QObject* parent = nullptr);
  void set_plans(std::vector<RankedPlan> plans);
  // Plan `column`'s simulated step, where the search did not re-simulate it (the comparison's
  // timelines did).
  void set_simulated(int column, double step_s);

  int rowCount(const QModelIndex& parent = QModelIndex()) const override;
  int columnCount(const QModelIndex& parent = QModelIndex()) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  // A row's raw value for plan `column` (seconds, bytes, shares or $), and its name.
  double value(int row, int column) const;
  QString row_name(int row) const;

 private:
  struct Row {
    QString name;
    enum Unit { kSeconds, kBytes, kShare, kDollars, kTokens } unit;
    bool lower_is_better;
    std::function<double(const RankedPlan&)> of;
  };
  static const std::vector<Row>& rows();
  std::vector<RankedPlan> plans_;
};

}  // namespace foresight::gui
