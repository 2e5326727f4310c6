// Comparison tables.
#include "gui/models/compare_models.h"

#include <QBrush>
#include <QColor>
#include <cmath>

#include "gui/models/format.h"

namespace foresight::gui {

namespace {

QVariant right_aligned() { return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter)); }

QString signed_percent(double pct) {
  return (pct >= 0 ? QStringLiteral("+") : QString()) + QString::number(pct, 'f', 1) + '%';
}

// Colour an error by size: within 10% is good agreement for a performance model, beyond 25% is not.
QVariant error_brush(double pct) {
  const double a = std::abs(pct);
  if (a <= 10) return QBrush(QColor(0x1b, 0x7f, 0x3b));
  if (a <= 25) return QBrush(QColor(0xb3, 0x6b, 0x00));
  return QBrush(QColor(0xc6, 0x28, 0x28));
}

}  // namespace

CompareKindModel::CompareKindModel(QObject* parent) : QAbstractTableModel(parent) {}

void CompareKindModel::set_report(const CompareReport& r) {
  beginResetModel();
  kinds_ = r.kinds;
  endResetModel();
}

void CompareKindModel::clear() {
  beginResetModel();
  kinds_.clear();
  endResetModel();
}

int CompareKindModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(kinds_.size());
}

int CompareKindModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant CompareKindModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
  const KindComparison& k = kinds_[static_cast<std::size_t>(index.row())];
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case kKind:
        return qstr(k.kind);
      case kOps:
        return k.ops;
      case kPredicted:
        return seconds_text(k.predicted_s);
      case kMeasured:
        return seconds_text(k.measured_s);
      case kError:
        return signed_percent(k.error_pct);
      default:
        return {};
    }
  }
  if (role == Qt::UserRole) {
    switch (index.column()) {
      case kKind:
        return qstr(k.kind);
      case kOps:
        return k.ops;
      case kPredicted:
        return k.predicted_s;
      case kMeasured:
        return k.measured_s;
      case kError:
        return k.error_pct;
      default:
        return {};
    }
  }
  if (role == Qt::ForegroundRole && index.column() == kError) return error_brush(k.error_pct);
  if (role == Qt::TextAlignmentRole && index.column() != kKind) return right_aligned();
  if (role == Qt::ToolTipRole && k.kind == "idle")
    return QStringLiteral(
        "the part of the step the compute stream is not busy (bubbles, waiting for communication)");
  return {};
}

QVariant CompareKindModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* const names[kColumnCount] = {"Op kind (per rank)", "Ops", "Predicted", "Measured",
                                                  "Error"};
  if (section < 0 || section >= kColumnCount) return {};
  return QString::fromLatin1(names[section]);
}

WorstOpsModel::WorstOpsModel(QObject* parent) : QAbstractTableModel(parent) {}

void WorstOpsModel::set_report(const CompareReport& r) {
  beginResetModel();
  ops_ = r.worst;
  endResetModel();
}

void WorstOpsModel::clear() {
  beginResetModel();
  ops_.clear();
  endResetModel();
}

int WorstOpsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(ops_.size());
}

int WorstOpsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant WorstOpsModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
  const OpComparison& o = ops_[static_cast<std::size_t>(index.row())];
  const double diff = o.predicted_s - o.measured_s;
  if (role == Qt::DisplayRole) {
    switch (index.column()) {
      case kId:
        return qstr(o.id);
      case kKind:
        return qstr(o.kind);
      case kPredicted:
        return seconds_text(o.predicted_s);
      case kMeasured:
        return seconds_text(o.measured_s);
      case kDifference:
        return (diff >= 0 ? QStringLiteral("+") : QStringLiteral("-")) + seconds_text(std::abs(diff));
      default:
        return {};
    }
  }
  if (role == Qt::UserRole) {
    switch (index.column()) {
      case kId:
        return qstr(o.id);
      case kKind:
        return qstr(o.kind);
      case kPredicted:
        return o.predicted_s;
      case kMeasured:
        return o.measured_s;
      case kDifference:
        return diff;
      default:
        return {};
    }
  }
  if (role == Qt::TextAlignmentRole && index.column() >= kPredicted) return right_aligned();
  return {};
}

QVariant WorstOpsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* const names[kColumnCount] = {"Op id", "Kind", "Predicted", "Measured",
                                                  "Predicted - measured"};
  if (section < 0 || section >= kColumnCount) return {};
  return QString::fromLatin1(names[section]);
}

}  // namespace foresight::gui
