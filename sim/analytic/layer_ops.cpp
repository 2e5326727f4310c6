// The per-layer kernel list and its roofline times.
#include "sim/analytic/layer_ops.h"

#include <algorithm>

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
bool LayerKernels::reruns(RecomputeMask mask, int i) const {
  namespace rm = recompute_module;
  if (mask & rm::kFull) return true;
  switch (fwd[i].name) {
    case KernelName::kNorm1:
    case KernelName::kNorm2:
      return (mask & rm::kLayernorm) != 0;
    case KernelName::kActivation:
      return (mask & (rm::kAct | rm::kMlp)) != 0;
    case KernelName::kMlpUp:
      return (mask & rm::kMlp) != 0;
    case KernelName::kScores:
    case KernelName::kSoftmax:
    case KernelName::kAttnV:
      return (mask & rm::kCoreAttn) != 0;  // unfused attention only
    default:
      return false;
  }
}

double LayerKernels::recompute_seconds(RecomputeMask mask) const {
  if (mask == 0) return 0;
  if (mask & recompute_module::kFull) return fwd_seconds();
  double t = 0;
  for (int i = 0; i < count; ++i)
    if (reruns(mask, i)) t += fwd[i].fwd_s;
  const bool core = attention_first < count && reruns(mask, attention_first);
  if (core) t += partner_in_s + partner_out_s;  // the partner re-runs it: Q, K, V go there again
  return t;
}

double LayerKernels::recompute_flops(RecomputeMask mask) const {
  if (mask == 0) return 0;
  if (mask & recompute_module::kFull) return fwd_flops();
  double f = 0;
  for (int i = 0; i < count; ++i)
    if (reruns(mask, i)) f += fwd[i].flops;
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

NormPasses norm_passes(const ModelSpec& m, const Plan& p) {
  const bool eager_rms = m.norm == NormKind::kRmsNorm && !p.kernel_fusion;
  return {eager_rms ? 7.0 : 2.0, eager_rms ? 5 : 1};
}

LayerKernels layer_kernels(const ModelSpec& m, const DeviceSpec& d, const Plan& p, const LayerShape& s,
                           bool moe, const Partner& partner) {
  LayerKernels L;
  const DType dt = compute_dtype(p.precision, d);
  const double gemm_rate = d.peak(dt) * d.gemm_efficiency;
  // Attention kernels run in 16-bit even in fp8 plans (see `attention` below).
  // Per kernel: a launch from the host, or a node of a CUDA graph (Plan::cuda_graphs).
  const double launch = p.cuda_graphs ? d.graph_kernel_overhead_s : d.kernel_overhead_s;
  const bool fused = p.kernel_fusion;
  const double e = s.bytes_per_element;
  const double tokens = s.batch * s.seq;
  const double th = tokens * m.hidden / (s.sp ? s.tp : 1.0);  // h-wide tensors: split only with SP
  const double tp = s.tp;
  const auto T = static_cast<std::int64_t>(tokens);
  const auto H = static_cast<std::int64_t>(m.hidden);
  const LayerFlops f = moe ? moe_layer_flops(m, s) : dense_layer_flops(m, s);

  // `kernels`: how many kernels the op runs forward (an unfused chain runs several), `bwd_kernels`
  // backward (-1: twice as many).
  auto add = [&](KernelName name, KernelClass cls, double flops, double bytes, double fwd, double bwd,
                 double bwd_w, std::int64_t gm = 0, std::int64_t gn = 0, std::int64_t gk = 0, int kernels = 1,
                 int bwd_kernels = -1) {
    KernelCost& k = L.fwd[L.count++];
    const int back = bwd_kernels < 0 ? 2 * kernels : bwd_kernels;
    k = KernelCost{name,           cls, flops, bytes, fwd + kernels * launch, bwd + back * launch,
                   bwd_w + launch, gm,  gn,    gk};
  };
  // A GEMM: backward = data gradient + weight gradient, each as much work as the forward.
  auto gemm = [&](KernelName name, double flops, std::int64_t gn, std::int64_t gk) {
    const double t = flops / gemm_rate + d.gemm_setup_s;
    const double weight = e * static_cast<double>(gk) * gn;
    const double wf = d.weight_pass_s(weight, false), wb = d.weight_pass_s(weight, true);
    // The backward's weight passes: half to its weight-gradient part (the gradient's read and write).
    add(name, KernelClass::kGemm, flops, e * (tokens * gk + static_cast<double>(gk) * gn + tokens * gn),
        t + wf, 2 * t + wb, t + 0.5 * wb, T, gn, gk);
  };
  // An elementwise kernel: backward reads the saved input and the incoming gradient, writes one.
  auto elementwise = [&](KernelName name, double bytes, int kernels = 1) {
    add(name, KernelClass::kElementwise, 0, bytes, d.stream_seconds(bytes), d.stream_seconds(2 * bytes), 0, 0,
        0, 0, kernels);
  };
  const double drop = m.dropout ? 1.0 : 0.0;
  // Unfused (PyTorch eager) chains, tensor passes over memory and kernels:
  //  - RMSNorm as Llama's reference code writes it, x * rsqrt(mean(x^2) + eps) * w: pow (read,
  //    write), mean (read), rsqrt, multiply (read, write), scale (read, write): 7 passes, 5 kernels
  //    against 2 passes fused. PyTorch's LayerNorm is one kernel either way.
  //  - dropout + residual add: dropout (read, write, write a mask) then add (read 2, write): 5
  //    passes and a mask, 2 kernels, against 3 and a mask (without dropout: the add alone).
  //  - SwiGLU: silu(gate) (read, write) then multiply (read 2, write): 5 passes, 2 kernels
  //    against 3. GeLU is one kernel either way (the bias rides in the GEMM).
  auto norm = [&](KernelName name) {
    const NormPasses n = norm_passes(m, p);
    elementwise(name, n.passes * th * e, n.kernels);
  };
  // A residual add's backward passes the output gradient to both branches, which costs nothing; the
  // two branches' gradients are summed where they meet (one add: read two, write one), dropout's
  // gradient is the saved mask applied (read the gradient and the mask, write), and a fused
  // bias-dropout-add (Megatron's) also sums the bias gradient over the tokens (one read): 3 passes
  // and one kernel without dropout, 5 passes, the mask and two kernels with it (6 with a fused
  // bias), where twice the forward had been counted. (On the CPU runtime the tiny model's residual
  // backwards took 0.1-0.2 us against 1.3 us priced as twice the forward, their sums running inside
  // the norms' backward.)
  auto residual = [&](KernelName name) {
    const bool split = m.dropout && !fused;
    const double bytes = (split ? 5 : 3) * th * e + drop * th;
    const double bwd_bytes =
        3 * th * e + drop * (2 * th * e + th) + (m.bias && m.dropout && fused ? th * e : 0.0);
    add(name, KernelClass::kElementwise, 0, bytes, d.stream_seconds(bytes), d.stream_seconds(bwd_bytes), 0, 0,
        0, 0, split ? 2 : 1, m.dropout ? 2 : 1);
  };
  const double out_proj = 2.0 * tokens * m.v_dim() * m.hidden / tp;

  // Megatron sequence parallelism: norms and residuals on 1/t of the tokens, an all-gather before
  // each column-parallel GEMM and a reduce-scatter after each row-parallel one. Without it, one
  // all-reduce after each row-parallel GEMM.
  const bool sp = s.sp && p.tp > 1;
  auto tp_fwd = [&](TpCollective kind) {
    L.tp_after[L.tp_count] = L.count - 1;
    L.tp_kind[L.tp_count++] = kind;
  };
  auto tp_bwd = [&](int after, TpCollective kind) {
    L.tp_bwd_after[L.tp_bwd_count] = after;
    L.tp_bwd_kind[L.tp_bwd_count++] = kind;
  };
  norm(KernelName::kNorm1);
  const int norm1 = L.count - 1;
  if (sp) {
    tp_fwd(TpCollective::kAllGather);
    tp_bwd(norm1, TpCollective::kReduceScatter);
  }
  gemm(KernelName::kQkv, f.attn_linear - out_proj,
       static_cast<std::int64_t>((f.attn_linear - out_proj) / (2.0 * tokens * m.hidden)), H);
  if (m.rope) {
    // RoPE rotates q and k (MLA: their rotary parts) in place: a read and a write of each, forward,
    // and the same through the inverse rotation backward; a kernel each way, inside the QKV op.
    const double rotated = m.mla.enabled() ? (m.heads + 1.0) * m.mla.qk_rope_head_dim
                                           : static_cast<double>(m.q_dim() + m.kv_dim());
    const double bytes = 2.0 * tokens * rotated / tp * e;
    KernelCost& qkv = L.fwd[L.count - 1];
    qkv.fwd_s += d.stream_seconds(bytes) + launch;
    qkv.bwd_s += d.stream_seconds(bytes) + launch;
    qkv.bytes += bytes;
  }
  // The attention core on device `dev` (this one, or the partner of Plan::attention_device),
  // appended to the list.
  auto attention = [&](const DeviceSpec& dev) {
    const double peak = dev.peak(DType::kBf16) > 0 ? dev.peak(DType::kBf16) : dev.peak(dt);
    const double dev_launch = p.cuda_graphs ? dev.graph_kernel_overhead_s : dev.kernel_overhead_s;
    const bool elsewhere = &dev != &d;
    auto put = [&](KernelName name, KernelClass cls, double flops, double bytes, double t, double bwd,
                   double bwd_w, int kernels = 1) {
      L.fwd[L.count++] = KernelCost{name,
                                    cls,
                                    flops,
                                    bytes,
                                    t + kernels * dev_launch,
                                    bwd + 2 * kernels * dev_launch,
                                    bwd_w + dev_launch,
                                    0,
                                    0,
                                    0,
                                    elsewhere};
    };
    const double scores = s.batch * m.heads * s.seq * s.kv_seq / tp;  // score elements, the full square
    if (p.flash_attention) {
      // Causal flash attention skips the masked half; its backward re-runs Q·K^T (5 GEMMs vs 2).
      const double t = 0.5 * f.attn_core / (peak * dev.attention_efficiency);
      // The work on the scores that does not scale with the head width (DeviceSpec::attention_score_s,
      // half forward, half backward), over the causal half.
      // And the fixed cost per (sequence, head) loop (DeviceSpec::attention_head_s, half each way).
      const double score =
          0.25 * scores * dev.attention_score_s + 0.5 * s.batch * m.heads / tp * dev.attention_head_s;
      double fwd = t + dev.attention_setup_s + score, bwd = 2.5 * t + dev.attention_setup_s + score;
      if (dev.attention_backward_ratio >
          0) {  // a measured split of the pair (DeviceSpec::attention_backward_ratio)
        const double pair = fwd + bwd;
        fwd = pair / (1 + dev.attention_backward_ratio);
        bwd = pair - fwd;
      }
      put(KernelName::kAttention, KernelClass::kAttention, f.attn_core, 0, fwd, bwd, 0);
    } else {
      const double t =
          0.5 * f.attn_core / (peak * dev.gemm_efficiency) + dev.gemm_setup_s;  // Q·K^T and P·V, half each
      put(KernelName::kScores, KernelClass::kGemm, 0.5 * f.attn_core, 0, t, 2 * t, t);
      // Fused scale-mask-softmax reads and writes the scores; dropout adds a mask and a copy.
      // Unfused: scale, mask and softmax each read and write them (3 kernels, and dropout a 4th).
      const double bytes = scores * ((fused ? 2 : 6) * e + (m.dropout ? 2 * e + 1 : 0.0));
      put(KernelName::kSoftmax, KernelClass::kElementwise, 0, bytes, dev.stream_seconds(bytes),
          dev.stream_seconds(2 * bytes), 0, fused ? 1 : (m.dropout ? 4 : 3));
      put(KernelName::kAttnV, KernelClass::kGemm, 0.5 * f.attn_core, 0, t, 2 * t, t);
    }
  };
  auto seconds = [&](int from, int to) {
    double t = 0;
    for (int i = from; i < to; ++i) t += L.fwd[i].fwd_s + L.fwd[i].bwd_s;
    return t;
  };
  L.attention_first = L.count;
  attention(d);
  if (partner.device && partner.link_rate > 0) {
    // Q, K and V go to the partner and the output comes back; backward sends the output's
    // gradient and takes back those of Q, K and V.
    const double qkv = tokens * (m.q_dim() + 2.0 * m.kv_dim()) / tp * e, out = tokens * m.v_dim() / tp * e;
    const double in_s = qkv / partner.link_rate, out_s = out / partner.link_rate;
    const int own_end = L.count;
    attention(*partner.device);
    if (!partner.automatic ||
        seconds(own_end, L.count) + 2 * (in_s + out_s) < seconds(L.attention_first, own_end)) {
      std::copy(L.fwd.begin() + own_end, L.fwd.begin() + L.count, L.fwd.begin() + L.attention_first);
      L.count = L.attention_first + (L.count - own_end);
      L.attention_on_partner = true;
      L.partner_kind = partner.device->kind;
      L.partner_in_s = in_s;
      L.partner_out_s = out_s;
      L.partner_grad_in_s = out_s;
      L.partner_grad_out_s = in_s;
    } else {
      L.count = own_end;
    }
  }
  L.attention_last = L.count - 1;
  gemm(KernelName::kProj, out_proj, H / static_cast<std::int64_t>(tp),
       m.v_dim() / static_cast<std::int64_t>(tp));
  tp_fwd(sp ? TpCollective::kReduceScatter : TpCollective::kAllReduce);
  tp_bwd(sp ? L.count - 1 : norm1, sp ? TpCollective::kAllGather : TpCollective::kAllReduce);
  residual(KernelName::kResidual1);
  norm(KernelName::kNorm2);
  const int norm2 = L.count - 1;
  if (sp) {
    tp_fwd(TpCollective::kAllGather);
    tp_bwd(norm2, TpCollective::kReduceScatter);
  }
  double ffn = static_cast<double>(m.ffn_hidden);
  if (moe) {
    ffn = static_cast<double>(m.moe.expert_ffn_hidden) * (m.moe.top_k + m.moe.shared_experts);
    gemm(KernelName::kRouter, f.router, m.moe.experts, H);
    elementwise(KernelName::kPermute, 2 * tokens * m.hidden * e / tp);
    if (p.ep > 1) {
      L.moe_dispatch_after = L.count - 1;
      L.ep_bytes = tokens / (s.sp ? tp : 1.0) * m.moe.top_k * m.hidden * e;
    }
  }
  const double up_mats = m.mlp == MlpKind::kSwiglu ? 2.0 : 1.0;
  const double up = 2.0 * tokens * m.hidden * ffn * up_mats / tp;
  gemm(KernelName::kMlpUp, up, static_cast<std::int64_t>(ffn * up_mats / tp), H);
  const bool split_glu = m.mlp == MlpKind::kSwiglu && !fused;
  elementwise(KernelName::kActivation,
              (m.mlp == MlpKind::kSwiglu ? (split_glu ? 5.0 : 3.0) : 2.0) * tokens * ffn / tp * e,
              split_glu ? 2 : 1);
  if (d.activation_element_s > 0) {  // an exponential or tanh per output element, each way
    KernelCost& act = L.fwd[L.count - 1];
    act.fwd_s += tokens * ffn / tp * d.activation_element_s;
    act.bwd_s += tokens * ffn / tp * d.activation_element_s;
  }
  gemm(KernelName::kMlpDown, f.mlp - up, H, static_cast<std::int64_t>(ffn / tp));
  if (moe) {
    if (p.ep > 1) L.moe_combine_after = L.count - 1;
    elementwise(KernelName::kUnpermute, 2 * tokens * m.hidden * e / tp);
  }
  tp_fwd(sp ? TpCollective::kReduceScatter : TpCollective::kAllReduce);
  tp_bwd(sp ? L.count - 1 : norm2, sp ? TpCollective::kAllGather : TpCollective::kAllReduce);
  residual(KernelName::kResidual2);
  if (p.tp <= 1) L.tp_count = L.tp_bwd_count = 0;
  L.tp_bytes = tokens * m.hidden * e;
  return L;
}

HeadCosts head_costs(const ModelSpec& m, const DeviceSpec& d, const Plan& p, const LayerShape& s) {
  HeadCosts h;
  const double gemm_rate = d.peak(compute_dtype(p.precision, d)) * d.gemm_efficiency;
  const double launch = p.cuda_graphs ? d.graph_kernel_overhead_s : d.kernel_overhead_s;
  const double tokens = s.batch * s.seq;
  const double logits = tokens * static_cast<double>(m.vocab) / p.tp;  // this rank's slice
  h.tp = p.tp > 1;
  h.sp = h.tp && s.sp;
  // The final norm, as a layer's: fused, read and write b*s*h (eager RMSNorm: 7 passes in 5
  // kernels); backward twice that.
  const NormPasses n = norm_passes(m, p);
  h.norm_bytes = n.passes * tokens * m.hidden / (h.sp ? p.tp : 1) * s.bytes_per_element;
  h.norm_fwd_s = d.stream_seconds(h.norm_bytes) + n.kernels * launch;
  h.norm_bwd_s = d.stream_seconds(2 * h.norm_bytes) + 2 * n.kernels * launch;
  // fp32 cross-entropy: the forward reads the logits, the backward writes their gradient and
  // reads what it needs (12 bytes per logit in all).
  h.fwd_flops = logits_flops(m, s);
  h.fwd_bytes = 4.0 * logits;
  h.bwd_bytes = 8.0 * logits;
  const double head_weight = s.bytes_per_element * m.hidden * static_cast<double>(m.vocab) / p.tp;
  // The softmax's exponential per logit: in the forward.
  h.fwd_s = h.fwd_flops / gemm_rate + d.gemm_setup_s + d.weight_pass_s(head_weight, false) +
            d.stream_seconds(h.fwd_bytes) + logits * d.activation_element_s + launch;
  h.bwd_s = 2 * (h.fwd_flops / gemm_rate + d.gemm_setup_s) + d.weight_pass_s(head_weight, true) +
            d.stream_seconds(h.bwd_bytes) + 2 * launch;
  if (h.tp) {
    h.grad_bytes = 8.0 * logits;  // read and write the gradient once more
    h.grad_s = d.stream_seconds(h.grad_bytes) + launch;
    h.stats_bytes = 3.0 * 4.0 * tokens * p.tp;
    h.hidden_bytes = tokens * m.hidden * s.bytes_per_element;
  }
  return h;
}

}  // namespace foresight
