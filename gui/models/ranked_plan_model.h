// Ranked plans of a search as a table, one row per plan, best first. Sort it with a
// QSortFilterProxyModel whose sortRole is Qt::UserRole: every cell has its raw number there
// (seconds, bytes, fractions), so "1.2 s" sorts after "900 ms".
//
//   RankedPlanModel m;  m.set_plans(result.plans, result.pareto);
//   proxy.setSourceModel(&m);  proxy.setSortRole(Qt::UserRole);
//   const RankedPlan& best = m.plan(proxy.mapToSource(proxy.index(0, 0)).row());
#pragma once

#include <QAbstractTableModel>
#include <vector>

#include "sim/search/search.h"

namespace foresight::gui {

class RankedPlanModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  // The figures people rank by come first, the knobs after them.
  enum Column {
    kRank,
    kLayout,
    kStepTime,
    kSimulated,
    kMfu,
    kTokensPerS,
    kMemory,
    kCostPerMtok,
    kMicroBatch,
    kZero,
    kRecompute,
    kSchedule,
    kOffload,
    kHeadroom,
    kEnergyPerMtok,
    kPareto,
    kColumnCount
  };

  explicit RankedPlanModel(QObject* parent = nullptr);

  // `pareto` marks the rows that are on the Pareto front (time vs cost vs memory headroom).
  void set_plans(std::vector<RankedPlan> plans, const std::vector<RankedPlan>& pareto = {});
  void clear();

  int rowCount(const QModelIndex& parent = QModelIndex()) const override;
  int columnCount(const QModelIndex& parent = QModelIndex()) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  const RankedPlan& plan(int row) const { return plans_[static_cast<std::size_t>(row)]; }
  bool on_pareto_front(int row) const { return pareto_[static_cast<std::size_t>(row)] != 0; }

 private:
  QVariant display(const RankedPlan& r, int row, int column) const;
  QVariant raw(const RankedPlan& r, int row, int column) const;

  std::vector<RankedPlan> plans_;
  std::vector<char> pareto_;
};

}  // namespace foresight::gui
