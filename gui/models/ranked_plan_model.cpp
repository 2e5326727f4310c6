// Ranked plans as table rows, their filter, CSV and side-by-side comparison.
#include "gui/models/ranked_plan_model.h"

#include <QFont>
#include <algorithm>
#include <cmath>

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

double free_share(const RankedPlan& p) {
  const double capacity = p.prediction.memory.capacity;
  return capacity > 0 ? p.memory_headroom / capacity : 0.0;
}

// The text of a cell: its raw value (what sorting uses) formatted for the column.
QVariant RankedPlanModel::display(const RankedPlan& r, int row, int column) const {
  const QVariant v = raw(r, row, column);
  switch (column) {
    case kRecompute:
      return qstr(recompute_string(r.plan));
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
      return bytes_text(v.toDouble());
    case kHeadroom:  // "4.10 GiB (5.1%)": the bytes and the share of the device
      return bytes_text(v.toDouble()) + QStringLiteral(" (") + percent_text(free_share(r)) + QLatin1Char(')');
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
      return plan_text(p);
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
      if (index.column() == kHeadroom)
        return QStringLiteral("memory left free on the most loaded device, and its share of the device");
      if (index.column() == kSimulated)
        return QStringLiteral(
            "step time re-simulated with the discrete-event simulator (\"-\": not re-simulated); "
            "re-simulated "
            "plans rank by this time, before the others");
      return {};
    case Qt::TextAlignmentRole:
      if (index.column() == kLayout || index.column() == kRecompute || index.column() == kSchedule) return {};
      return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
    default:
      return {};
  }
}

QVariant RankedPlanModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || section < 0 || section >= kColumnCount) return {};
  static const char* const names[kColumnCount] = {
      "#",        "Layout", "Step time", "Simulated", "MFU",      "Headroom", "Memory",   "$/Mtok",
      "Tokens/s", "mb",     "ZeRO",      "Recompute", "Schedule", "Offload",  "kWh/Mtok", "Pareto"};
  static const char* const csv[kColumnCount] = {"rank",
                                                "plan",
                                                "step_s",
                                                "simulated_step_s",
                                                "mfu",
                                                "headroom_bytes",
                                                "memory_bytes",
                                                "cost_per_mtok_usd",
                                                "tokens_per_s",
                                                "micro_batch",
                                                "zero",
                                                "recompute",
                                                "schedule",
                                                "offload_optimizer",
                                                "energy_per_mtok_kwh",
                                                "pareto"};
  if (role == Qt::DisplayRole) return QString::fromLatin1(names[section]);
  if (role == kCsvNameRole) return QString::fromLatin1(csv[section]);
  return {};
}

RankedPlanFilter::RankedPlanFilter(QObject* parent) : QSortFilterProxyModel(parent) {
  setSortRole(Qt::UserRole);
  setFilterKeyColumn(RankedPlanModel::kLayout);
  setFilterCaseSensitivity(Qt::CaseInsensitive);
}

void RankedPlanFilter::set_min_free(double share) {
  if (share == min_free_) return;
  min_free_ = share;
  invalidateRowsFilter();
}

bool RankedPlanFilter::filterAcceptsRow(int source_row, const QModelIndex& source_parent) const {
  if (!QSortFilterProxyModel::filterAcceptsRow(source_row, source_parent)) return false;
  const auto* m = qobject_cast<const RankedPlanModel*>(sourceModel());
  return !m || min_free_ <= 0 || free_share(m->plan(source_row)) >= min_free_;
}

namespace {

QString csv_field(const QString& s) {
  if (!s.contains(QLatin1Char(',')) && !s.contains(QLatin1Char('"')) && !s.contains(QLatin1Char('\n')))
    return s;
  QString q = s;
  q.replace(QStringLiteral("\""), QStringLiteral("\"\""));
  return QLatin1Char('"') + q + QLatin1Char('"');
}

}  // namespace

QString table_csv(const QAbstractItemModel& m, const std::vector<int>& columns) {
  QString out;
  for (std::size_t i = 0; i < columns.size(); ++i) {
    QVariant name = m.headerData(columns[i], Qt::Horizontal, RankedPlanModel::kCsvNameRole);
    if (!name.isValid()) name = m.headerData(columns[i], Qt::Horizontal, Qt::DisplayRole);
    out += (i ? QStringLiteral(",") : QString()) + csv_field(name.toString());
  }
  out += QLatin1Char('\n');
  for (int r = 0; r < m.rowCount(); ++r) {
    for (std::size_t i = 0; i < columns.size(); ++i) {
      const QModelIndex idx = m.index(r, columns[i]);
      const QVariant raw = m.data(idx, Qt::UserRole);
      const QString text = raw.typeId() == QMetaType::Double ? QString::number(raw.toDouble(), 'g', 10)
                                                             : m.data(idx, Qt::DisplayRole).toString();
      out += (i ? QStringLiteral(",") : QString()) + csv_field(text);
    }
    out += QLatin1Char('\n');
  }
  return out;
}

PlanSideBySideModel::PlanSideBySideModel(QObject* parent) : QAbstractTableModel(parent) {}

const std::vector<PlanSideBySideModel::Row>& PlanSideBySideModel::rows() {
  static const std::vector<Row> all = [] {
    std::vector<Row> v = {
        {QStringLiteral("step time (analytic)"), Row::kSeconds, true,
         [](const RankedPlan& p) { return p.prediction.step_time_s; }},
        {QStringLiteral("step time (simulated)"), Row::kSeconds, true,
         [](const RankedPlan& p) { return p.simulated_step_s; }},
        {QStringLiteral("MFU"), Row::kShare, false, [](const RankedPlan& p) { return p.prediction.mfu; }},
        {QStringLiteral("tokens/s"), Row::kTokens, false,
         [](const RankedPlan& p) { return p.prediction.tokens_per_s; }},
        {QStringLiteral("$ per Mtok"), Row::kDollars, true,
         [](const RankedPlan& p) { return p.economics.cost_per_mtok_usd; }},
    };
    // The step's breakdown on its slowest stage, in the tables' order.
    const auto parts = time_parts(TimeBreakdown{});
    for (std::size_t i = 0; i < parts.size(); ++i)
      v.push_back({QStringLiteral("time: ") + QString::fromLatin1(parts[i].name), Row::kSeconds, true,
                   [i](const RankedPlan& p) { return time_parts(p.prediction.time)[i].amount; }});
    const auto mem = memory_parts(MemoryBreakdown{});
    for (std::size_t i = 0; i < mem.size(); ++i)
      v.push_back({QStringLiteral("memory: ") + QString::fromLatin1(mem[i].name), Row::kBytes, true,
                   [i](const RankedPlan& p) { return memory_parts(p.prediction.memory)[i].amount; }});
    v.push_back({QStringLiteral("memory: total"), Row::kBytes, true,
                 [](const RankedPlan& p) { return p.prediction.memory.total; }});
    v.push_back({QStringLiteral("memory free"), Row::kBytes, false,
                 [](const RankedPlan& p) { return p.memory_headroom; }});
    v.push_back({QStringLiteral("memory free (share)"), Row::kShare, false,
                 [](const RankedPlan& p) { return free_share(p); }});
    return v;
  }();
  return all;
}

void PlanSideBySideModel::set_plans(std::vector<RankedPlan> plans) {
  beginResetModel();
  plans_ = std::move(plans);
  endResetModel();
}

void PlanSideBySideModel::set_simulated(int column, double step_s) {
  if (column < 0 || column >= columnCount() || !(step_s > 0)) return;
  RankedPlan& p = plans_[static_cast<std::size_t>(column)];
  if (p.simulated_step_s > 0) return;
  beginResetModel();  // the best of the row may change
  p.simulated_step_s = step_s;
  endResetModel();
}

int PlanSideBySideModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rows().size());
}

int PlanSideBySideModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(plans_.size());
}

double PlanSideBySideModel::value(int row, int column) const {
  return rows()[static_cast<std::size_t>(row)].of(plans_[static_cast<std::size_t>(column)]);
}

QString PlanSideBySideModel::row_name(int row) const { return rows()[static_cast<std::size_t>(row)].name; }

QVariant PlanSideBySideModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
  const Row& row = rows()[static_cast<std::size_t>(index.row())];
  const double v = value(index.row(), index.column());
  const bool missing = row.unit == Row::kSeconds && v < 0;  // not re-simulated
  switch (role) {
    case Qt::DisplayRole:
      if (missing) return QStringLiteral("-");
      switch (row.unit) {
        case Row::kSeconds:
          return seconds_text(v);
        case Row::kBytes:
          return bytes_text(v);
        case Row::kShare:
          return percent_text(v);
        case Row::kDollars:
          return QString::number(v, 'f', 4);
        case Row::kTokens:
          return QString::number(v, 'f', 0);
      }
      return {};
    case Qt::UserRole:
      return v;
    case Qt::FontRole: {
      // The best of the row in bold, when the plans differ in it.
      double best = v, worst = v;
      for (int c = 0; c < columnCount(); ++c) {
        const double o = value(index.row(), c);
        if (row.unit == Row::kSeconds && o < 0) continue;
        best = row.lower_is_better ? std::min(best, o) : std::max(best, o);
        worst = row.lower_is_better ? std::max(worst, o) : std::min(worst, o);
      }
      QFont f;
      f.setBold(!missing && v == best && best != worst);
      return f;
    }
    case Qt::TextAlignmentRole:
      return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
    default:
      return {};
  }
}

QVariant PlanSideBySideModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (role != Qt::DisplayRole) return {};
  if (orientation == Qt::Vertical)
    return section >= 0 && section < rowCount() ? row_name(section) : QVariant();
  if (section < 0 || section >= columnCount()) return {};
  return plan_text(plans_[static_cast<std::size_t>(section)].plan);
}

}  // namespace foresight::gui
