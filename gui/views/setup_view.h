// Setup: the job to predict -- model and cluster presets, parallel degrees, batch, schedule and
// memory savers -- with the validation message of the current plan inline. The view only maps
// widgets to a PlanInputs value and back; MainWindow evaluates it and hands the Evaluation back.
#pragma once

#include <QWidget>

#include "gui/models/plan_inputs.h"

class QCheckBox;
class QComboBox;
class QGroupBox;
class QLabel;
class QPushButton;
class QSpinBox;

namespace foresight::gui {

class PresetListModel;

class SetupView : public QWidget {
  Q_OBJECT
 public:
  explicit SetupView(QWidget* parent = nullptr);

  PlanInputs inputs() const;
  // Fills the widgets and emits inputs_changed once.
  void set_inputs(const PlanInputs& in);
  void show_evaluation(const Evaluation& e);
  QString status_text() const;
  // Files instead of presets (the buttons ask for a path, then call these): a model JSON or a
  // Hugging Face config.json, a cluster JSON, a plan JSON (its fields fill the form). An error
  // names the file, the field and the reason, shows in the status line and changes nothing.
  Status open_model_file(const std::string& path);
  Status open_cluster_file(const std::string& path);
  Status open_plan_file(const std::string& path);

 Q_SIGNALS:
  void inputs_changed(const foresight::gui::PlanInputs& in);
  void simulate_requested();

 private:
  // The constructor's steps: the plan's widgets, the four groups laid out, the signals connected.
  void create_plan_widgets();
  QGroupBox* job_group();
  QGroupBox* parallelism_group() const;
  QGroupBox* batch_group() const;
  QGroupBox* memory_group() const;
  void lay_out();
  void connect_signals();
  void changed();
  Status open_spec_file(PresetListModel* list, QComboBox* box, const std::string& path);
  void show_error(const std::string& message);

  PresetListModel* models_;
  PresetListModel* clusters_;
  QComboBox* model_;
  QComboBox* cluster_;
  QSpinBox *tp_, *pp_, *dp_, *cp_, *ep_, *virtual_stages_, *micro_batch_, *global_batch_, *seq_len_;
  QCheckBox *sp_, *flash_, *overlap_grad_, *overlap_tp_, *overlap_ep_, *offload_;
  QCheckBox *offload_params_, *offload_activations_, *offload_embeddings_, *fusion_, *graphs_;
  QComboBox *schedule_, *zero_, *recompute_, *precision_;
  QLabel* gpus_;
  QLabel* model_summary_;
  QLabel* cluster_summary_;
  QLabel* status_;
  QPushButton* simulate_;
  QPushButton *model_file_, *cluster_file_, *plan_file_;
  bool filling_ = false;
  // The plan last set (a plan file, a session): fields without a widget here (stage devices,
  // layer split, gradient compression, data loading) come from it.
  Plan base_plan_;
};

}  // namespace foresight::gui
