// Ranked plans as table rows.
#include "gui/models/ranked_plan_model.h"

#include "gui/models/format.h"

namespace foresight::gui {

RankedPlanModel::RankedPlanModel(QObject* parent) : QAbstractTableModel(parent) {}

void RankedPlanModel::set_plans(std::vector<RankedPlan> plans, const std::vector<RankedPlan>& pareto) {
  beginResetModel();
  plans_ = std::move(plans);
  pareto_.assign(plans_.size(), 0);
  for (std::size_t i = 0; i < plans_.size(); ++i)
    for (const RankedPlan& f : pareto)
      if (f.plan == plans_[i].plan) pareto_[i] = 1;
  endResetModel();
}

void RankedPlanModel::clear() {
  beginResetModel();
  plans_.clear();
  pareto_.clear();
  endResetModel();
}

int RankedPlanModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(plans_.size());
}

int RankedPlanModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

// The text of a cell: its raw value (what sorting uses) formatted for the column.
QVariant RankedPlanModel::display(const RankedPlan& r, int row, int column) const {
  const QVariant v = raw(r, row, column);
  switch (column) {
    case kRecompute:
      return qstr(to_string(r.plan.recompute));
    case kSchedule:
      return qstr(to_string(r.plan.schedule));
    case kOffload:
    case kPareto:
      return v.toBool() ? QStringLiteral("yes") : QString();
    case kStepTime:
      return seconds_text(v.toDouble());
    case kSimulated:
      return v.toDouble() >= 0 ? seconds_text(v.toDouble()) : QStringLiteral("-");
    case kTokensPerS:
      return QString::number(v.toDouble(), 'f', 0);
    case kMfu:
      return percent_text(v.toDouble());
    case kMemory:
    case kHeadroom:
      return bytes_text(v.toDouble());
    case kCostPerMtok:
    case kEnergyPerMtok:
      return QString::number(v.toDouble(), 'f', 4);
    default:  // rank, layout, micro-batch, ZeRO stage: shown as they are
      return v;
  }
}

QVariant RankedPlanModel::raw(const RankedPlan& r, int row, int column) const {
  const Plan& p = r.plan;
  const Prediction& pr = r.prediction;
  switch (column) {
    case kRank:
      return row + 1;
    case kLayout:
      return layout_text(p);
    case kMicroBatch:
      return p.micro_batch;
    case kZero:
      return p.zero_stage;
    case kRecompute:
      return static_cast<int>(p.recompute);
    case kSchedule:
      return static_cast<int>(p.schedule);
    case kOffload:
      return p.offload_optimizer;
    case kStepTime:
      return pr.step_time_s;
    case kSimulated:
      return r.simulated_step_s;
    case kTokensPerS:
      return pr.tokens_per_s;
    case kMfu:
      return pr.mfu;
    case kMemory:
      return pr.memory.total;
    case kHeadroom:
      return r.memory_headroom;
    case kCostPerMtok:
      return r.economics.cost_per_mtok_usd;
    case kEnergyPerMtok:
      return r.economics.energy_per_mtok_kwh;
    case kPareto:
      return pareto_[static_cast<std::size_t>(row)] != 0;
    default:
      return {};
  }
}

QVariant RankedPlanModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
  const RankedPlan& r = plans_[static_cast<std::size_t>(index.row())];
  switch (role) {
    case Qt::DisplayRole:
      return display(r, index.row(), index.column());
    case Qt::UserRole:
      return raw(r, index.row(), index.column());
    case Qt::ToolTipRole:
      if (index.column() == kMicroBatch) return QStringLiteral("sequences per micro-batch");
      if (index.column() == kMemory) return QStringLiteral("memory on the most loaded device");
      if (index.column() == kSimulated)
        return QStringLiteral(
            "step time re-simulated with the discrete-event simulator (\"-\": not re-simulated)");
      return {};
    case Qt::TextAlignmentRole:
      if (index.column() == kLayout || index.column() == kRecompute || index.column() == kSchedule) return {};
      return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
    default:
      return {};
  }
}

QVariant RankedPlanModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* const names[kColumnCount] = {
      "#",  "Layout", "Step time", "Simulated", "MFU",     "Tokens/s", "Memory",   "$/Mtok",
      "mb", "ZeRO",   "Recompute", "Schedule",  "Offload", "Headroom", "kWh/Mtok", "Pareto"};
  if (section < 0 || section >= kColumnCount) return {};
  return QString::fromLatin1(names[section]);
}

}  // namespace foresight::gui
