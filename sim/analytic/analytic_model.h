// The analytic (closed-form) performance model: one training step of a plan, in microseconds of
// CPU time, for search and sweeps. The discrete-event simulator refines it; both return a
// Prediction.
//
//   AnalyticModel am(model, cluster);
//   Prediction p = am.evaluate(plan);          // plan already checked by validate_plan
//   Result<Prediction> q = predict(model, cluster, plan, "plan.json");   // checks, then evaluates
//
// Compute: per-op roofline with the device's fitted efficiencies; communication: alpha-beta per
// collective on the links the group actually uses (collective.h); pipeline: the schedule's
// closed-form bubble; memory: weights/gradients/optimizer by ZeRO stage and activations by
// Korthikanti et al. (layer_cost.h).
#pragma once

#include "sim/analytic/collective.h"
#include "sim/analytic/layer_cost.h"
#include "sim/analytic/layer_ops.h"
#include "sim/analytic/prediction.h"
#include "sim/analytic/recompute.h"
#include "sim/core/status.h"
#include "sim/spec/hardware.h"
#include "sim/spec/model.h"
#include "sim/spec/plan.h"

namespace foresight {

class AnalyticModel {
 public:
  AnalyticModel(const ModelSpec& model, const ClusterSpec& cluster);
  Prediction evaluate(const Plan& plan) const;
  // Memory only (cheap): used to prune plans before timing them. (Recompute::kOptimal plans
  // solve recompute_assignment first: a few milliseconds.)
  MemoryBreakdown memory(const Plan& plan) const;
  // Pipeline stage `stage`'s memory; `layer_masks` (by layer index, as recompute_assignment
  // gives them) overrides what each layer keeps.
  MemoryBreakdown stage_memory(const Plan& plan, int stage,
                               const std::vector<RecomputeMask>* layer_masks = nullptr) const;
  // Every pipeline stage's memory, stage by stage, as memory() weighs them (each stage at its own
  // degrees under Plan::stage_tp, and with its layers' recompute under Recompute::kOptimal).
  std::vector<MemoryBreakdown> stage_memories(const Plan& plan) const;
  // What each layer recomputes under the plan (recompute.h): for Recompute::kOptimal, per stage
  // the module sets that fit the stage's device at the least recompute time.
  RecomputeAssignment recompute_assignment(const Plan& plan) const;

  // Layers per pipeline stage so that stages on faster accelerators get more: proportional to
  // each stage's per-layer throughput (its accelerator's layer time under this plan), rounded by
  // largest remainder, at least one layer each. Embedding and head are not counted.
  std::vector<int> balanced_layer_split(const Plan& plan) const;
  // The accelerator pipeline stage `stage` runs on (Plan::stage_devices, else the node's first).
  const DeviceSpec& stage_device(const Plan& plan, int stage) const;
  // Peak FLOP/s per device for MFU, averaged over the plan's ranks.
  double mean_peak(const Plan& plan) const;

  const ModelSpec& model() const { return model_; }
  const ClusterSpec& cluster() const { return cluster_; }

 private:
  MemoryBreakdown memory_with(const Plan& plan, const std::vector<RecomputeMask>* layer_masks) const;

  ModelSpec model_;
  ClusterSpec cluster_;
  DeviceSpec device_;
  bool per_plan_ = false;  // evaluate() resolves the device's rates per plan (cluster_for_plan)
};

// The cluster as `plan` sees it: a device with cache levels (DeviceSpec::caches) runs its GEMMs and
// streaming kernels at the rates of the smallest level that holds the step's working set per
// device (weights, gradients, activations, buffers), blended toward the next level's where the
// working set passes the span the level was measured over (CacheLevel::span), else at its memory
// rates; its optimizer reads the state from the smallest level that holds the whole state (the
// memory breakdown without the runtime's reserve; a level with AdamW's own rate first), else from
// memory. Where the node's devices share their memory (DeviceSpec::shared_memory) and the plan
// runs k of them at once (its device count, at most the node's), fewer than the shared_by the
// memory rates were measured with, those rates are first blended toward the device's alone rates,
// as times per unit of work, (shared_by - k) / (shared_by - 1) of the way (all of it for one
// device); from shared_by on, the shared rates stand (no extrapolation past what was measured).
// Either way the result has no cache level and no shared-memory rates left. Clusters without
// either come back unchanged. Both engines price kernels on this view.
ClusterSpec cluster_for_plan(const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan);
// What cluster_for_plan chose for the cluster's accelerator, in words ("working set 25.9 MiB per
// device: the 32.0 MiB cache level's rates; whole state 45.0 MiB: the optimizer from memory");
// empty without cache levels. It also says how far the memory rates were taken toward a device's
// alone rates (DeviceSpec::shared_memory).
std::string cache_levels_taken(const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan);
// Whether a device of the cluster has rates that depend on the plan (cache levels, shared memory).
bool has_per_plan_rates(const ClusterSpec& cluster);

// Validates the plan (errors name `plan_file` and the field) and evaluates it. A plan that does
// not fit in memory is an error that says by how much and in which category.
Result<Prediction> predict(const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan,
                           const std::string& plan_file);
// The checks predict() makes on an evaluated plan: fp8 on a device without it, non-finite
// figures, and the memory fit. For callers that keep the prediction of a plan that fails them
// (the GUI draws how much a plan overflows) without evaluating it twice.
Status check_prediction(const Prediction& p, const ClusterSpec& cluster, const Plan& plan,
                        const std::string& plan_file);

// Adam(W) step traffic per parameter: read fp32 grad, master, m, v; write master, m, v and the
// low-precision weight; plus reading the gradient once more for the global norm.
inline constexpr double kAdamBytesPerParam = 4 * 4 + 3 * 4 + 2 + 4;
// The same with the plan's optimizer state type (Plan::optimizer_state_precision): bf16 state
// reads and writes master, m and v at 2 bytes each, and the gradient at its buffer's type.
inline double adam_bytes_per_param(const Plan& p) {
  return p.optimizer_state_precision == Precision::kBf16 ? 2 * 4 + 3 * 2 + 2 + 2 : kAdamBytesPerParam;
}

// Whether the plan's gradient reduction at the step reads gradients the caches no longer hold
// (LinkSpec::cold_bandwidth): written over the whole backward, unless buckets were reduced during
// it (overlap_grad_reduce; what is left for the step is the embedding's, the backward's last). The
// simulator marks those ops Op::cold; the analytic model reduces over the cold link.
inline bool cold_step_reduction(const Plan& p) { return !p.overlap_grad_reduce; }

// Offload rates: host memory bandwidth available per accelerator for the host optimizer (the
// node's CPUs shared by its accelerators; the host link if the node lists no CPU), and the
// accelerator<->host copy rate.
double host_optimizer_rate(const NodeSpec& node);
double host_link_rate(const NodeSpec& node);

// Micro-batches whose activations pipeline stage `stage` holds at once under the plan's schedule.
double activations_in_flight(const Plan& p, int stage);
// What one device sees of a layer under a plan: micro-batch, sequence split by CP, TP degree, SP.
LayerShape plan_layer_shape(const ModelSpec& m, const Plan& p);
// The expert-parallel group's link (consecutive data-parallel ranks, or with MoE parallel folding
// consecutive ranks of the stage).
GroupLink expert_group_link(const ClusterSpec& cluster, const Plan& p);
// layer_kernels with the device's waits for the host added (issue_from_host, the expert
// all-to-all priced on the plan's expert group): the kernels both engines time.
LayerKernels issued_layer_kernels(const ModelSpec& m, const ClusterSpec& cluster, const DeviceSpec& d,
                                  const Plan& p, const LayerShape& s, bool moe, const Partner& partner);
// The embedding's output per micro-batch, kept on the first stage for the backward.
double embedding_output_bytes(const ModelSpec& m, const Plan& p, const LayerShape& s);

// Bytes per element of weights/activations, and of gradients as reduced, for a precision.
double weight_bytes(Precision p);
double grad_bytes(Precision p);
// Bytes per gradient element of the plan's gradient buffer and reduction (grad_reduce_precision).
double grad_bytes(const Plan& p);

// Plan::fsdp_copies under ZeRO-3: the compute stream's copies for one layer and micro-batch, of
// `params` parameters on this device. The forward copies the gathered weights out of the
// all-gather buffer (read and write them, one kernel); the backward does so again for its own
// gather, then copies the gradients into the reduce-scatter input (read in the weights' type,
// written in the reduction's, one kernel). Zero where the plan has no such copies.
struct FsdpCopies {
  double fwd_s = 0;  // the copy-out
  double bwd_s = 0;  // the copy-out and the gradients' copy
  double copy_out_s = 0, chunk_cat_s = 0;
  double copy_out_bytes = 0, chunk_cat_bytes = 0;
};
FsdpCopies fsdp_copies(const DeviceSpec& d, const Plan& p, double params);

// FP8 delayed scaling (an fp8 plan with Plan::fp8_recipe kDelayed, Transformer Engine's
// DelayedScaling): when a model chunk's forward leaves its fp8_autocast, and when the chunk's
// backward is done, the amaxes of its FP8 tensors are all-reduced (MAX) over the amax group --
// every rank of the pipeline stage, tp x cp x dp (Megatron-Core's get_amax_reduction_group) --
// synchronously on the compute stream (transformer_engine/pytorch fp8.py / quantization.py,
// reduce_and_update_fp8_tensors). The bytes of one such all-reduce for a chunk of `layers`
// layers: 4 per amax, three FP8 tensors per GEMM forward (input, weight, output) and two backward,
// a layer's GEMMs four (QKV, projection, MLP up and down) or with experts the attention's two and
// two per expert on the rank. 0 where the plan has none.
double fp8_amax_bytes(const ModelSpec& m, const Plan& p, int layers, bool forward);

}  // namespace foresight
