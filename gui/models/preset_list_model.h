// The built-in presets of one kind (models, clusters) as a list model for combo boxes: the name,
// and a one-line summary as tooltip ("8.0B parameters, 32 layers, sequence 8192"). Files the user
// opens (a model JSON or a Hugging Face config.json, a cluster JSON) join the list after them,
// named by their path and shown as "config.json (file)".
//
//   PresetListModel models(PresetKind::kModel);
//   combo->setModel(&models);
//   models.row_of("llama3-8b");   // -1 if unknown
#pragma once

#include <QAbstractListModel>
#include <string>
#include <vector>

#include "sim/core/status.h"
#include "sim/spec/presets.h"

namespace foresight::gui {

class PresetListModel : public QAbstractListModel {
  Q_OBJECT
 public:
  // Qt::UserRole: the preset name as a QString (the same as Qt::DisplayRole).
  explicit PresetListModel(PresetKind kind, QObject* parent = nullptr);

  int rowCount(const QModelIndex& parent = QModelIndex()) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;

  PresetKind kind() const { return kind_; }
  int row_of(const std::string& name) const;
  // Loads `path` as this kind's spec and lists it (once); its row, or the loader's error, which
  // names the file, the field and the reason.
  Result<int> add_file(const std::string& path);
  const std::string& name(int row) const { return entries_[static_cast<std::size_t>(row)].name; }

 private:
  struct Entry {
    std::string name;
    std::string summary;
    bool file = false;
  };
  PresetKind kind_;
  std::vector<Entry> entries_;
};

}  // namespace foresight::gui
