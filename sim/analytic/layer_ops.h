// The kernels of one transformer layer for one micro-batch on one device, in execution order, with
// their FLOPs, bytes, GEMM shapes and modelled time. Both executors start from this list: the
// analytic model sums it, the workload lowering turns each entry into an op of the graph (and the
// runtime will run the same kernels), so predicted and measured traces line up kernel by kernel.
//
//   LayerKernels k = layer_kernels(model, device, plan, shape, /*moe=*/false);
//   for (int i = 0; i < k.count; ++i) total += k.fwd[i].seconds;
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <string_view>

#include "sim/analytic/layer_cost.h"
#include "sim/spec/hardware.h"
#include "sim/spec/plan.h"

namespace foresight {

enum class KernelClass : std::uint8_t { kGemm, kAttention, kElementwise };

enum class KernelName : std::uint8_t {
  kNorm1,
  kQkv,
  kAttention,
  kScores,
  kSoftmax,
  kAttnV,
  kProj,
  kResidual1,
  kNorm2,
  kRouter,
  kPermute,
  kMlpUp,
  kActivation,
  kMlpDown,
  kUnpermute,
  kResidual2,
  kCount
};
std::string_view kernel_name(KernelName k);

// Where a layer's tensor-parallel collective sits: after kernel `after` (forward order).
enum class TpCollective : std::uint8_t { kAllReduce, kAllGather, kReduceScatter };

// How a TP collective runs beside its GEMM under Plan::overlap_tp_comm (Megatron's
// --tp-comm-overlap: Transformer Engine's userbuffers, which need sequence parallelism; PyTorch's
// async TP is priced the same). TE's defaults (transformer_engine/pytorch/module/base.py,
// initialize_ub):
//  - kRing: the all-gathers before the QKV and MLP-up GEMMs (qkv_fprop, fc1_fprop) and the
//    backward's all-gathers of the output gradient before the projection and MLP-down data
//    gradients (proj_dgrad, fc2_dgrad) exchange chunks peer to peer on copy engines while the GEMM
//    computes the chunks already there: the pair takes max(GEMM, collective).
//  - kPipeline: the reduce-scatters after the projection and MLP-down GEMMs (proj_fprop, fc2_fprop)
//    split the GEMM in 4 and reduce-scatter each part while the next computes; the last part's
//    reduce-scatter is exposed, and the communication kernels' 16 SMs are taken from the GEMM
//    (set_sm_margin), which runs that much slower.
//  - kBulk: the backward's reduce-scatter of the QKV and MLP-up input gradients runs beside the
//    same GEMMs' weight gradient (qkv_wgrad, fc1_wgrad), on 16 SMs taken from it. Without
//    userbuffers, Plan::overlap_tp_dgrad times NCCL's all-reduce or reduce-scatter of the same
//    gradients the same way, the GEMM on all its SMs.
// MoE layers' expert GEMMs (grouped, outside TE's overlapped linears) are not overlapped.
enum class TpOverlap : std::uint8_t { kNone, kRing, kPipeline, kBulk };
inline constexpr int kTpPipelineSplits = 4;  // TE's num_splits for the pipeline method
inline constexpr double kTpOverlapSms = 16;  // TE's num_sm for the pipeline and bulk methods
// The share of a pipelined reduce-scatter's bytes that runs beside its GEMM (the rest after it).
inline constexpr double kTpPipelineHead = (kTpPipelineSplits - 1.0) / kTpPipelineSplits;
// The exposed seconds of an overlapped TP collective beside a GEMM of `gemm_s` (as priced: the SMs
// it lost included): kNone all of `comm_s`; kRing and kBulk what outlasts the GEMM; kPipeline what
// the first 3/4 of the bytes (`comm_s`) take beyond the GEMM, then the last quarter (`tail_s`).
inline double tp_overlap_exposed(TpOverlap o, double gemm_s, double comm_s, double tail_s = 0) {
  if (o == TpOverlap::kNone) return comm_s;
  const double beyond = comm_s > gemm_s ? comm_s - gemm_s : 0.0;
  return o == TpOverlap::kPipeline ? beyond + tail_s : beyond;
}

struct KernelCost {
  KernelName name = KernelName::kNorm1;
  KernelClass cls = KernelClass::kElementwise;
  double flops = 0;                  // forward FLOPs on this device
  double bytes = 0;                  // forward bytes moved (elementwise) or operands (GEMM, informational)
  double fwd_s = 0;                  // modelled forward time, launch included
  double bwd_s = 0;                  // modelled backward time (data + weight gradients)
  double bwd_weight_s = 0;           // the weight-gradient part of bwd_s (zero-bubble schedules split it off)
  std::int64_t m = 0, n = 0, k = 0;  // GEMM shape (tokens x out x in), 0 for non-GEMMs
  bool on_partner = false;           // runs on the partner device (Plan::attention_device)
  // The host's time to issue the op's kernels (and the framework's bookkeeping around them),
  // forward and backward: DeviceSpec::host_op_s per operation. issue_from_host adds to fwd_s and
  // bwd_s the time the device waits for it.
  double host_fwd_s = 0, host_bwd_s = 0;
  // The part of fwd_s and bwd_s the device spends waiting for the host (issue_from_host).
  double host_wait_fwd_s = 0, host_wait_bwd_s = 0;
};

// The device a layer's attention core may run on instead (Plan::attention_device), and the rate
// of the path between the two (bytes/s each way).
struct Partner {
  const DeviceSpec* device = nullptr;
  double link_rate = 0;
  bool automatic = false;  // "auto": only where it is faster, transfers included
};

// A norm's passes over its tensor (in units of `element_bytes`, the activations' width) and its
// kernels, forward (backward: twice both): 2 and 1 fused, and for LayerNorm either way (PyTorch's
// is one kernel); Llama's eager RMSNorm, which runs in fp32 (the chain is spelled out in
// norm_passes): 18 and 8 for 16-bit activations, 7 and 6 for fp32 ones. Every norm of the model,
// the final one too.
struct NormPasses {
  double passes;
  int kernels;
};
NormPasses norm_passes(const ModelSpec& m, const Plan& p, double element_bytes);

// The last stage's head per micro-batch: final norm, LM head GEMM and cross-entropy. Under TP the
// vocabulary is split (Megatron's vocabulary-parallel cross-entropy): each rank computes its
// slice's row maximum, sum of exponentials and target logit, the ranks all-gather these three
// statistics per token (one collective, where Megatron all-reduces three times), and a second pass
// scales the logits' gradient by the global sum. The head's input gradient is then summed over the
// group (an all-reduce, or with SP a reduce-scatter), and with SP the normed hidden states are
// all-gathered before the GEMM. Both engines and the runtime use this list.
struct HeadCosts {
  double norm_fwd_s = 0, norm_bwd_s = 0, norm_bytes = 0;  // final norm (on 1/tp of the tokens with SP)
  double fwd_s = 0, bwd_s = 0;                            // GEMM + cross-entropy, forward and backward
  double fwd_flops = 0, fwd_bytes = 0, bwd_bytes = 0;
  double grad_s = 0, grad_bytes = 0;  // tp > 1: the second pass over the logits' gradient
  double stats_bytes = 0;             // tp > 1: the gathered per-token statistics (all ranks)
  double hidden_bytes = 0;            // tp > 1: b*s*h, the SP gather and the input-gradient reduction
  bool tp = false, sp = false;
};
HeadCosts head_costs(const ModelSpec& m, const DeviceSpec& d, const Plan& p, const LayerShape& s);

struct LayerKernels {
  static constexpr int kMax = 16;
  std::array<KernelCost, kMax> fwd{};
  int count = 0;
  // Tensor-parallel collectives (forward): positions and kinds; backward mirrors them.
  std::array<int, 4> tp_after{};
  std::array<TpCollective, 4> tp_kind{};
  int tp_count = 0;
  // Their backward counterparts (Megatron's conjugate operators): before kernel i's backward runs
  // the collective registered "after i". Without SP the all-reduce of the input gradient follows
  // the column-parallel GEMM's backward (position: the norm before it); with SP each all-gather
  // becomes a reduce-scatter and each reduce-scatter an all-gather, at the same positions.
  std::array<int, 4> tp_bwd_after{};
  std::array<TpCollective, 4> tp_bwd_kind{};
  int tp_bwd_count = 0;
  // Plan::overlap_tp_comm: how each collective overlaps (TpOverlap) and the GEMM kernel it pairs
  // with. Forward: the next GEMM for an all-gather, the GEMM before for a reduce-scatter. Backward:
  // the projection's or MLP-down's data gradient for an all-gather, the QKV's or MLP-up's weight
  // gradient for a reduce-scatter (both engines start it with that GEMM's backward). The GEMMs
  // that give up SMs (kPipeline, kBulk) are priced slower in `fwd` already.
  std::array<TpOverlap, 4> tp_overlap{}, tp_bwd_overlap{};
  std::array<int, 4> tp_gemm{}, tp_bwd_gemm{};
  // Bytes of each collective, forward and backward (the full b*s*h activation, gathered or
  // reduced). In fp8 plans an all-gather that feeds an FP8 GEMM moves the FP8 tensor, one byte an
  // element: Transformer Engine casts the norm's output to FP8 before the sequence-parallel gather
  // and the output gradient before the backward's, and torchao's Float8ColwiseParallel,
  // PrepareFloat8ModuleInput and Float8RowwiseParallel do the same; reduce-scatters and
  // all-reduces sum 16-bit GEMM outputs. The MoE block's gathers feed the router, in 16 bits.
  std::array<double, 4> tp_fwd_bytes{}, tp_bwd_bytes{};
  int attention_first = 0, attention_last = 0;  // the attention core's kernel range (selective recompute)
  int moe_dispatch_after = -1;                  // EP all-to-all positions (MoE layers with ep > 1)
  int moe_combine_after = -1;
  double ep_bytes = 0;  // bytes each rank sends in one all-to-all
  // A dropless MoE layer's forward waits on the host after kernel `host_sync_at` (-1: never): the
  // token counts per expert come back to the host before the all-to-all (its split sizes) or the
  // per-expert GEMMs (their row counts) can be issued (Megatron-Core's MoEAlltoAllTokenDispatcher
  // synchronises at "before_ep_alltoall", or "before_finish" without expert parallelism).
  int host_sync_at = -1;
  // Attention on the partner device: the transfers around it (Q, K, V there and the output back;
  // backward: the output gradient there, Q/K/V gradients back), seconds each.
  bool attention_on_partner = false;
  DeviceKind partner_kind = DeviceKind::kNpu;
  double partner_in_s = 0, partner_out_s = 0, partner_grad_in_s = 0, partner_grad_out_s = 0;

  double fwd_seconds() const;
  double bwd_seconds() const;
  double bwd_weight_seconds() const;  // the weight-gradient part of bwd_seconds()
  double fwd_flops() const;
  // The share of kernel `i` (of its forward time, FLOPs and bytes) that runs again in the backward
  // when the layer recomputes the modules of `mask` (layer_cost.h): 1 for a whole kernel, 0 for
  // none, a fraction where the op policy re-runs one of the matmuls a kernel fuses (wk of the QKV
  // GEMM, w3 of SwiGLU's up GEMM). Both engines re-run exactly these, so they price recompute the
  // same.
  double rerun_share(RecomputeMask mask, int i) const;
  // The ratio of the kernels' K and V heads (the wk share of the QKV GEMM), set by layer_kernels.
  double k_share_of_qkv = 0;
  bool gated_mlp = false;  // the up GEMM fuses two matmuls (SwiGLU's w1 and w3)
  bool moe_layer = false;  // an MoE layer (recompute module moe_act)
  // Full recompute re-runs kernels [0, full_rerun_end) and the collectives after them: all of
  // them, or with Plan::recompute_early_stop the kernels up to the dense MLP's activation.
  int full_rerun_end = std::numeric_limits<int>::max();
  // Multi-head latent attention: the up-projections' share of the QKV GEMM's FLOPs (recompute
  // module mla_up_proj re-runs them).
  double mla_up_share_of_qkv = 0;
  // The forward seconds and FLOPs of the kernels `mask` re-runs (with the transfers to the partner
  // device when the attention core runs there). Full recompute: the whole forward.
  double recompute_seconds(RecomputeMask mask) const;
  double recompute_flops(RecomputeMask mask) const;
};

// Context parallelism: one rank's K and V of a layer for one micro-batch (its sequence shard, its
// TP share of the KV heads), the unit both engines exchange.
inline double cp_kv_bytes(const ModelSpec& m, const LayerShape& s) {
  return s.batch * s.seq * 2.0 * attention_kv_dim(m, s) * s.bytes_per_element / s.tp;
}

LayerKernels layer_kernels(const ModelSpec& m, const DeviceSpec& d, const Plan& p, const LayerShape& s,
                           bool moe_layer, const Partner& partner = {});
// The device's waits for the host, added to the kernels' times (both engines price the kernels
// after this). The host issues each op in order (KernelCost::host_fwd_s, host_bwd_s) and the
// device runs an op once it is issued and the op before it is done. Without a synchronisation
// the host runs ahead across layers, so a pass waits only where its host time exceeds its device
// time (the excess spread over the ops by their host time). A dropless MoE layer's forward
// (LayerKernels::host_sync_at) starts each layer's issue from an idle host and device: the ops
// after the synchronisation, through the next layer's up to it, run as issued, the host's lead
// lost. `a2a_s`: one expert all-to-all's seconds (0 without expert parallelism), which the device
// runs while the host issues the next ops.
void issue_from_host(LayerKernels& k, double a2a_s);
// The partner device of Plan::attention_device on this node (none when unset or not found).
Partner attention_partner(const Plan& p, const NodeSpec& node);

// The compute datatype a plan's GEMMs run in on a device, and the peak used for MFU.
DType compute_dtype(Precision p, const DeviceSpec& d);
double mfu_peak(Precision p, const DeviceSpec& d);

}  // namespace foresight
