// Preset names and their one-line summaries.
#include "gui/models/preset_list_model.h"

#include <fmt/core.h>

#include "gui/models/format.h"
#include "sim/spec/hardware.h"
#include "sim/spec/model.h"

namespace foresight::gui {

namespace {

std::string summary_of(PresetKind kind, const std::string& name) {
  switch (kind) {
    case PresetKind::kModel: {
      auto text = preset_text(kind, name);
      if (!text) return {};
      auto m = model_from_text(*text, "preset " + name);
      if (!m) return m.error().message();
      std::string s = fmt::format("{:.1f}B parameters", m->total_params() / 1e9);
      if (m->is_moe()) s += fmt::format(" ({:.1f}B active, {} experts)", m->active_params() / 1e9, m->moe.experts);
      return s + fmt::format(", {} layers, hidden {}, sequence {}", m->layers, m->hidden, m->seq_len);
    }
    case PresetKind::kCluster: {
      auto c = load_cluster(name);
      if (!c) return c.error().message();
      std::string s = fmt::format("{} nodes x {} {}", c->nodes, c->node.accelerators(), c->node.accelerator().name);
      return c->description.empty() ? s : s + " -- " + c->description;
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
    case Qt::UserRole: return qstr(e.name);
    case Qt::ToolTipRole: return qstr(e.summary);
    default: return {};
  }
}

int PresetListModel::row_of(const std::string& name) const {
  for (std::size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].name == name) return static_cast<int>(i);
  return -1;
}

}  // namespace foresight::gui
