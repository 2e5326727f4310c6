// Step-time and memory categories of a Prediction.
#include "gui/models/breakdown_model.h"

#include "gui/models/format.h"

namespace foresight::gui {

BreakdownModel::BreakdownModel(Kind kind, QObject* parent) : QAbstractTableModel(parent), kind_(kind) {}

void BreakdownModel::set_prediction(const Prediction& p) {
  beginResetModel();
  rows_.clear();
  std::vector<Row> all;
  if (kind_ == Kind::kTime) {
    const TimeBreakdown& t = p.time;
    // Recompute is part of compute (TimeBreakdown::recompute), so it is not a row of its own.
    for (const auto& [name, amount] : time_parts(t)) all.push_back({name, amount});
    denominator_ = t.total > 0 ? t.total : p.step_time_s;
  } else {
    const MemoryBreakdown& m = p.memory;
    for (const auto& [name, amount] : memory_parts(m)) all.push_back({name, amount});
    denominator_ = m.capacity;
  }
  for (auto& r : all)
    if (r.amount > 0) rows_.push_back(std::move(r));
  endResetModel();
}

void BreakdownModel::clear() {
  beginResetModel();
  rows_.clear();
  denominator_ = 0;
  endResetModel();
}

int BreakdownModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}

int BreakdownModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant BreakdownModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
  const Row& r = rows_[static_cast<std::size_t>(index.row())];
  const double share = denominator_ > 0 ? r.amount / denominator_ : 0.0;
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case kCategory:
        return qstr(r.category);
      case kAmount:
        return kind_ == Kind::kTime ? seconds_text(r.amount) : bytes_text(r.amount);
      case kShare:
        return percent_text(share);
      default:
        return {};
    }
  }
  if (role == Qt::UserRole) {
    switch (index.column()) {
      case kCategory:
        return qstr(r.category);
      case kAmount:
        return r.amount;
      case kShare:
        return share;
      default:
        return {};
    }
  }
  if (role == Qt::TextAlignmentRole && index.column() != kCategory)
    return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
  return {};
}

QVariant BreakdownModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case kCategory:
      return kind_ == Kind::kTime ? QStringLiteral("Step time") : QStringLiteral("Memory per device");
    case kAmount:
      return kind_ == Kind::kTime ? QStringLiteral("Time") : QStringLiteral("Bytes");
    case kShare:
      return kind_ == Kind::kTime ? QStringLiteral("Of step") : QStringLiteral("Of capacity");
    default:
      return {};
  }
}

}  // namespace foresight::gui
