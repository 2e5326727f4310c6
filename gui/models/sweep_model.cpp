// Sweep results as table rows.
#include "gui/models/sweep_model.h"

#include <cmath>
#include <limits>

#include "gui/models/format.h"
#include "sim/spec/plan.h"

namespace foresight::gui {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kGiB = 1073741824.0;

QString value_text(const nlohmann::json& v) {
  if (v.is_string()) return qstr(v.get<std::string>());
  return qstr(v.dump());
}

double number(const nlohmann::json& row, const char* key) {
  if (!row.is_object() || !row.contains(key) || !row[key].is_number()) return kNaN;
  return row[key].get<double>();
}

}  // namespace

QString axis_title(const std::string& pointer) {
  const auto last = pointer.rfind('/');
  if (last == std::string::npos || last == 0) return qstr(pointer.substr(last == 0 ? 1 : 0));
  const auto before = pointer.rfind('/', last - 1);
  return qstr(pointer.substr(before == std::string::npos ? 0 : before + 1));
}

SweepModel::SweepModel(QObject* parent) : QAbstractTableModel(parent) {}

void SweepModel::set_outcome(SweepOutcome out) {
  beginResetModel();
  outcome_ = std::move(out);
  endResetModel();
}

void SweepModel::clear() { set_outcome(SweepOutcome{}); }

int SweepModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(outcome_.rows.size());
}

int SweepModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : axis_count() + kMetricCount;
}

bool SweepModel::point_ok(int row) const {
  const nlohmann::json& r = outcome_.rows[static_cast<std::size_t>(row)];
  return r.is_object() && r.value("ok", false);
}

double SweepModel::step_time(int row) const {
  return point_ok(row) ? number(outcome_.rows[static_cast<std::size_t>(row)], "step_time_s") : kNaN;
}

QString SweepModel::point_label(int row) const {
  const nlohmann::json& r = outcome_.rows[static_cast<std::size_t>(row)];
  QStringList parts;
  for (const std::string& p : outcome_.axes)
    parts << (r.is_object() && r.contains("axes") && r["axes"].contains(p) ? value_text(r["axes"][p])
                                                                           : QStringLiteral("?"));
  return parts.join(QStringLiteral(", "));
}

QVariant SweepModel::metric(const nlohmann::json& row, Metric m, bool raw) const {
  // Raw NaN (no value) is an invalid QVariant, which proxies sort before every number.
  auto raw_value = [](double v) { return std::isnan(v) ? QVariant() : QVariant(v); };
  auto seconds = [&](const char* key) -> QVariant {
    const double v = number(row, key);
    if (raw) return raw_value(v);
    return std::isnan(v) ? QString() : seconds_text(v);
  };
  auto plain = [&](double v, int decimals, double scale = 1.0,
                   const QString& suffix = QString()) -> QVariant {
    if (raw) return raw_value(v);
    return std::isnan(v) ? QString() : QString::number(v * scale, 'f', decimals) + suffix;
  };
  switch (m) {
    case kStepTime:
      return seconds("step_time_s");
    case kTokensPerS:
      return plain(number(row, "tokens_per_s"), 0);
    case kMfu:
      return plain(number(row, "mfu"), 1, 100.0, QStringLiteral("%"));
    case kMemory: {
      const double gib = number(row, "memory_gib");
      if (raw) return raw_value(gib);
      return std::isnan(gib) ? QString() : bytes_text(gib * kGiB);
    }
    case kExposedComm:
      return seconds("exposed_comm_s");
    case kBubble:
      return seconds("bubble_s");
    case kCostPerMtok:
      return plain(number(row, "cost_per_mtok_usd"), 4);
    case kEnergyPerMtok:
      return plain(number(row, "energy_per_mtok_kwh"), 4);
    case kLayout: {
      if (!row.is_object() || !row.contains("plan")) return QString();
      auto p = plan_from_json(row["plan"], "sweep row");
      return p ? layout_text(*p) : QString();
    }
    case kError:
      if (row.is_null()) return QStringLiteral("not evaluated (cancelled)");
      return qstr(row.value("error", ""));
    default:
      return {};
  }
}

QVariant SweepModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
  const nlohmann::json& row = outcome_.rows[static_cast<std::size_t>(index.row())];
  const int c = index.column();
  if (c < axis_count()) {
    if (role != Qt::DisplayRole && role != Qt::UserRole) return {};
    const std::string& pointer = outcome_.axes[static_cast<std::size_t>(c)];
    if (!row.is_object() || !row.contains("axes") || !row["axes"].contains(pointer)) return {};
    const nlohmann::json& v = row["axes"][pointer];
    if (role == Qt::UserRole && v.is_number()) return v.get<double>();
    return value_text(v);
  }
  const auto m = static_cast<Metric>(c - axis_count());
  switch (role) {
    case Qt::DisplayRole:
      return metric(row, m, false);
    case Qt::UserRole:
      return metric(row, m, m != kLayout && m != kError);
    case Qt::ToolTipRole:
      return m == kError ? metric(row, m, false) : QVariant();
    case Qt::TextAlignmentRole:
      if (m == kLayout || m == kError) return {};
      return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
    default:
      return {};
  }
}

QVariant SweepModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || section < 0 || section >= axis_count() + kMetricCount) return {};
  if (section < axis_count()) {
    const std::string& pointer = outcome_.axes[static_cast<std::size_t>(section)];
    if (role == Qt::DisplayRole) return axis_title(pointer);
    if (role == Qt::ToolTipRole) return qstr(pointer);
    return {};
  }
  if (role != Qt::DisplayRole) return {};
  static const char* const names[kMetricCount] = {"Step time",    "Tokens/s", "MFU",    "Memory",
                                                  "Exposed comm", "Bubble",   "$/Mtok", "kWh/Mtok",
                                                  "Layout",       "Error"};
  return QString::fromLatin1(names[section - axis_count()]);
}

}  // namespace foresight::gui
