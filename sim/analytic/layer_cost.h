// FLOPs, memory traffic and activation memory of one transformer layer for one micro-batch on one
// device, as closed forms. The analytic model and the tests both start from these numbers.
//
//   LayerShape shape{.batch = 1, .seq = 2048, .kv_seq = 2048, .tp = 8, .sp = true};
//   LayerFlops f = dense_layer_flops(model, shape);   // forward FLOPs per device
//   double act = layer_activation_bytes(model, shape, Recompute::kSelective, true);
#pragma once

#include <cstdint>
#include <string>

#include "sim/spec/model.h"
#include "sim/spec/plan.h"

namespace foresight {

// What one device sees of one layer for one micro-batch.
struct LayerShape {
  double batch = 1;   // sequences in the micro-batch
  double seq = 1;     // query tokens per sequence on this device (seq_len / cp)
  double kv_seq = 1;  // key tokens each query attends to (the full sequence)
  double tp = 1;      // tensor-parallel degree
  bool sp = false;    // sequence parallel: norms/dropout split across TP ranks too
  double bytes_per_element = 2;
  // The linear layers' saved inputs (0: bytes_per_element). FP8 (Transformer Engine) keeps them
  // as the FP8 copies its weight-gradient GEMMs read: one byte.
  double linear_input_bytes = 0;
  // MoE parallel folding (Plan::experts_folded() with tp > 1): an MoE layer's MLP has its own norm
  // and no TP collective, even in a ModelSpec::parallel_block model.
  bool experts_folded = false;
  // Plan::repeat_kv on a grouped-query model: the attention's K and V are heads-wide copies.
  bool repeat_kv = false;
  double linear_bytes() const { return linear_input_bytes > 0 ? linear_input_bytes : bytes_per_element; }
};

// The width of the K (and of the V) the attention kernel reads, per token, all heads: kv_heads x
// head_dim, or with LayerShape::repeat_kv every query head's (the copies repeat_kv makes).
double attention_kv_dim(const ModelSpec& m, const LayerShape& s);

// Forward FLOPs of one layer on one device (multiply-add = 2 FLOPs). Backward costs twice these
// for GEMMs; attention backward depends on the kernel (see attention_backward_factor).
struct LayerFlops {
  double attn_linear = 0;  // QKV (or MLA projections) and output projection
  double attn_core = 0;    // Q·K^T and P·V, full (non-causal) count, as Megatron and PaLM count
  double mlp = 0;          // dense MLP or the experts a token visits (routed top-k + shared)
  double router = 0;       // MoE gate
  double total() const { return attn_linear + attn_core + mlp + router; }
};

LayerFlops dense_layer_flops(const ModelSpec& m, const LayerShape& s);
LayerFlops moe_layer_flops(const ModelSpec& m, const LayerShape& s);
// Output logits (LM head) forward FLOPs for one micro-batch on one device.
double logits_flops(const ModelSpec& m, const LayerShape& s);

// What one layer drops after its forward and rebuilds in its backward, as a set of modules
// (Megatron-Core's --recompute-modules names):
//   core_attn  the s^2 score tensors (softmax output, dropout mask and output; unfused attention
//              only -- flash attention never stores them), re-running scores, softmax, attn_v
//   layernorm  the two norms' outputs (their inputs stay), re-running norm1 and norm2
//   act        the activation function's output (the second linear's input), re-running activation
//   mlp        the MLP's internals (activation inputs and the second linear's input), re-running
//              mlp_up and activation (mlp_down's output is not needed by the backward); implies act
//   moe_act    as act, in MoE layers only (their experts' activation)
//   mla_up_proj  multi-head latent attention's up-projections: their outputs, the core
//              attention's q, k and v at every head's width, are dropped (their inputs, the
//              compressed q and kv, stay), re-running the up-projection GEMMs
//   full       everything but the layer input, re-running the whole forward with its collectives
//   op_policy  torchtitan's op-level selective checkpointing (selective_ac_option "op", its
//              _custom_policy in torchtitan/models/llama3/infra/parallelize.py): inside each
//              block the outputs of the matmuls, the attention kernel and the collectives are
//              saved except every second matmul in call order (wq, wk, wv, wo, w1, w3, w2: wk, wo
//              and w3 re-run), and every other op (norms, RoPE, the activation, the residual
//              adds) re-runs. It keeps the block input, Q, V, the attention output, w1's and w2's
//              outputs; the backward re-runs the wk, wo and w3 GEMMs and the elementwise kernels.
// Plan::recompute none = {}, selective = {core_attn} (or Plan::recompute_modules), full = {full},
// selective-op = {op_policy}.
using RecomputeMask = std::uint8_t;
namespace recompute_module {
inline constexpr RecomputeMask kCoreAttn = 1, kLayernorm = 2, kAct = 4, kMlp = 8, kFull = 16, kOpPolicy = 32,
                               kMlaUpProj = 64, kMoeAct = 128;
}  // namespace recompute_module
// none -> {}, selective -> {core_attn}, full -> {full}, selective-op -> {op_policy}; optimal has
// no single set ({}).
RecomputeMask recompute_mask(Recompute r);
// The plan's: as above, but selective with Plan::recompute_modules is those modules.
RecomputeMask recompute_mask(const Plan& p);
// "none", "core_attn+layernorm", "full".
std::string recompute_mask_string(RecomputeMask mask);

// Activation bytes one layer keeps for backward, per micro-batch on one device. Without
// parallelism and with dropout this is Korthikanti et al. (2022) Eq. 1: s*b*h*(34 + 5*a*s/h);
// TP, SP, CP, GQA, SwiGLU and MoE generalise the same per-tensor accounting. The modules in
// `mask` are dropped (recomputed in the backward).
double layer_activation_bytes(const ModelSpec& m, const LayerShape& s, RecomputeMask mask,
                              bool flash_attention, bool moe_layer);
inline double layer_activation_bytes(const ModelSpec& m, const LayerShape& s, Recompute r,
                                     bool flash_attention, bool moe_layer) {
  return layer_activation_bytes(m, s, recompute_mask(r), flash_attention, moe_layer);
}

// Parameters of one layer held by one device (TP shard; experts divided by `ep` and by the
// experts' tensor-parallel degree `etp`, 0: tp).
double layer_params_per_device(const ModelSpec& m, bool moe_layer, double tp, double ep, double etp = 0);

}  // namespace foresight
