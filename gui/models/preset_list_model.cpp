// Preset names and their one-line summaries.
#include "gui/models/preset_list_model.h"

#include <fmt/core.h>

#include <filesystem>

#include "gui/models/format.h"
#include "sim/spec/hardware.h"
#include "sim/spec/model.h"

namespace foresight::gui {

namespace {

std::string model_summary(const ModelSpec& m) {
  std::string s = fmt::format("{:.1f}B parameters", m.total_params() / 1e9);
  if (m.is_moe()) s += fmt::format(" ({:.1f}B active, {} experts)", m.active_params() / 1e9, m.moe.experts);
  return s + fmt::format(", {} layers, hidden {}, sequence {}", m.layers, m.hidden, m.seq_len);
}

std::string cluster_summary(const ClusterSpec& c) {
  std::string s = fmt::format("{} nodes x {} {}", c.nodes, c.node.accelerators(), c.node.accelerator().name);
  return c.description.empty() ? s : s + " -- " + c.description;
}

std::string summary_of(PresetKind kind, const std::string& name) {
  switch (kind) {
    case PresetKind::kModel: {
      auto text = preset_text(kind, name);
      if (!text) return {};
      auto m = model_from_text(*text, "preset " + name);
      return m ? model_summary(*m) : m.error().message();
    }
    case PresetKind::kCluster: {
      auto c = load_cluster(name);
      return c ? cluster_summary(*c) : c.error().message();
    }
    case PresetKind::kNode: {
      auto n = load_node(name);
      if (!n) return n.error().message();
      return fmt::format("{} x {}", n->accelerators(), n->accelerator().name);
    }
    case PresetKind::kDevice: {
      auto d = load_device(name);
      if (!d) return d.error().message();
      return fmt::format("{}, {:.0f} GiB", d->vendor, d->memory_bytes / 1073741824.0);
    }
    case PresetKind::kTable:
      return {};
  }
  return {};
}

}  // namespace

PresetListModel::PresetListModel(PresetKind kind, QObject* parent) : QAbstractListModel(parent), kind_(kind) {
  for (auto& name : preset_names(kind)) {
    std::string summary = summary_of(kind, name);
    entries_.push_back({std::move(name), std::move(summary)});
  }
}

int PresetListModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(entries_.size());
}

QVariant PresetListModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
  const Entry& e = entries_[static_cast<std::size_t>(index.row())];
  switch (role) {
    case Qt::DisplayRole:
    case Qt::EditRole:
      if (e.file) return qstr(std::filesystem::path(e.name).filename().string() + " (file)");
      return qstr(e.name);
    case Qt::UserRole:
      return qstr(e.name);
    case Qt::ToolTipRole:
      return qstr(e.summary);
    default:
      return {};
  }
}

Result<int> PresetListModel::add_file(const std::string& path) {
  if (const int row = row_of(path); row >= 0) return row;
  std::string summary;
  switch (kind_) {
    case PresetKind::kModel: {
      FS_ASSIGN_OR_RETURN(ModelSpec m, load_model_file(path));
      summary = model_summary(m);
      break;
    }
    case PresetKind::kCluster: {
      FS_ASSIGN_OR_RETURN(ClusterSpec c, load_cluster(path));
      summary = cluster_summary(c);
      break;
    }
    default:
      return Error(path + ": only model and cluster files can be opened here");
  }
  const int row = static_cast<int>(entries_.size());
  beginInsertRows(QModelIndex(), row, row);
  entries_.push_back({path, "file " + path + ": " + summary, true});
  endInsertRows();
  return row;
}

int PresetListModel::row_of(const std::string& name) const {
  for (std::size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].name == name) return static_cast<int>(i);
  return -1;
}

}  // namespace foresight::gui
