// The per-layer kernel list and its roofline times.
#include "sim/analytic/layer_ops.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "sim/analytic/analytic_model.h"

namespace foresight {

std::string_view kernel_name(KernelName k) {
  static constexpr std::string_view kNames[] = {
      "norm1", "qkv",    "attention", "scores", "softmax",    "attn_v",   "proj",      "residual1",
      "norm2", "router", "permute",   "mlp_up", "activation", "mlp_down", "unpermute", "residual2"};
  return kNames[static_cast<int>(k)];
}

DType compute_dtype(Precision p, const DeviceSpec& d) {
  switch (p) {
    case Precision::kFp32:
      return d.peak(DType::kTf32) > 0 ? DType::kTf32 : DType::kFp32;
    case Precision::kBf16:
      return d.peak(DType::kBf16) > 0 ? DType::kBf16 : DType::kFp16;
    case Precision::kFp16:
      return d.peak(DType::kFp16) > 0 ? DType::kFp16 : DType::kBf16;
    case Precision::kFp8:
      return d.peak(DType::kFp8) > 0 ? DType::kFp8 : DType::kBf16;
  }
  return DType::kBf16;
}

double mfu_peak(Precision p, const DeviceSpec& d) {
  if (p == Precision::kFp32) return d.peak(DType::kFp32);
  return d.peak(DType::kBf16) > 0 ? d.peak(DType::kBf16) : d.peak(DType::kFp16);
}

double LayerKernels::fwd_seconds() const {
  double t = partner_in_s + partner_out_s;
  for (int i = 0; i < count; ++i) t += fwd[i].fwd_s;
  return t;
}
double LayerKernels::bwd_seconds() const {
  double t = partner_grad_in_s + partner_grad_out_s;
  for (int i = 0; i < count; ++i) t += fwd[i].bwd_s;
  return t;
}
double LayerKernels::bwd_weight_seconds() const {
  double t = 0;
  for (int i = 0; i < count; ++i) t += fwd[i].bwd_weight_s;
  return t;
}
double LayerKernels::rerun_share(RecomputeMask mask, int i) const {
  namespace rm = recompute_module;
  if (mask & rm::kFull) return i < full_rerun_end ? 1 : 0;
  if (mask & rm::kOpPolicy) {
    // Every second matmul of the block (wk, wo, w3) and every elementwise op; the attention
    // kernel is saved (flash), the unfused chain's batched matmuls and softmax are not.
    switch (fwd[i].name) {
      case KernelName::kQkv:
        return k_share_of_qkv;
      case KernelName::kProj:
        return 1;
      case KernelName::kMlpUp:
        return gated_mlp ? 0.5 : 0.0;
      case KernelName::kAttention:
      case KernelName::kRouter:
      case KernelName::kMlpDown:
        return 0;
      default:
        return 1;  // norms, scores/softmax/attn_v, residuals, activation, permutes
    }
  }
  switch (fwd[i].name) {
    case KernelName::kNorm1:
    case KernelName::kNorm2:
      return (mask & rm::kLayernorm) != 0 ? 1 : 0;
    case KernelName::kQkv:
      return (mask & rm::kMlaUpProj) != 0 ? mla_up_share_of_qkv : 0;
    case KernelName::kActivation:
      return (mask & (rm::kAct | rm::kMlp)) != 0 || (moe_layer && (mask & rm::kMoeAct) != 0) ? 1 : 0;
    case KernelName::kMlpUp:
      return (mask & rm::kMlp) != 0 ? 1 : 0;
    case KernelName::kScores:
    case KernelName::kSoftmax:
    case KernelName::kAttnV:
      return (mask & rm::kCoreAttn) != 0 ? 1 : 0;  // unfused attention only
    default:
      return 0;
  }
}

double LayerKernels::recompute_seconds(RecomputeMask mask) const {
  if (mask == 0) return 0;
  if ((mask & recompute_module::kFull) && full_rerun_end >= count) return fwd_seconds();
  double t = 0;
  for (int i = 0; i < count; ++i) t += rerun_share(mask, i) * fwd[i].fwd_s;
  const bool core = attention_first < count && rerun_share(mask, attention_first) > 0;
  if (core) t += partner_in_s + partner_out_s;  // the partner re-runs it: Q, K, V go there again
  return t;
}

double LayerKernels::recompute_flops(RecomputeMask mask) const {
  if (mask == 0) return 0;
  if ((mask & recompute_module::kFull) && full_rerun_end >= count) return fwd_flops();
  double f = 0;
  for (int i = 0; i < count; ++i) f += rerun_share(mask, i) * fwd[i].flops;
  return f;
}

Partner attention_partner(const Plan& p, const NodeSpec& node) {
  Partner out;
  if (p.attention_device.empty()) return out;
  const int main = stage_group(p, node, 0);
  int g = -1;
  if (p.attention_device == "auto") {
    for (std::size_t i = 0; i < node.devices.size() && g < 0; ++i)
      if (static_cast<int>(i) != main && node.devices[i].device.kind != DeviceKind::kCpu)
        g = static_cast<int>(i);
    out.automatic = true;
  } else {
    g = node.accelerator_group(p.attention_device);
  }
  if (g < 0 || g == main) return out;
  out.device = &node.devices[g].device;
  // Between two accelerators of different kinds: through the host's PCIe (peer to peer, or
  // staged in host memory), at the host link's rate each way (host memory's without a link).
  out.link_rate = host_link_rate(node);
  return out;
}
double LayerKernels::fwd_flops() const {
  double f = 0;
  for (int i = 0; i < count; ++i) f += fwd[i].flops;
  return f;
}

NormPasses norm_passes(const ModelSpec& m, const Plan& p, double element_bytes) {
  if (m.norm != NormKind::kRmsNorm || p.kernel_fusion) return {2.0, 1};
  // Llama's reference RMSNorm, as torchtitan runs it eager (torchtitan/models/norms.py RMSNorm):
  // _norm(x.float()).type_as(x) * weight, _norm(x) = x * rsqrt(x.pow(2).mean(-1) + eps). Bytes per
  // element: x.float() (read e, write 4), pow (read 4, write 4), mean (read 4), x * rsqrt (read 4,
  // write 4), type_as (read 4, write e), * weight (read e, write e); the cast and type_as are no-ops
  // on fp32 activations. Kernels: pow, mean, the add and the rsqrt on one value per row, the two
  // multiplies, and the two casts.
  const double e = element_bytes;
  const bool casts = e < 4;
  const double bytes = (casts ? 2 * (e + 4) : 0.0) + 8 + 4 + 8 + 2 * e;
  return {bytes / e, casts ? 8 : 6};
}

namespace {

// A FlashAttention-1-class kernel's rate against the FlashAttention-2-class one on the same device
// (AttentionKernel::kFlash1). FlashAttention-2 is "around 2x" faster than FlashAttention (Dao,
// FlashAttention-2, arXiv:2307.08691, abstract: 50-73% of the A100's peak forward against 25-40%),
// and the Triton port that llm-foundry's attn_impl "triton" runs is, forward and backward together,
// "slightly slower than" FlashAttention's CUDA kernels (flash_attn/flash_attn_triton.py, its
// docstring; llm-foundry's llmfoundry/models/layers/flash_attn_triton.py is that kernel). Half, the
// round end of that range. On the 2023 llm-foundry benchmark tables' long-sequence rows
// (docs/accuracy-changes.md, "2026-12-06, evening") the attention's rate implied by the measured step is
// 0.31-0.34 of peak on A100s (0.55 for FlashAttention-2) and 0.16-0.18 on H100s (0.33): about half.
constexpr double kFlash1OfFlash2 = 0.5;

// A GEMM problem as the library runs it: `groups` products of an m x n output over k.
struct GemmShape {
  double m = 0, n = 0, k = 0, groups = 1;
};

// A GEMM's three passes, each `flops` at `rate` scaled by its own shape's share
// (DeviceSpec::gemm_shape_efficiency) plus the device's set-up: forward an m x n output over k,
// the data gradient m x k over n, the weight gradient k x n over the m rows.
struct GemmPasses {
  double fwd = 0, data = 0, weight = 0;
};
GemmPasses gemm_passes(const DeviceSpec& d, double flops, double rate, const GemmShape& g, bool fp8 = false) {
  auto at = [&](double m, double n, double k) {
    return flops / (rate * d.gemm_shape_efficiency(m, n, k, g.groups, fp8)) + d.gemm_setup_s;
  };
  return {at(g.m, g.n, g.k), at(g.m, g.k, g.n), at(g.k, g.n, g.m)};
}

// Host operations beyond an op's kernels, forward and backward (DeviceSpec::host_op_s each).
struct OpCounts {
  double fwd = 0, bwd = 0;
};
constexpr OpCounts kRouterOps{10, 6};
constexpr OpCounts kDispatchOps{18, 4};      // with expert parallelism
constexpr OpCounts kLocalDispatchOps{5, 2};  // one rank holds every expert: counts and copies
constexpr OpCounts kCombineOps{1, 1};

// Builds layer_kernels' list: the device's rates and the layer's shape, the kernels appended in
// forward order with their tensor-parallel collectives.
class LayerKernelBuilder {
 public:
  LayerKernelBuilder(const ModelSpec& m, const DeviceSpec& d, const Plan& p, const LayerShape& s, bool moe)
      : m_(m),
        d_(d),
        p_(p),
        s_(s),
        moe_(moe),
        dt_(compute_dtype(p.precision, d)),
        gemm_rate_(d.peak(dt_) * (dt_ == DType::kFp8 ? d.fp8_gemm_efficiency() : d.gemm_efficiency)),
        gemm_rate16_(d.peak(compute_dtype(Precision::kBf16, d)) * d.gemm_efficiency),
        launch_(p.cuda_graphs ? d.graph_kernel_overhead_s : d.kernel_overhead_s),
        host_(p.cuda_graphs ? 0.0 : d.host_op_s),
        fused_(p.kernel_fusion),
        e_(s.bytes_per_element),
        tokens_(s.batch * s.seq),
        th_(tokens_ * m.hidden / (s.sp ? s.tp : 1.0)),
        tp_(s.tp),
        T_(static_cast<std::int64_t>(tokens_)),
        H_(static_cast<std::int64_t>(m.hidden)),
        f_(moe ? moe_layer_flops(m, s) : dense_layer_flops(m, s)),
        sp_(s.sp && p.tp > 1),
        folded_(moe && s.experts_folded),
        parallel_(m.parallel_block && !folded_),
        ub_(sp_ && p.overlap_tp_comm),
        async_dgrad_(async_tp_dgrad(p)),
        ub_stretch_(d.sm_count > kTpOverlapSms ? d.sm_count / (d.sm_count - kTpOverlapSms) : 1.0) {}

  LayerKernels build(const Partner& partner) {
    attention_block(partner);
    mlp_block();
    if (p_.tp <= 1) L_.tp_count = L_.tp_bwd_count = 0;
    pair_tp_overlap();
    const double q = static_cast<double>(m_.q_dim()), kv = static_cast<double>(m_.kv_dim());
    L_.k_share_of_qkv = kv / (q + 2 * kv);
    L_.gated_mlp = m_.mlp == MlpKind::kSwiglu;
    L_.moe_layer = moe_;
    // Plan::recompute_early_stop: the re-run ends with the last kernel whose output the backward
    // keeps, a dense MLP's activation (the down projection's input). An MoE layer's combine keeps
    // its experts' outputs for the router probabilities' gradient, so its re-run goes on through
    // the down projection and the combine, all but the residual: priced as the whole forward.
    if (p_.recompute_early_stop && !moe_)
      for (int i = 0; i < L_.count; ++i)
        if (L_.fwd[i].name == KernelName::kActivation) L_.full_rerun_end = i + 1;
    if (m_.mla.enabled()) {
      // q: down (hidden x q_lora_rank) then up (q_lora_rank x heads*(nope+rope)), or one direct
      // projection; kv: down (hidden x kv_lora_rank+rope) then up (kv_lora_rank x heads*(nope+v)).
      const double heads = m_.heads, nope = m_.mla.qk_nope_head_dim, rope = m_.mla.qk_rope_head_dim;
      const double h = static_cast<double>(m_.hidden), ql = m_.mla.q_lora_rank, kvl = m_.mla.kv_lora_rank;
      const double q_up = ql * heads * (nope + rope), q_other = ql > 0 ? h * ql : h * heads * (nope + rope);
      const double kv_up = kvl * heads * (nope + m_.mla.v_head_dim), kv_down = h * (kvl + rope);
      L_.mla_up_share_of_qkv = (q_up + kv_up) / (q_up + q_other + kv_up + kv_down);
    }
    return L_;
  }

 private:
  // `kernels`: how many kernels the op runs forward (an unfused chain runs several; per-expert
  // GEMMs one per expert), `bwd_kernels` backward (-1: twice as many), `weight_kernels` of those
  // the weight gradient's. The device pays each launch's start and tail, the host issues each.
  void add(KernelName name, KernelClass cls, double flops, double bytes, double fwd, double bwd, double bwd_w,
           std::int64_t gm = 0, std::int64_t gn = 0, std::int64_t gk = 0, double kernels = 1,
           double bwd_kernels = -1, double weight_kernels = 1) {
    KernelCost& k = L_.fwd[L_.count++];
    const double back = bwd_kernels < 0 ? 2 * kernels : bwd_kernels;
    k = KernelCost{name,
                   cls,
                   flops,
                   bytes,
                   fwd + kernels * launch_,
                   bwd + back * launch_,
                   bwd_w + weight_kernels * launch_,
                   gm,
                   gn,
                   gk};
    k.host_fwd_s = kernels * host_;
    k.host_bwd_s = back * host_;
  }
  // A GEMM: backward = data gradient + weight gradient, each as much work as the forward, each at
  // the rate its own shape reaches (gemm_passes).
  // `fp8_linear`: false for a GEMM that stays in 16 bits in fp8 plans (the MoE router). `shape`:
  // the problem's real shape where it is not tokens x gn over gk (the experts' grouped GEMMs).
  void gemm(KernelName name, double flops, std::int64_t gn, std::int64_t gk, bool fp8_linear = true,
            const GemmShape* shape = nullptr) {
    const bool fp8 = fp8_linear && dt_ == DType::kFp8;
    const double rate = fp8 || dt_ != DType::kFp8 ? gemm_rate_ : gemm_rate16_;
    const GemmShape dense{tokens_, static_cast<double>(gn), static_cast<double>(gk), 1};
    const GemmPasses g = gemm_passes(d_, flops, rate, shape ? *shape : dense, fp8);
    const double t = g.fwd, td = g.data, tw_own = g.weight;
    const double weight = e_ * static_cast<double>(gk) * gn;
    const double wf = d_.weight_pass_s(weight, false), wb = d_.weight_pass_s(weight, true);
    // One GEMM per pass, or under Plan::expert_gemm kPerExpert one per expert (and in fp8 one
    // quantisation each).
    const double launches = shape && p_.expert_gemm == ExpertGemm::kPerExpert ? shape->groups : 1.0;
    // The local weight's elements: the routed experts' own (a shared expert's are not counted),
    // else the GEMM's k x n.
    const double weights = shape ? shape->groups * shape->n * shape->k : static_cast<double>(gk) * gn;
    const Fp8Casts q = fp8 ? fp8_casts(name, gk, gn, weights, launches) : Fp8Casts{};
    // TP overlap (TpOverlap): the row-parallel GEMMs' forward and the column-parallel GEMMs'
    // weight gradient run on the SMs the communication kernels leave.
    const TpOverlap ub = ub_method(name);
    const double tf = ub == TpOverlap::kPipeline ? t * ub_stretch_ : t;
    const double tw = ub == TpOverlap::kBulk ? tw_own * ub_stretch_ : tw_own;
    // The backward's weight passes: half to its weight-gradient part (the gradient's read and write).
    add(name, KernelClass::kGemm, flops,
        e_ * (tokens_ * gk + static_cast<double>(gk) * gn + tokens_ * gn) + q.bytes, tf + wf + q.fwd_s,
        td + tw + wb + q.bwd_s, tw + 0.5 * wb + q.weight_s, T_, gn, gk, launches, 2 * launches, launches);
    // The host issues each quantisation too (their device launches are in q).
    if (fp8) {
      KernelCost& k = L_.fwd[L_.count - 1];
      k.host_fwd_s += q.fwd_kernels * launches * host_;
      k.host_bwd_s += q.bwd_kernels * launches * host_;
    }
  }
  // The overlap method of a TP collective paired with GEMM `name` (not the MoE experts'):
  // kPipeline for the row-parallel GEMMs' forward, kBulk for the column-parallel ones' weight
  // gradient, kNone otherwise.
  TpOverlap tp_method(KernelName name) const {
    switch (name) {
      case KernelName::kProj:
        return TpOverlap::kPipeline;
      case KernelName::kMlpDown:
        return moe_ ? TpOverlap::kNone : TpOverlap::kPipeline;
      case KernelName::kQkv:
        return TpOverlap::kBulk;
      case KernelName::kMlpUp:
        return moe_ ? TpOverlap::kNone : TpOverlap::kBulk;
      default:
        return TpOverlap::kNone;
    }
  }
  // The overlap a GEMM's SMs take part in: userbuffers' (Plan::overlap_tp_comm with SP) only.
  TpOverlap ub_method(KernelName name) const { return ub_ ? tp_method(name) : TpOverlap::kNone; }
  // Each TP collective's overlap and paired GEMM (LayerKernels::tp_overlap). Userbuffers pair every
  // collective; Plan::overlap_tp_dgrad only the backward's input-gradient all-reduce or
  // reduce-scatter (registered at the norm before the QKV or dense MLP-up GEMM) with that GEMM's
  // backward, as the bulk method times it -- NCCL's kernel takes its SMs only while it runs, which
  // is not priced (at most 16 of 132 SMs for the collective's own time).
  void pair_tp_overlap() {
    L_.tp_overlap.fill(TpOverlap::kNone);
    L_.tp_bwd_overlap.fill(TpOverlap::kNone);
    L_.tp_gemm.fill(-1);
    L_.tp_bwd_gemm.fill(-1);
    if (!ub_ && !async_dgrad_) return;
    auto next_gemm = [&](int after) {
      for (int i = after + 1; i < L_.count; ++i)
        if (L_.fwd[i].cls == KernelClass::kGemm) return i;
      return -1;
    };
    for (int j = 0; j < L_.tp_count && ub_; ++j) {
      const bool gather = L_.tp_kind[j] == TpCollective::kAllGather;
      const int g = gather ? next_gemm(L_.tp_after[j]) : L_.tp_after[j];
      const TpOverlap m = g >= 0 ? tp_method(L_.fwd[g].name) : TpOverlap::kNone;
      if (m == TpOverlap::kNone) continue;
      L_.tp_overlap[j] = gather ? TpOverlap::kRing : TpOverlap::kPipeline;
      L_.tp_gemm[j] = g;
    }
    for (int j = 0; j < L_.tp_bwd_count; ++j) {
      const bool gather = L_.tp_bwd_kind[j] == TpCollective::kAllGather;
      if (gather && !ub_) continue;
      const int g = gather ? L_.tp_bwd_after[j] : next_gemm(L_.tp_bwd_after[j]);
      const TpOverlap m = g >= 0 ? tp_method(L_.fwd[g].name) : TpOverlap::kNone;
      if (m == TpOverlap::kNone || (!ub_ && m != TpOverlap::kBulk)) continue;
      L_.tp_bwd_overlap[j] = gather ? TpOverlap::kRing : TpOverlap::kBulk;
      L_.tp_bwd_gemm[j] = g;
    }
  }
  // Transformer Engine's FP8 linear layers (fp8 plans): the GEMMs take FP8 operands, so each
  // quantises its 16-bit input forward and the incoming output gradient backward, writing the
  // FP8 tensor and its transpose (Hopper's FP8 GEMMs take only the TN layout, and the weight
  // gradient needs the transposed operands): read 2 bytes, write 1 + 1 per element, one kernel
  // each way (one per expert under Plan::expert_gemm kPerExpert). The output layer, attention and
  // norms stay in 16 bits.
  // Under Plan::fp8_recipe kCurrent the scale comes from the tensor itself: a reduction reads it
  // once more (2 bytes an element) and a small kernel turns the amax into the scale before the
  // cast (Transformer Engine's Float8CurrentScalingQuantizer: nvte_compute_amax,
  // nvte_compute_scale_from_amax, nvte_quantize; torchao's tensorwise Float8: the amax reduction,
  // then the cast); the host issues them as one quantisation. Where a fused kernel produces the
  // tensor (Plan::kernel_fusion), the amax comes out of that kernel instead: the norm before the
  // QKV and dense MLP-up GEMMs, the activation before the dense MLP-down GEMM forward, and the
  // activation's backward before MLP-up's backward (Transformer Engine's FUSED_NORM_AMAX_FP8 and
  // FUSED_ACTIVATION_AMAX_FP8 paths in its normalization and activation extensions; Inductor fuses
  // the norm with the quantisation's amax, pytorch/pytorch#111122). The delayed, blockwise and
  // MXFP8 recipes find the scale without that pass.
  // Under kRowwise (torchao's "rowwise" recipe: a scale per row of each operand, so every operand
  // is quantised along both axes) each activation takes two kernels: one reads the 16-bit tensor
  // and writes its FP8 rows and a 16-bit transposed copy, the next quantises that copy (2 + 1 + 2,
  // then 2 + 1 bytes an element; the first read is saved where a fused kernel produced the tensor,
  // as above). That is torchao's own account of its compiled kernels (pytorch/ao
  // torchao/testing/float8/roofline_utils.py from d8af7d7b, 2025-03-04,
  // get_tensor_memory_traffic_ovhd_s). The input's second axis feeds only the weight gradient
  // and is cast in the backward (torchao/float8/float8_linear.py: the forward saves the 16-bit
  // input). Its backward GEMMs accumulate at full precision, which the rowwise CUTLASS kernel
  // does too slowly, so torchao runs cuBLAS's tensor-scaled kernel with unit scales and
  // multiplies the output by the row and column scales afterwards (torchao/float8/float8_ops.py,
  // addmm_float8_unwrapped, pytorch/ao#1377): an elementwise pass (read 2, write 2 bytes) over the
  // weight gradient, a graph output that no later kernel fuses; the data gradient's multiply is
  // left to fuse into the operator that consumes it and is not priced. The forward's rowwise
  // CUTLASS GEMM is priced at the FP8 GEMM rate (with fast accumulation "most shapes are within
  // 90-100% of tensor-wise efficiency", pytorch/pytorch#147971; 0-10% slower on Llama shapes,
  // pytorch/FBGEMM#2764).
  // Plan::fp8_weight_recast (torchao's Float8Linear) casts the `weights` elements (the local
  // weight) in every pass of every micro-batch, after roofline_utils' kernels for the weight:
  // tensor scaling an amax read (2 bytes), the forward's cast (2 + 1) and the backward's
  // transposed cast (2 + 1); rowwise the forward's cast (2 + 1), a 16-bit transpose (2 + 2) and its
  // cast (2 + 1) in the backward. Otherwise the FP8 weights are cast once a step and cached across
  // micro-batches (Transformer Engine), not priced.
  struct Fp8Casts {
    double fwd_s = 0, bwd_s = 0, weight_s = 0, bytes = 0;
    int fwd_kernels = 0, bwd_kernels = 0;  // the host's operations, per launch
  };
  Fp8Casts fp8_casts(KernelName name, std::int64_t gk, std::int64_t gn, double weights,
                     double launches) const {
    const bool current = p_.fp8_recipe == Fp8Recipe::kCurrent;
    const bool rowwise = p_.fp8_recipe == Fp8Recipe::kRowwise;
    const bool dense_mlp = !moe_ && (name == KernelName::kMlpUp || name == KernelName::kMlpDown);
    const bool in_fused = fused_ && (name == KernelName::kQkv || dense_mlp);
    const bool out_fused = fused_ && !moe_ && name == KernelName::kMlpUp;
    // One activation's quantisation, bytes an element and kernels: its first axis, and rowwise
    // its second (the transposed copy's cast; 0 otherwise), which for the input feeds only the
    // weight gradient.
    struct Pass {
      double first, second, first_kernels, second_kernels;
    };
    auto pass = [&](bool fused) -> Pass {
      if (rowwise) return {fused ? 3.0 : 5.0, 3.0, 1.0, 1.0};
      const bool amax = current && !fused;
      return {amax ? 6.0 : 4.0, 0.0, current ? (amax ? 3.0 : 2.0) : 1.0, 0.0};
    };
    const Pass in = pass(in_fused), out = pass(out_fused);
    auto bytes = [&](double per_element, std::int64_t width) {
      return per_element * tokens_ * static_cast<double>(width);
    };
    Fp8Casts q;
    q.fwd_s = d_.stream_seconds(bytes(in.first, gk)) + in.first_kernels * launches * launch_;
    q.bwd_s = d_.stream_seconds(bytes(out.first + out.second, gn)) +
              (out.first_kernels + out.second_kernels) * launches * launch_;
    q.weight_s = in.second > 0
                     ? d_.stream_seconds(bytes(in.second, gk)) + in.second_kernels * launches * launch_
                     : 0.0;
    q.bytes = bytes(in.first + in.second, gk) + bytes(out.first + out.second, gn);
    q.fwd_kernels = 1;
    q.bwd_kernels = 1;
    if (rowwise) {  // the weight gradient's scale, applied after the GEMM
      q.weight_s += d_.stream_seconds(4.0 * weights) + launches * launch_;
      q.bytes += 4.0 * weights;
      q.bwd_kernels += 1;
    }
    if (p_.fp8_weight_recast) {
      const double fwd = rowwise ? 3.0 : (current ? 5.0 : 3.0), bwd = rowwise ? 7.0 : 3.0;
      const double fwd_kernels = rowwise ? 1.0 : (current ? 3.0 : 1.0), bwd_kernels = rowwise ? 2.0 : 1.0;
      q.fwd_s += d_.stream_seconds(fwd * weights) + fwd_kernels * launches * launch_;
      q.bwd_s += d_.stream_seconds(bwd * weights) + bwd_kernels * launches * launch_;
      q.bytes += (fwd + bwd) * weights;
      q.fwd_kernels += 1;
      q.bwd_kernels += 1;
    }
    q.bwd_s += q.weight_s;
    return q;
  }
  // An elementwise kernel: backward reads the saved input and the incoming gradient, writes one.
  void elementwise(KernelName name, double bytes, int kernels = 1) {
    add(name, KernelClass::kElementwise, 0, bytes, d_.stream_seconds(bytes), d_.stream_seconds(2 * bytes), 0,
        0, 0, 0, kernels);
  }
  // Unfused (PyTorch eager) chains, tensor passes over memory and kernels:
  //  - RMSNorm as Llama's reference code writes it, in fp32 between two casts: norm_passes.
  //    PyTorch's LayerNorm is one kernel either way.
  //  - dropout + residual add: dropout (read, write, write a mask) then add (read 2, write): 5
  //    passes and a mask, 2 kernels, against 3 and a mask (without dropout: the add alone).
  //  - SwiGLU: silu(gate) (read, write) then multiply (read 2, write): 5 passes, 2 kernels
  //    against 3. GeLU is one kernel either way (the bias rides in the GEMM).
  void norm(KernelName name) {
    const NormPasses n = norm_passes(m_, p_, e_);
    elementwise(name, n.passes * th_ * e_, n.kernels);
  }
  // A residual add's backward passes the output gradient to both branches, which costs nothing; the
  // two branches' gradients are summed where they meet (one add: read two, write one), dropout's
  // gradient is the saved mask applied (read the gradient and the mask, write), and a fused
  // bias-dropout-add (Megatron's) also sums the bias gradient over the tokens (one read): 3 passes
  // and one kernel without dropout, 5 passes, the mask and two kernels with it (6 with a fused
  // bias), where twice the forward had been counted. (On the CPU runtime the tiny model's residual
  // backwards took 0.1-0.2 us against 1.3 us priced as twice the forward, their sums running inside
  // the norms' backward.)
  void residual(KernelName name) {
    const double drop = m_.dropout ? 1.0 : 0.0;
    const bool split = m_.dropout && !fused_;
    const double bytes = (split ? 5 : 3) * th_ * e_ + drop * th_;
    const double bwd_bytes =
        3 * th_ * e_ + drop * (2 * th_ * e_ + th_) + (m_.bias && m_.dropout && fused_ ? th_ * e_ : 0.0);
    add(name, KernelClass::kElementwise, 0, bytes, d_.stream_seconds(bytes), d_.stream_seconds(bwd_bytes), 0,
        0, 0, 0, split ? 2 : 1, m_.dropout ? 2 : 1);
  }
  // Megatron sequence parallelism: norms and residuals on 1/t of the tokens, an all-gather before
  // each column-parallel GEMM and a reduce-scatter after each row-parallel one. Without it, one
  // all-reduce after each row-parallel GEMM.
  // The bytes of a TP collective over the b*s*h activation (LayerKernels::tp_fwd_bytes): an
  // all-gather feeding FP8 GEMMs (`fp8_gemms`, in an fp8 plan) moves one byte an element.
  double tp_collective_bytes(TpCollective kind, bool fp8_gemms) const {
    const bool fp8 = kind == TpCollective::kAllGather && fp8_gemms && dt_ == DType::kFp8;
    return tokens_ * m_.hidden * (fp8 ? 1.0 : e_);
  }
  void tp_fwd(TpCollective kind, bool fp8_gemms) {
    L_.tp_after[L_.tp_count] = L_.count - 1;
    L_.tp_fwd_bytes[L_.tp_count] = tp_collective_bytes(kind, fp8_gemms);
    L_.tp_kind[L_.tp_count++] = kind;
  }
  void tp_bwd(int after, TpCollective kind, bool fp8_gemms) {
    L_.tp_bwd_after[L_.tp_bwd_count] = after;
    L_.tp_bwd_bytes[L_.tp_bwd_count] = tp_collective_bytes(kind, fp8_gemms);
    L_.tp_bwd_kind[L_.tp_bwd_count++] = kind;
  }
  // A norm before a column-parallel GEMM, with SP its all-gather (backward: a reduce-scatter);
  // returns the norm's index. `fp8_gemms`: the gathered tensor feeds FP8 GEMMs (not the router).
  int norm_before_column_parallel(KernelName name, bool fp8_gemms = true) {
    norm(name);
    const int at = L_.count - 1;
    if (sp_) {
      tp_fwd(TpCollective::kAllGather, fp8_gemms);
      tp_bwd(at, TpCollective::kReduceScatter, fp8_gemms);
    }
    return at;
  }
  // The collectives after a row-parallel GEMM: a reduce-scatter with SP (backward: an all-gather
  // of the output gradient at the same place, for the GEMM's backward), else an all-reduce
  // (backward: after the block's norm, `norm_at`).
  void after_row_parallel(int norm_at, bool fp8_gemms = true) {
    tp_fwd(sp_ ? TpCollective::kReduceScatter : TpCollective::kAllReduce, fp8_gemms);
    tp_bwd(sp_ ? L_.count - 1 : norm_at, sp_ ? TpCollective::kAllGather : TpCollective::kAllReduce,
           fp8_gemms);
  }

  void attention_block(const Partner& partner);
  void attention_core(const DeviceSpec& dev);
  std::pair<double, double> fused_attention_seconds(const DeviceSpec& dev, double peak, double launch) const;
  void place_attention(const Partner& partner);
  void mlp_block();
  int mlp_norm();
  void moe_route_and_dispatch(double capacity);
  void mlp_activation(double ffn_computed);
  void moe_combine(double capacity);

  const ModelSpec& m_;
  const DeviceSpec& d_;
  const Plan& p_;
  const LayerShape& s_;
  const bool moe_;
  const DType dt_;
  const double gemm_rate_;
  const double gemm_rate16_;  // a 16-bit GEMM's, for those fp8 plans keep in 16 bits
  // Per kernel: a launch from the host, or a node of a CUDA graph (Plan::cuda_graphs). Not const:
  // a dropless MoE layer's experts run outside the graph (mlp_block).
  double launch_;
  // The host's time per operation it issues (DeviceSpec::host_op_s; none in a CUDA graph).
  double host_;
  const bool fused_;
  const double e_;
  const double tokens_;
  const double th_;  // h-wide tensors: split only with SP
  const double tp_;
  const std::int64_t T_, H_;
  const LayerFlops f_;
  const bool sp_;
  // MoE parallel folding (Plan::expert_tp 1 below tp, with SP): each TP rank dispatches its own
  // sequence shard's tokens to whole experts, so the MLP block has no TP collective (the shared
  // experts, where a model has them, are counted with the routed ones).
  const bool folded_;
  // ModelSpec::parallel_block (not with MoE parallel folding, whose MLP has its own norm): one norm
  // and, with TP, one gather before both blocks and one reduction after both.
  const bool parallel_;
  int block_norm_ = -1;
  const bool ub_;            // TP collectives overlapped with their GEMMs (TpOverlap)
  const bool async_dgrad_;   // Plan::overlap_tp_dgrad without userbuffers
  const double ub_stretch_;  // a GEMM's time on the SMs the overlap leaves it, over its time on all
  LayerKernels L_;
};

void LayerKernelBuilder::attention_block(const Partner& partner) {
  const double out_proj = 2.0 * tokens_ * m_.v_dim() * m_.hidden / tp_;
  const int norm1 = norm_before_column_parallel(KernelName::kNorm1);
  gemm(KernelName::kQkv, f_.attn_linear - out_proj,
       static_cast<std::int64_t>((f_.attn_linear - out_proj) / (2.0 * tokens_ * m_.hidden)), H_);
  if (m_.rope) {
    // RoPE rotates q and k (MLA: their rotary parts) in place: fused (Megatron, Transformer
    // Engine, compiled), a read and a write of each, forward, and the same through the inverse
    // rotation backward, a kernel each way, inside the QKV op. PyTorch eager runs the reference
    // code's chain (Llama's and torchtitan's apply_rotary_emb) on each of q and k: x.float() (read
    // e, write 4 bytes), the complex multiply by the table (read 4, write 4), type_as back (read
    // 4, write e), three kernels, and its autograd the same chain backward.
    const double rotated = m_.mla.enabled() ? (m_.heads + 1.0) * m_.mla.qk_rope_head_dim
                                            : static_cast<double>(m_.q_dim() + m_.kv_dim());
    const double elements = tokens_ * rotated / tp_;
    const double bytes = fused_ ? 2.0 * elements * e_ : (2.0 * e_ + 16.0) * elements;
    const int kernels = fused_ ? 1 : 6;
    KernelCost& qkv = L_.fwd[L_.count - 1];
    qkv.fwd_s += d_.stream_seconds(bytes) + kernels * launch_;
    qkv.bwd_s += d_.stream_seconds(bytes) + kernels * launch_;
    qkv.host_fwd_s += kernels * host_;
    qkv.host_bwd_s += kernels * host_;
    qkv.bytes += bytes;
  }
  if (s_.repeat_kv) {
    // repeat_kv (Plan::repeat_kv): K and V each expanded to every query head and copied (reshape
    // of an expanded view), reading kv_heads-wide and writing heads-wide; backward, the gradient
    // summed back over the repeats (read heads-wide, write kv_heads-wide). A kernel per tensor each
    // way, inside the QKV op like RoPE.
    const double bytes =
        tokens_ * 2.0 * (attention_kv_dim(m_, s_) + static_cast<double>(m_.kv_dim())) / tp_ * e_;
    KernelCost& qkv = L_.fwd[L_.count - 1];
    qkv.fwd_s += d_.stream_seconds(bytes) + 2 * launch_;
    qkv.bwd_s += d_.stream_seconds(bytes) + 2 * launch_;
    qkv.host_fwd_s += 2 * host_;
    qkv.host_bwd_s += 2 * host_;
    qkv.bytes += bytes;
  }
  place_attention(partner);
  gemm(KernelName::kProj, out_proj, H_ / static_cast<std::int64_t>(tp_),
       m_.v_dim() / static_cast<std::int64_t>(tp_));
  if (parallel_) {  // the MLP reads the same norm output; one reduction and add after it
    block_norm_ = norm1;
    return;
  }
  after_row_parallel(norm1);
  residual(KernelName::kResidual1);
}

// The fused attention kernel's forward and backward seconds on `dev` (peak `peak`, `launch` per
// kernel), with context parallelism its cp steps.
std::pair<double, double> LayerKernelBuilder::fused_attention_seconds(const DeviceSpec& dev, double peak,
                                                                      double launch) const {
  const double scores = s_.batch * m_.heads * s_.seq * s_.kv_seq / tp_;  // score elements, the full square
  // Causal flash attention skips the masked half; its backward re-runs Q·K^T (5 GEMMs vs 2).
  // A FlashAttention-1-class kernel runs at a share of the device's FlashAttention-2-class rate
  // (kFlash1OfFlash2); neither overlaps its exponentials with the multiplies.
  const bool flash1 = p_.attention_kernel == AttentionKernel::kFlash1;
  const bool flash2 =
      (p_.attention_kernel == AttentionKernel::kFlash2 || flash1) && dev.attention_flash2_efficiency > 0;
  const double eff = (flash2 ? dev.attention_flash2_efficiency : dev.attention_efficiency) *
                     (flash1 ? kFlash1OfFlash2 : 1.0);
  // The efficiencies are long-sequence rates at head dimension 128: the call's blocks
  // (DeviceSpec::attention_shape_efficiency; context parallelism runs one call per step) and its
  // head width (DeviceSpec::attention_head_dim_factor) scale them.
  const double width = static_cast<double>(m_.q_dim() + m_.v_dim()) / (2.0 * m_.heads);
  const double shape = dev.attention_shape_efficiency(s_.seq, s_.kv_seq, s_.batch * m_.heads / tp_,
                                                      p_.cp > 1 ? static_cast<double>(p_.cp) : 1.0);
  const double t =
      0.5 * f_.attn_core / (peak * eff) *
      dev.attention_head_dim_factor(width, eff, peak, dev.attention_exp_overlap && !flash2 && !flash1) /
      shape;
  // The work on the scores that does not scale with the head width (DeviceSpec::attention_score_s,
  // half forward, half backward), over the causal half.
  // And the fixed cost per (sequence, head) loop (DeviceSpec::attention_head_s, half each way).
  const double score =
      0.25 * scores * dev.attention_score_s + 0.5 * s_.batch * m_.heads / tp_ * dev.attention_head_s;
  double fwd = t + dev.attention_setup_s + score, bwd = 2.5 * t + dev.attention_setup_s + score;
  // A measured split of the pair (DeviceSpec::attention_backward_ratio).
  if (dev.attention_backward_ratio > 0) {
    const double pair = fwd + bwd;
    fwd = pair / (1 + dev.attention_backward_ratio);
    bwd = pair - fwd;
  }
  if (p_.cp > 1) {
    // Context parallelism runs the attention as cp steps, one per K/V shard (Transformer
    // Engine's AttnFuncWithCPAndKVP2P, PyTorch's ring and all-gather rotaters): a kernel per
    // step, and from the second step on a correction of the running output by the step's
    // log-sum-exp (read both, write one, in fp32); backward, a kernel per step and the
    // accumulation of dQ, dK and dV (read and write, fp32).
    const double steps = p_.cp - 1.0;
    const double o = tokens_ * static_cast<double>(m_.q_dim()) / tp_ * 4.0,
                 kv = tokens_ * 2.0 * attention_kv_dim(m_, s_) / tp_ * 4.0;
    fwd += steps * (2 * launch + dev.attention_setup_s + dev.stream_seconds(3 * o));
    bwd += steps * (2 * launch + dev.attention_setup_s + dev.stream_seconds(2 * (o + kv)));
  }
  return {fwd, bwd};
}

// The attention core on device `dev` (this one, or the partner of Plan::attention_device),
// appended to the list. Attention kernels run in 16-bit even in fp8 plans.
void LayerKernelBuilder::attention_core(const DeviceSpec& dev) {
  const double peak = dev.peak(DType::kBf16) > 0 ? dev.peak(DType::kBf16) : dev.peak(dt_);
  const double dev_launch = p_.cuda_graphs ? dev.graph_kernel_overhead_s : dev.kernel_overhead_s;
  const bool elsewhere = &dev != &d_;
  auto put = [&](KernelName name, KernelClass cls, double flops, double bytes, double t, double bwd,
                 double bwd_w, int kernels = 1) {
    L_.fwd[L_.count++] = KernelCost{name,
                                    cls,
                                    flops,
                                    bytes,
                                    t + kernels * dev_launch,
                                    bwd + 2 * kernels * dev_launch,
                                    bwd_w + dev_launch,
                                    0,
                                    0,
                                    0,
                                    elsewhere,
                                    kernels * host_,
                                    2 * kernels * host_};
  };
  if (p_.flash_attention) {
    const auto [fwd, bwd] = fused_attention_seconds(dev, peak, dev_launch);
    put(KernelName::kAttention, KernelClass::kAttention, f_.attn_core, 0, fwd, bwd, 0);
    if (p_.cp > 1) {  // a kernel and a correction (backward: an accumulation) per further step
      L_.fwd[L_.count - 1].host_fwd_s += 2 * (p_.cp - 1) * host_;
      L_.fwd[L_.count - 1].host_bwd_s += 2 * (p_.cp - 1) * host_;
    }
  } else {
    const double scores = s_.batch * m_.heads * s_.seq * s_.kv_seq / tp_;  // score elements, the full square
    const double t =
        0.5 * f_.attn_core / (peak * dev.gemm_efficiency) + dev.gemm_setup_s;  // Q·K^T and P·V, half each
    put(KernelName::kScores, KernelClass::kGemm, 0.5 * f_.attn_core, 0, t, 2 * t, t);
    // Fused scale-mask-softmax reads and writes the scores; dropout adds a mask and a copy.
    // Unfused: scale, mask and softmax each read and write them (3 kernels, and dropout a 4th).
    const double bytes = scores * ((fused_ ? 2 : 6) * e_ + (m_.dropout ? 2 * e_ + 1 : 0.0));
    put(KernelName::kSoftmax, KernelClass::kElementwise, 0, bytes, dev.stream_seconds(bytes),
        dev.stream_seconds(2 * bytes), 0, fused_ ? 1 : (m_.dropout ? 4 : 3));
    put(KernelName::kAttnV, KernelClass::kGemm, 0.5 * f_.attn_core, 0, t, 2 * t, t);
  }
}

// The attention core here, or on the partner device (Plan::attention_device; "auto": where that
// is faster, transfers included).
void LayerKernelBuilder::place_attention(const Partner& partner) {
  auto seconds = [&](int from, int to) {
    double t = 0;
    for (int i = from; i < to; ++i) t += L_.fwd[i].fwd_s + L_.fwd[i].bwd_s;
    return t;
  };
  L_.attention_first = L_.count;
  attention_core(d_);
  if (partner.device && partner.link_rate > 0) {
    // Q, K and V go to the partner and the output comes back; backward sends the output's
    // gradient and takes back those of Q, K and V.
    const double qkv = tokens_ * (m_.q_dim() + 2.0 * m_.kv_dim()) / tp_ * e_,
                 out = tokens_ * m_.v_dim() / tp_ * e_;
    const double in_s = qkv / partner.link_rate, out_s = out / partner.link_rate;
    const int own_end = L_.count;
    attention_core(*partner.device);
    if (!partner.automatic ||
        seconds(own_end, L_.count) + 2 * (in_s + out_s) < seconds(L_.attention_first, own_end)) {
      std::copy(L_.fwd.begin() + own_end, L_.fwd.begin() + L_.count, L_.fwd.begin() + L_.attention_first);
      L_.count = L_.attention_first + (L_.count - own_end);
      L_.attention_on_partner = true;
      L_.partner_kind = partner.device->kind;
      L_.partner_in_s = in_s;
      L_.partner_out_s = out_s;
      L_.partner_grad_in_s = out_s;
      L_.partner_grad_out_s = in_s;
    } else {
      L_.count = own_end;
    }
  }
  L_.attention_last = L_.count - 1;
}

// The MLP block: its norm, (MoE) the router and the dispatch, the up projection, the activation,
// the down projection, (MoE) the combine, the row-parallel collectives and the residual.
void LayerKernelBuilder::mlp_block() {
  const int norm2 = mlp_norm();
  const double etp = folded_ ? static_cast<double>(p_.etp()) : tp_;
  double ffn = static_cast<double>(m_.ffn_hidden);
  // Token drop with padding (Plan::moe_capacity_factor): each expert computes its capacity's rows,
  // capacity_factor times its even share of the routed tokens; the shared experts all of them.
  const double capacity = moe_ && p_.moe_drop_and_pad() ? p_.moe_capacity_factor : 1.0;
  double ffn_computed = ffn;  // the width times rows actually computed, over the tokens
  if (moe_) {
    ffn = static_cast<double>(m_.moe.expert_ffn_hidden) * (m_.moe.top_k + m_.moe.shared_experts);
    ffn_computed =
        static_cast<double>(m_.moe.expert_ffn_hidden) * (m_.moe.top_k * capacity + m_.moe.shared_experts);
    moe_route_and_dispatch(capacity);
  }
  const double up_mats = m_.mlp == MlpKind::kSwiglu ? 2.0 : 1.0;
  const double up = 2.0 * tokens_ * m_.hidden * ffn * up_mats / tp_;
  const double computed = ffn_computed / ffn;  // the padding's (or the drop's) share of the work
  // The routed experts run as one grouped GEMM over this rank's experts, each on the tokens routed
  // to it (an even share); the shared experts' tokens are all of them, their width added to each.
  GemmShape up_shape, down_shape;
  const GemmShape* up_at = nullptr;
  const GemmShape* down_at = nullptr;
  if (moe_ && m_.moe.experts > 0) {
    const double local = std::max(1.0, static_cast<double>(m_.moe.experts) / p_.ep);
    const double width = static_cast<double>(m_.moe.expert_ffn_hidden) / etp;
    // this rank's tokens' top_k copies (per TP rank of the experts' width), over its experts
    const double routed = tokens_ * m_.moe.top_k * capacity * etp / tp_ / local;
    up_shape = {routed, width * up_mats, static_cast<double>(m_.hidden), local};
    down_shape = {routed, static_cast<double>(m_.hidden), width, local};
    up_at = &up_shape;
    down_at = &down_shape;
  }
  gemm(KernelName::kMlpUp, up * computed, static_cast<std::int64_t>(ffn * up_mats / etp), H_, true, up_at);
  mlp_activation(ffn_computed);
  gemm(KernelName::kMlpDown, (f_.mlp - up) * computed, H_, static_cast<std::int64_t>(ffn / etp), true,
       down_at);
  if (moe_) moe_combine(capacity);
  if (!folded_) after_row_parallel(norm2, !moe_);
  residual(KernelName::kResidual2);
}

// The MLP's norm; returns its index in the list.
int LayerKernelBuilder::mlp_norm() {
  if (parallel_) return block_norm_;  // ModelSpec::parallel_block: the attention's norm, gathered once
  if (folded_) {
    norm(KernelName::kNorm2);
    return L_.count - 1;
  }
  return norm_before_column_parallel(KernelName::kNorm2, !moe_);
}

// An MoE layer's router and token dispatch, before its experts.
void LayerKernelBuilder::moe_route_and_dispatch(double capacity) {
  gemm(KernelName::kRouter, f_.router, m_.moe.experts, H_, false);
  // The router's and the dispatcher's bookkeeping, issued by the host as small ops (counted in
  // Megatron-Core 0.15's TopKRouter and MoEAlltoAllTokenDispatcher with router and permute
  // fusion). Router forward: the cast to its fp32, the fused top-k with score function, and the
  // auxiliary loss (its scores, the tokens per expert, switch_load_balancing_loss_func's sums
  // and products, MoEAuxLossAutoScaler, the tracker's copy); backward their gradients.
  L_.fwd[L_.count - 1].host_fwd_s += kRouterOps.fwd * host_;
  L_.fwd[L_.count - 1].host_bwd_s += kRouterOps.bwd * host_;
  // The permute reads each token once and writes its top_k copies (grouped by expert); the
  // unpermute reads the copies back and writes one weighted sum: (1 + top_k) passes each
  // (Megatron's moe_utils permute/unpermute, a gather and a scatter of the hidden states).
  elementwise(KernelName::kPermute, (1.0 + m_.moe.top_k * capacity) * tokens_ * m_.hidden * e_ / tp_);
  // Dispatch, forward: the token counts (sums over the routing map, with expert parallelism
  // their all-gather over the group and the split sizes), their copies to the host, the fused
  // permute's row map, the probabilities' all-to-all and the sort of both by local expert;
  // backward the permute's, the sort's and the probabilities' all-to-all's gradients.
  const OpCounts dispatch = p_.ep > 1 ? kDispatchOps : kLocalDispatchOps;
  L_.fwd[L_.count - 1].host_fwd_s += dispatch.fwd * host_;
  L_.fwd[L_.count - 1].host_bwd_s += dispatch.bwd * host_;
  if (p_.ep > 1) {
    L_.moe_dispatch_after = L_.count - 1;
    L_.ep_bytes = tokens_ / (s_.sp ? tp_ : 1.0) * m_.moe.top_k * capacity * m_.hidden * e_;
  }
  // Dropless: the all-to-all's split sizes (expert parallelism) or the per-expert GEMMs' row
  // counts must reach the host first (LayerKernels::host_sync_at). Dropped and padded, every
  // count is the capacity, known beforehand (Megatron-Core's dispatcher makes them on the host).
  if (!p_.moe_drop_and_pad() && (p_.ep > 1 || p_.expert_gemm == ExpertGemm::kPerExpert)) {
    L_.host_sync_at = L_.count - 1;
    // Their shapes change every step, so a CUDA graph captures the attention, the router and the
    // dispatcher's preprocessing only; the experts and the combine run eager, launched and issued
    // by the host (Megatron-Core's cuda_graph_scope attn, moe_router, moe_preprocess for dropless
    // MoE; a full-iteration graph needs drop-and-pad).
    launch_ = d_.kernel_overhead_s;
    host_ = d_.host_op_s;
  }
}

// The MLP's activation over `ffn_computed` (its width times the rows computed, over the tokens).
void LayerKernelBuilder::mlp_activation(double ffn_computed) {
  const bool split_glu = m_.mlp == MlpKind::kSwiglu && !fused_;
  // Squared ReLU runs as relu then pow, two kernels and four passes, fused or not: Megatron-Core's
  // squared_relu is torch.pow(F.relu(x), 2) and its bias-activation fusion covers GeLU and SwiGLU
  // only (megatron/core/activations.py, transformer/mlp.py); PyTorch eager the same.
  const bool split_relu2 = m_.mlp == MlpKind::kSquaredRelu;
  elementwise(KernelName::kActivation,
              (m_.mlp == MlpKind::kSwiglu ? (split_glu ? 5.0 : 3.0)
               : split_relu2              ? 4.0
                                          : 2.0) *
                  tokens_ * ffn_computed / tp_ * e_,
              split_glu || split_relu2 ? 2 : 1);
  if (d_.activation_element_s > 0 && !split_relu2) {  // an exponential or tanh per output element, each way
    KernelCost& act = L_.fwd[L_.count - 1];
    act.fwd_s += tokens_ * ffn_computed / tp_ * d_.activation_element_s;
    act.bwd_s += tokens_ * ffn_computed / tp_ * d_.activation_element_s;
  }
}

// An MoE layer's combine after its experts: the unpermute, and the sort back from local-expert
// order before it (and its gradient).
void LayerKernelBuilder::moe_combine(double capacity) {
  if (p_.ep > 1) L_.moe_combine_after = L_.count - 1;
  elementwise(KernelName::kUnpermute, (1.0 + m_.moe.top_k * capacity) * tokens_ * m_.hidden * e_ / tp_);
  L_.fwd[L_.count - 1].host_fwd_s += kCombineOps.fwd * host_;
  L_.fwd[L_.count - 1].host_bwd_s += kCombineOps.bwd * host_;
}

}  // namespace

LayerKernels layer_kernels(const ModelSpec& m, const DeviceSpec& d, const Plan& p, const LayerShape& s,
                           bool moe, const Partner& partner) {
  return LayerKernelBuilder(m, d, p, s, moe).build(partner);
}

namespace {

// A pass without a synchronisation that the host bounds: `excess` seconds of waiting spread over
// the ops by their host time (`host`), added to `time` and recorded in `wait`.
void spread_wait(LayerKernels& k, double excess, double host_total, double KernelCost::*time,
                 double KernelCost::*host, double KernelCost::*wait) {
  const double scale = excess / host_total;
  for (int i = 0; i < k.count; ++i) {
    KernelCost& op = k.fwd[i];
    op.*wait = scale * op.*host;
    op.*time += op.*wait;
  }
}

}  // namespace

void issue_from_host(LayerKernels& k, double a2a_s) {
  // Without a synchronisation: the host's excess over the device's time (the all-to-alls
  // included). One pass over the kernels when neither pass is host-bound (every dense layer).
  double dev_fwd = 0, dev_bwd = 0, host_fwd = 0, host_bwd = 0;
  for (int i = 0; i < k.count; ++i) {
    const KernelCost& op = k.fwd[i];
    dev_fwd += op.fwd_s;
    dev_bwd += op.bwd_s;
    host_fwd += op.host_fwd_s;
    host_bwd += op.host_bwd_s;
  }
  const double comm = a2a_s > 0 ? 2 * a2a_s : 0.0;
  if (host_bwd > dev_bwd + comm)
    spread_wait(k, host_bwd - dev_bwd - comm, host_bwd, &KernelCost::bwd_s, &KernelCost::host_bwd_s,
                &KernelCost::host_wait_bwd_s);
  if (k.host_sync_at < 0) {
    if (host_fwd > dev_fwd + comm)
      spread_wait(k, host_fwd - dev_fwd - comm, host_fwd, &KernelCost::fwd_s, &KernelCost::host_fwd_s,
                  &KernelCost::host_wait_fwd_s);
    return;
  }
  // From the synchronisation round to it again, host and device both idle at the start: each op
  // starts once issued and once the device is free (an all-to-all runs on the device before the
  // kernel after it, while the host goes on issuing).
  double issued = 0, done = 0;
  for (int n = 1; n <= k.count; ++n) {
    const int i = (k.host_sync_at + n) % k.count;
    if (a2a_s > 0 && (i == k.moe_dispatch_after + 1 || i == k.moe_combine_after + 1)) done += a2a_s;
    KernelCost& op = k.fwd[i];
    issued += op.host_fwd_s;
    const double wait = std::max(0.0, issued - done);
    done = std::max(done, issued) + op.fwd_s;
    op.fwd_s += wait;
    op.host_wait_fwd_s = wait;
  }
}

HeadCosts head_costs(const ModelSpec& m, const DeviceSpec& d, const Plan& p, const LayerShape& s) {
  HeadCosts h;
  // The output layer stays in 16 bits in fp8 plans (Megatron-Core builds it outside Transformer
  // Engine's FP8 modules).
  const Precision head_precision = p.precision == Precision::kFp8 ? Precision::kBf16 : p.precision;
  const double gemm_rate = d.peak(compute_dtype(head_precision, d)) * d.gemm_efficiency;
  const double launch = p.cuda_graphs ? d.graph_kernel_overhead_s : d.kernel_overhead_s;
  const double tokens = s.batch * s.seq;
  const double logits = tokens * static_cast<double>(m.vocab) / p.tp;  // this rank's slice
  h.tp = p.tp > 1;
  h.sp = h.tp && s.sp;
  // The final norm, as a layer's: fused, read and write b*s*h (eager RMSNorm: norm_passes);
  // backward twice that.
  const NormPasses n = norm_passes(m, p, s.bytes_per_element);
  h.norm_bytes = n.passes * tokens * m.hidden / (h.sp ? p.tp : 1) * s.bytes_per_element;
  h.norm_fwd_s = d.stream_seconds(h.norm_bytes) + n.kernels * launch;
  h.norm_bwd_s = d.stream_seconds(2 * h.norm_bytes) + 2 * n.kernels * launch;
  // fp32 cross-entropy (Plan::cross_entropy), bytes per logit of this rank's slice, e the logits'
  // element and `cast` their conversion to fp32 (read e, write 4; none for fp32 logits):
  // - one pass: the forward reads the logits, the backward writes their gradient and reads what
  //   it needs (12 bytes in all);
  // - Megatron-Core's native fusion: forward the cast with the maximum, the in-place subtraction,
  //   exponent and sum (read and write 4), the division (read and write 4); backward the
  //   gradient's scaling and its cast back (read 4, write e);
  // - Megatron's vocab_parallel_cross_entropy: forward the cast, the maximum (read 4), the
  //   subtraction and the exponent (each read and write 4), the sum (read 4), the division (read
  //   and write 4); backward the target's subtraction, the scaling by the loss's gradient (read
  //   and write 4) and the cast back (read 4, write e);
  // - PyTorch eager (torchtitan's cross_entropy(pred.float(), labels)): the cast, log_softmax
  //   over rows too long for one pass (read for the maximum, read for the sum, read and write the
  //   output) and the loss's gather; backward, the loss's zero-filled gradient (write 4),
  //   log_softmax's (read the gradient for its row sum, then it and the output, write 4) and the
  //   cast back.
  const double e = s.bytes_per_element, cast = e < 4 ? e + 4 : 0;
  const bool eager = !p.kernel_fusion;
  h.fwd_flops = logits_flops(m, s);
  int fwd_kernels = 1, bwd_kernels = 2;
  double fwd_bytes = 4.0, bwd_bytes = 8.0;
  if (eager) {
    fwd_bytes = cast + 16.0, bwd_bytes = cast + 20.0, fwd_kernels = 3, bwd_kernels = 4;
  } else if (p.cross_entropy == CrossEntropy::kJitFused) {
    fwd_bytes = (e < 4 ? e + 4 : 4.0) + 16.0, bwd_bytes = 4.0 + e, fwd_kernels = 3, bwd_kernels = 1;
  } else if (p.cross_entropy == CrossEntropy::kUnfused) {
    fwd_bytes = cast + 32.0, bwd_bytes = 8.0 + cast, fwd_kernels = 6, bwd_kernels = 3;
  }
  h.fwd_bytes = fwd_bytes * logits;
  h.bwd_bytes = bwd_bytes * logits;
  const double head_weight = s.bytes_per_element * m.hidden * static_cast<double>(m.vocab) / p.tp;
  // The softmax's exponential per logit: in the forward.
  // Each GEMM at its shape's rate (DeviceSpec::gemm_shape_efficiency): the logits tokens x vocab/tp
  // over the hidden size; backward the hidden states' gradient and the weight's.
  const GemmPasses g =
      gemm_passes(d, h.fwd_flops, gemm_rate,
                  {tokens, static_cast<double>(m.vocab) / p.tp, static_cast<double>(m.hidden)});
  h.fwd_s = g.fwd + d.weight_pass_s(head_weight, false) + d.stream_seconds(h.fwd_bytes) +
            logits * d.activation_element_s + fwd_kernels * launch;
  h.bwd_s = g.data + g.weight + d.weight_pass_s(head_weight, true) + d.stream_seconds(h.bwd_bytes) +
            bwd_kernels * launch;
  if (h.tp) {
    h.grad_bytes = 8.0 * logits;  // read and write the gradient once more
    h.grad_s = d.stream_seconds(h.grad_bytes) + launch;
    h.stats_bytes = 3.0 * 4.0 * tokens * p.tp;
    h.hidden_bytes = tokens * m.hidden * s.bytes_per_element;
  }
  return h;
}

}  // namespace foresight
