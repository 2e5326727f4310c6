// Setup view: widgets <-> PlanInputs.
#include "gui/views/setup_view.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

#include "gui/models/format.h"
#include "gui/models/preset_list_model.h"

namespace foresight::gui {

namespace {

QSpinBox* spin(int lo, int hi, const QString& tip) {
  auto* s = new QSpinBox;
  s->setRange(lo, hi);
  s->setToolTip(tip);
  s->setAccelerated(true);
  return s;
}

template <typename E>
void fill_enum(QComboBox* box, std::initializer_list<E> values) {
  for (E v : values) box->addItem(qstr(to_string(v)), static_cast<int>(v));
}

template <typename E>
E enum_of(const QComboBox* box) {
  return static_cast<E>(box->currentData().toInt());
}

template <typename E>
void select_enum(QComboBox* box, E v) {
  box->setCurrentIndex(std::max(0, box->findData(static_cast<int>(v))));
}

}  // namespace

SetupView::SetupView(QWidget* parent) : QWidget(parent) {
  models_ = new PresetListModel(PresetKind::kModel, this);
  clusters_ = new PresetListModel(PresetKind::kCluster, this);
  model_ = new QComboBox;
  model_->setModel(models_);
  cluster_ = new QComboBox;
  cluster_->setModel(clusters_);
  create_plan_widgets();
  lay_out();
  connect_signals();
}

void SetupView::create_plan_widgets() {
  tp_ = spin(1, 1024, tr("tensor-parallel degree"));
  pp_ = spin(1, 1024, tr("pipeline-parallel degree (stages)"));
  dp_ = spin(1, 1 << 20, tr("data-parallel degree (replicas)"));
  cp_ = spin(1, 1024, tr("context-parallel degree (sequence split)"));
  ep_ = spin(1, 1024, tr("expert-parallel degree (MoE models; carved out of dp)"));
  virtual_stages_ = spin(1, 64, tr("model chunks per pipeline rank (interleaved 1F1B)"));
  micro_batch_ = spin(1, 4096, tr("sequences per micro-batch"));
  global_batch_ = spin(1, 1 << 30, tr("sequences per optimizer step"));
  seq_len_ = spin(0, 1 << 22, tr("training sequence length; 0: the model's"));
  seq_len_->setSpecialValueText(tr("model default"));
  sp_ = new QCheckBox(tr("sequence parallel"));
  flash_ = new QCheckBox(tr("flash attention"));
  overlap_grad_ = new QCheckBox(tr("overlap gradient reduction"));
  overlap_tp_ = new QCheckBox(tr("overlap TP communication"));
  overlap_ep_ = new QCheckBox(tr("overlap expert all-to-alls (merged forward/backward pairs)"));
  overlap_ep_->setToolTip(
      tr("MoE with ep > 1: a forward and a backward of different micro-batches run as one "
         "pair (Megatron-Core's --overlap-moe-expert-parallel-comm; interleaved 1F1B, "
         "dualpipe or one stage)"));
  offload_ = new QCheckBox(tr("offload optimizer to host"));
  offload_params_ = new QCheckBox(tr("offload parameters to host (needs the optimizer's)"));
  offload_activations_ = new QCheckBox(tr("offload activations to host"));
  offload_embeddings_ = new QCheckBox(tr("embedding table on host"));
  fusion_ = new QCheckBox(tr("fused elementwise kernels"));
  fusion_->setToolTip(tr("off: one kernel per operator, as PyTorch eager runs them"));
  fusion_->setChecked(Plan{}.kernel_fusion);
  graphs_ = new QCheckBox(tr("CUDA graphs"));
  schedule_ = new QComboBox;
  fill_enum(schedule_, {Schedule::kGpipe, Schedule::k1F1B, Schedule::kInterleaved1F1B, Schedule::kZeroBubble,
                        Schedule::kDualPipe});
  recompute_ = new QComboBox;
  fill_enum(recompute_, {Recompute::kNone, Recompute::kSelective, Recompute::kFull, Recompute::kOptimal,
                         Recompute::kSelectiveOp});
  precision_ = new QComboBox;
  fill_enum(precision_, {Precision::kFp32, Precision::kBf16, Precision::kFp16, Precision::kFp8});
  zero_ = new QComboBox;
  for (int z = 0; z <= 3; ++z)
    zero_->addItem(z == 3 ? tr("ZeRO-3 (FSDP full shard)") : QStringLiteral("ZeRO-%1").arg(z), z);
}

QGroupBox* SetupView::job_group() {
  auto* job = new QGroupBox(tr("Job"));
  auto* job_form = new QFormLayout(job);
  model_summary_ = new QLabel;
  cluster_summary_ = new QLabel;
  for (QLabel* l : {model_summary_, cluster_summary_}) {
    l->setWordWrap(true);
    l->setStyleSheet(QStringLiteral("color: palette(dark);"));
  }
  model_file_ = new QPushButton(tr("File..."));
  model_file_->setToolTip(tr("open a model JSON or a Hugging Face config.json"));
  cluster_file_ = new QPushButton(tr("File..."));
  cluster_file_->setToolTip(tr("open a cluster JSON"));
  auto with_button = [](QComboBox* box, QPushButton* b) {
    auto* row = new QHBoxLayout;
    row->addWidget(box, 1);
    row->addWidget(b);
    return row;
  };
  job_form->addRow(tr("Model"), with_button(model_, model_file_));
  job_form->addRow(QString(), model_summary_);
  job_form->addRow(tr("Cluster"), with_button(cluster_, cluster_file_));
  job_form->addRow(QString(), cluster_summary_);
  gpus_ = new QLabel;
  job_form->addRow(tr("Accelerators"), gpus_);
  return job;
}

QGroupBox* SetupView::parallelism_group() const {
  auto* par = new QGroupBox(tr("Parallelism"));
  auto* par_form = new QFormLayout(par);
  par_form->addRow(tr("Tensor (tp)"), tp_);
  par_form->addRow(tr("Pipeline (pp)"), pp_);
  par_form->addRow(tr("Data (dp)"), dp_);
  par_form->addRow(tr("Context (cp)"), cp_);
  par_form->addRow(tr("Expert (ep)"), ep_);
  par_form->addRow(tr("Virtual stages"), virtual_stages_);
  par_form->addRow(QString(), sp_);
  return par;
}

QGroupBox* SetupView::batch_group() const {
  auto* batch = new QGroupBox(tr("Batch"));
  auto* batch_form = new QFormLayout(batch);
  batch_form->addRow(tr("Micro-batch"), micro_batch_);
  batch_form->addRow(tr("Global batch"), global_batch_);
  batch_form->addRow(tr("Sequence length"), seq_len_);
  return batch;
}

QGroupBox* SetupView::memory_group() const {
  auto* mem = new QGroupBox(tr("Schedule, memory and precision"));
  auto* mem_form = new QFormLayout(mem);
  mem_form->addRow(tr("Schedule"), schedule_);
  mem_form->addRow(tr("ZeRO"), zero_);
  mem_form->addRow(tr("Recompute"), recompute_);
  mem_form->addRow(tr("Precision"), precision_);
  for (QCheckBox* c : {flash_, overlap_grad_, overlap_tp_, overlap_ep_, offload_, offload_params_,
                       offload_activations_, offload_embeddings_, fusion_, graphs_})
    mem_form->addRow(QString(), c);
  return mem;
}

void SetupView::lay_out() {
  QGroupBox* job = job_group();
  QGroupBox* batch = batch_group();
  QGroupBox* par = parallelism_group();
  QGroupBox* mem = memory_group();
  status_ = new QLabel;
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  status_->setMinimumHeight(48);
  status_->setAlignment(Qt::AlignLeft | Qt::AlignTop);
  simulate_ = new QPushButton(tr("Simulate step and show timeline"));
  simulate_->setToolTip(
      tr("run the discrete-event simulator on this plan and open its trace in the Timeline view"));

  auto* grid = new QGridLayout;
  grid->addWidget(job, 0, 0);
  grid->addWidget(batch, 1, 0);
  grid->addWidget(par, 0, 1, 2, 1);
  grid->addWidget(mem, 0, 2, 2, 1);
  grid->setColumnStretch(0, 3);
  grid->setColumnStretch(1, 2);
  grid->setColumnStretch(2, 3);
  plan_file_ = new QPushButton(tr("Load plan file..."));
  plan_file_->setToolTip(tr("fill the plan's fields from a plan JSON (as predict --plan takes)"));
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(plan_file_);
  buttons->addStretch();
  buttons->addWidget(simulate_);
  auto* top = new QVBoxLayout(this);
  top->addLayout(grid);
  top->addWidget(status_);
  top->addLayout(buttons);
  top->addStretch();
}

void SetupView::connect_signals() {
  for (QComboBox* c : {model_, cluster_, schedule_, zero_, recompute_, precision_})
    connect(c, &QComboBox::currentIndexChanged, this, &SetupView::changed);
  for (QSpinBox* s : {tp_, pp_, dp_, cp_, ep_, virtual_stages_, micro_batch_, global_batch_, seq_len_})
    connect(s, &QSpinBox::valueChanged, this, &SetupView::changed);
  for (QCheckBox* c : {sp_, flash_, overlap_grad_, overlap_tp_, overlap_ep_, offload_, offload_params_,
                       offload_activations_, offload_embeddings_, fusion_, graphs_})
    connect(c, &QCheckBox::toggled, this, &SetupView::changed);
  connect(simulate_, &QPushButton::clicked, this, &SetupView::simulate_requested);
  auto ask = [this](const QString& title, const QString& filter,
                    Status (SetupView::*open)(const std::string&)) {
    const QString path = QFileDialog::getOpenFileName(this, title, QString(), filter);
    if (!path.isEmpty()) (void)(this->*open)(path.toStdString());
  };
  connect(model_file_, &QPushButton::clicked, this, [ask, this] {
    ask(tr("Open a model"), tr("Model JSON or config.json (*.json)"), &SetupView::open_model_file);
  });
  connect(cluster_file_, &QPushButton::clicked, this, [ask, this] {
    ask(tr("Open a cluster"), tr("Cluster JSON (*.json)"), &SetupView::open_cluster_file);
  });
  connect(plan_file_, &QPushButton::clicked, this,
          [ask, this] { ask(tr("Load a plan"), tr("Plan JSON (*.json)"), &SetupView::open_plan_file); });
}

void SetupView::show_error(const std::string& message) {
  status_->setStyleSheet(QStringLiteral("color: #c62828;"));
  status_->setText(qstr(message));
}

Status SetupView::open_spec_file(PresetListModel* list, QComboBox* box, const std::string& path) {
  auto row = list->add_file(path);
  if (!row) {
    show_error(row.error().message());
    return row.error();
  }
  box->setCurrentIndex(*row);  // emits the change
  return Status::Ok();
}

Status SetupView::open_model_file(const std::string& path) { return open_spec_file(models_, model_, path); }
Status SetupView::open_cluster_file(const std::string& path) {
  return open_spec_file(clusters_, cluster_, path);
}

Status SetupView::open_plan_file(const std::string& path) {
  auto plan = load_plan_file(path);
  if (!plan) {
    show_error(plan.error().message());
    return plan.error();
  }
  PlanInputs in = inputs();
  in.plan = *plan;
  set_inputs(in);
  return Status::Ok();
}

PlanInputs SetupView::inputs() const {
  PlanInputs in;
  const int m = model_->currentIndex(), c = cluster_->currentIndex();
  in.model = m >= 0 ? models_->name(m) : std::string();
  in.cluster = c >= 0 ? clusters_->name(c) : std::string();
  Plan& p = in.plan;
  p = base_plan_;
  p.tp = tp_->value();
  p.pp = pp_->value();
  p.dp = dp_->value();
  p.cp = cp_->value();
  p.ep = ep_->value();
  p.virtual_stages = virtual_stages_->value();
  p.sequence_parallel = sp_->isChecked();
  p.micro_batch = micro_batch_->value();
  p.global_batch = global_batch_->value();
  p.seq_len = seq_len_->value();
  p.schedule = enum_of<Schedule>(schedule_);
  p.zero_stage = zero_->currentData().toInt();
  p.recompute = enum_of<Recompute>(recompute_);
  // A plan file's recompute modules (no widget of their own) go with selective recompute only:
  // choosing another recompute here drops them rather than leave an invalid pair.
  if (p.recompute != Recompute::kSelective) p.recompute_modules.clear();
  p.precision = enum_of<Precision>(precision_);
  p.flash_attention = flash_->isChecked();
  p.overlap_grad_reduce = overlap_grad_->isChecked();
  p.overlap_tp_comm = overlap_tp_->isChecked();
  p.overlap_ep_comm = overlap_ep_->isChecked();
  p.offload_optimizer = offload_->isChecked();
  p.offload_params = offload_params_->isChecked();
  p.offload_activations = offload_activations_->isChecked();
  p.offload_embeddings = offload_embeddings_->isChecked();
  p.kernel_fusion = fusion_->isChecked();
  p.cuda_graphs = graphs_->isChecked();
  return in;
}

void SetupView::set_inputs(const PlanInputs& in) {
  filling_ = true;
  // A name that is no preset is a file (a session's, or one opened before): list it first.
  if (models_->row_of(in.model) < 0 && !in.model.empty()) (void)models_->add_file(in.model);
  if (clusters_->row_of(in.cluster) < 0 && !in.cluster.empty()) (void)clusters_->add_file(in.cluster);
  if (int r = models_->row_of(in.model); r >= 0) model_->setCurrentIndex(r);
  if (int r = clusters_->row_of(in.cluster); r >= 0) cluster_->setCurrentIndex(r);
  const Plan& p = in.plan;
  base_plan_ = p;
  tp_->setValue(p.tp);
  pp_->setValue(p.pp);
  dp_->setValue(p.dp);
  cp_->setValue(p.cp);
  ep_->setValue(p.ep);
  virtual_stages_->setValue(p.virtual_stages);
  sp_->setChecked(p.sequence_parallel);
  micro_batch_->setValue(p.micro_batch);
  global_batch_->setValue(static_cast<int>(std::min<std::int64_t>(p.global_batch, global_batch_->maximum())));
  seq_len_->setValue(p.seq_len);
  select_enum(schedule_, p.schedule);
  zero_->setCurrentIndex(std::clamp(p.zero_stage, 0, 3));
  select_enum(recompute_, p.recompute);
  select_enum(precision_, p.precision);
  flash_->setChecked(p.flash_attention);
  overlap_grad_->setChecked(p.overlap_grad_reduce);
  overlap_tp_->setChecked(p.overlap_tp_comm);
  overlap_ep_->setChecked(p.overlap_ep_comm);
  offload_->setChecked(p.offload_optimizer);
  offload_params_->setChecked(p.offload_params);
  offload_activations_->setChecked(p.offload_activations);
  offload_embeddings_->setChecked(p.offload_embeddings);
  fusion_->setChecked(p.kernel_fusion);
  graphs_->setChecked(p.cuda_graphs);
  filling_ = false;
  changed();
}

void SetupView::changed() {
  if (filling_) return;
  const PlanInputs in = inputs();
  const long long gpus = 1LL * in.plan.tp * in.plan.pp * in.plan.dp * in.plan.cp;
  gpus_->setText(tr("%1 (tp x pp x dp x cp)").arg(gpus));
  model_summary_->setText(model_->currentData(Qt::ToolTipRole).toString());
  cluster_summary_->setText(cluster_->currentData(Qt::ToolTipRole).toString());
  Q_EMIT inputs_changed(in);
}

void SetupView::show_evaluation(const Evaluation& e) {
  simulate_->setEnabled(e.ok());
  if (!e.ok()) {
    status_->setStyleSheet(QStringLiteral("color: #c62828;"));
    status_->setText(qstr(e.error));
    return;
  }
  const Prediction& p = e.prediction;
  status_->setStyleSheet(QStringLiteral("color: #1b7f3b;"));
  status_->setText(
      tr("Valid plan on %1 x %2 (%3 node%4): step %5, %6 tokens/s, MFU %7, memory %8 of %9 per device.")
          .arg(p.devices)
          .arg(qstr(e.cluster.node.accelerator().name))
          .arg(e.cluster.nodes)
          .arg(e.cluster.nodes == 1 ? QString() : QStringLiteral("s"))
          .arg(seconds_text(p.step_time_s))
          .arg(QString::number(p.tokens_per_s, 'f', 0))
          .arg(percent_text(p.mfu))
          .arg(bytes_text(p.memory.total))
          .arg(bytes_text(p.memory.capacity)));
}

QString SetupView::status_text() const { return status_->text(); }

}  // namespace foresight::gui
