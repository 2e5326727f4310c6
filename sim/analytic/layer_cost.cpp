// Closed forms for one layer: FLOPs, elementwise traffic, activation memory, parameters.
#include "sim/analytic/layer_cost.h"

#include <string_view>
#include <utility>

namespace foresight {

namespace {

double mlp_matrices(const ModelSpec& m) { return m.mlp == MlpKind::kSwiglu ? 3.0 : 2.0; }

double attention_matrix_params(const ModelSpec& m) {
  const double norm = m.norm == NormKind::kLayerNorm ? 2.0 * m.hidden : 1.0 * m.hidden;
  return m.attention_params() - norm;
}

double norm_params(const ModelSpec& m) {
  return m.norm == NormKind::kLayerNorm ? 2.0 * m.hidden : 1.0 * m.hidden;
}

}  // namespace

LayerFlops dense_layer_flops(const ModelSpec& m, const LayerShape& s) {
  const double tokens = s.batch * s.seq;
  LayerFlops f;
  f.attn_linear = 2.0 * tokens * attention_matrix_params(m) / s.tp;
  // Q·K^T over q/k head width, then P·V over the value head width.
  const double qk = static_cast<double>(m.q_dim()), v = static_cast<double>(m.v_dim());
  f.attn_core = 2.0 * tokens * s.kv_seq * (qk + v) / s.tp;
  f.mlp = 2.0 * tokens * mlp_matrices(m) * m.hidden * static_cast<double>(m.ffn_hidden) / s.tp;
  return f;
}

LayerFlops moe_layer_flops(const ModelSpec& m, const LayerShape& s) {
  LayerFlops f = dense_layer_flops(m, s);
  const double tokens = s.batch * s.seq;
  const double expert = mlp_matrices(m) * m.hidden * static_cast<double>(m.moe.expert_ffn_hidden);
  f.mlp = 2.0 * tokens * (m.moe.top_k + m.moe.shared_experts) * expert / s.tp;
  f.router = 2.0 * tokens * m.hidden * m.moe.experts;
  return f;
}

double logits_flops(const ModelSpec& m, const LayerShape& s) {
  return 2.0 * s.batch * s.seq * m.hidden * static_cast<double>(m.vocab) / s.tp;
}

RecomputeMask recompute_mask(Recompute r) {
  switch (r) {
    case Recompute::kSelective:
      return recompute_module::kCoreAttn;
    case Recompute::kFull:
      return recompute_module::kFull;
    case Recompute::kSelectiveOp:
      return recompute_module::kOpPolicy;
    default:
      return 0;
  }
}

namespace {
// The modules' bits and names: Plan::recompute_modules (kRecomputeModules) and the optimal
// choice's "act", in the order recompute_mask_string lists them.
constexpr std::pair<RecomputeMask, std::string_view> kModuleNames[] = {
    {recompute_module::kCoreAttn, "core_attn"},
    {recompute_module::kLayernorm, "layernorm"},
    {recompute_module::kAct, "act"},
    {recompute_module::kMlp, "mlp"},
    {recompute_module::kMoeAct, "moe_act"},
    {recompute_module::kMlaUpProj, "mla_up_proj"}};
}  // namespace

RecomputeMask recompute_mask(const Plan& p) {
  if (p.recompute != Recompute::kSelective || p.recompute_modules.empty()) return recompute_mask(p.recompute);
  RecomputeMask mask = 0;
  for (const std::string& name : p.recompute_modules)
    for (const auto& [bit, known] : kModuleNames)
      if (name == known) mask |= bit;
  return mask;
}

std::string recompute_mask_string(RecomputeMask mask) {
  if (mask & recompute_module::kFull) return "full";
  if (mask & recompute_module::kOpPolicy) return "op_policy";
  if (mask == 0) return "none";
  std::string out;
  for (const auto& [bit, name] : kModuleNames)
    if (mask & bit) out.append(out.empty() ? "" : "+").append(name);
  return out;
}

double attention_kv_dim(const ModelSpec& m, const LayerShape& s) {
  return static_cast<double>(s.repeat_kv ? m.q_dim() : m.kv_dim());
}

double layer_activation_bytes(const ModelSpec& m, const LayerShape& s, RecomputeMask mask,
                              bool flash_attention, bool moe_layer) {
  namespace rm = recompute_module;
  const double e = s.bytes_per_element, el = s.linear_bytes();
  const double sb = s.seq * s.batch;
  const double h = static_cast<double>(m.hidden);
  const double t = s.tp;
  // Tensors replicated across TP ranks without SP; split with SP.
  const double rep = s.sp ? t : 1.0;
  const double drop = m.dropout ? 1.0 : 0.0;
  if (mask & rm::kFull) return e * sb * h / rep;  // only the layer input is kept
  if (mask & rm::kOpPolicy) {
    // torchtitan's op policy keeps the saved ops' outputs: the block input, Q (wq), V (wv), the
    // attention output with its softmax statistics (fp32 per row), w1's output (the MoE experts':
    // the routed tokens' and the shared experts') and w2's (the MLP output). K, the output
    // projection, w3's output and every elementwise result are rebuilt in the backward.
    double ffn1 = static_cast<double>(m.ffn_hidden);
    if (moe_layer) ffn1 = static_cast<double>(m.moe.expert_ffn_hidden) * (m.moe.top_k + m.moe.shared_experts);
    double kept = e * sb * h / rep  // block input
                  + e * sb * (m.q_dim() + (m.mla.enabled() ? m.v_dim() : m.kv_dim()) + m.v_dim()) /
                        t              // Q, V, attention out
                  + e * sb * ffn1 / t  // w1's output
                  + e * sb * h / rep;  // w2's output
    // Unfused attention's batched matmuls and softmax are not saved ops: they re-run, keeping no
    // s^2 tensor.
    if (flash_attention) kept += 4.0 * s.batch * s.seq * m.heads / t;
    if (moe_layer)
      kept += e * sb * h * m.moe.top_k / t + 4.0 * sb * m.moe.experts;  // dispatched tokens, router
    return kept + drop * 2 * sb * h / rep;                              // dropout masks
  }
  const bool keep_norm_out = !(mask & rm::kLayernorm);
  const bool keep_act_in = !(mask & rm::kMlp);
  const bool keep_act_out = !(mask & (rm::kMlp | rm::kAct)) && !(moe_layer && (mask & rm::kMoeAct));

  // Attention block (Korthikanti et al. Sec. 4.1 generalised to GQA widths).
  double attn = 0;
  if (keep_norm_out) attn += el * sb * h / rep;  // norm output = QKV input
  if (m.mla.enabled()) {
    // Multi-head latent attention as Megatron-Core's MLASelfAttention runs it: the up-projections
    // keep their inputs, the compressed q and kv after their norms; the core attention keeps q and
    // k at every head's full width (no-RoPE and RoPE parts) and v, which mla_up_proj drops.
    const double qk_head = m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim;
    attn +=
        el * sb * (m.mla.q_lora_rank + m.mla.kv_lora_rank) / rep;  // q_lora_rank 0: q from the norm output
    if (!(mask & rm::kMlaUpProj)) attn += e * sb * (2.0 * m.heads * qk_head + m.v_dim()) / t;
  } else {
    // Q and K for Q·K^T, and V: the attention kernel saves the K and V it was given (repeat_kv's
    // heads-wide copies; the projections' own outputs are not kept).
    attn += e * sb * (m.q_dim() + attention_kv_dim(m, s)) / t;
    attn += e * sb * attention_kv_dim(m, s) / t;
  }
  attn += el * sb * m.v_dim() / t;  // output projection input
  attn += drop * sb * h / rep;      // attention dropout mask
  const bool keep_scores = !flash_attention && !(mask & rm::kCoreAttn);
  if (keep_scores) {
    // Softmax output (2 bytes), dropout mask (1) and dropout output (2): 5*a*s^2*b.
    attn += (e + (m.dropout ? 1 + e : 0.0)) * m.heads * s.seq * s.kv_seq * s.batch / t;
  } else if (flash_attention) {
    attn += 4.0 * s.batch * s.seq * m.heads / t;  // softmax statistics (fp32 per row)
  }
  // MLP block.
  double ffn = static_cast<double>(m.ffn_hidden);
  if (moe_layer) ffn = static_cast<double>(m.moe.expert_ffn_hidden) * (m.moe.top_k + m.moe.shared_experts);
  // First linear input (the norm's output; a parallel block's MLP shares the attention's, except
  // a folded MoE layer's, which has its own norm as the kernel list does).
  const bool parallel = m.parallel_block && !(moe_layer && s.experts_folded);
  double mlp = keep_norm_out && !parallel ? el * sb * h / rep : 0.0;
  if (keep_act_in) mlp += e * sb * ffn / t * (m.mlp == MlpKind::kSwiglu ? 2.0 : 1.0);  // activation input(s)
  if (keep_act_out) mlp += el * sb * ffn / t;                                          // second linear input
  mlp += drop * sb * h / rep;                                                          // dropout mask
  if (moe_layer)
    mlp += el * sb * h * m.moe.top_k / t + 4.0 * sb * m.moe.experts;  // dispatched tokens, router probs
  const double norms = (parallel ? 1 : 2) * e * sb * h / rep;         // inputs of the norms
  return attn + mlp + norms;
}

double layer_params_per_device(const ModelSpec& m, bool moe_layer, double tp, double ep, double etp) {
  const double attn = attention_matrix_params(m) / tp + norm_params(m);
  if (!moe_layer) return attn + (m.dense_mlp_params() - norm_params(m)) / tp + norm_params(m);
  const double experts = m.moe.experts * m.expert_params() / ((etp > 0 ? etp : tp) * ep);
  const double shared = m.moe.shared_experts * m.expert_params() / tp;
  return attn + experts + shared + 1.0 * m.hidden * m.moe.experts + norm_params(m);
}

}  // namespace foresight
