// FLOPs, memory traffic and activation memory of one transformer layer for one micro-batch on one
// device, as closed forms. The analytic model and the tests both start from these numbers.
//
//   LayerShape shape{.batch = 1, .seq = 2048, .kv_seq = 2048, .tp = 8, .sp = true};
//   LayerFlops f = dense_layer_flops(model, shape);   // forward FLOPs per device
//   double act = layer_activation_bytes(model, shape, Recompute::kSelective, true);
#pragma once

#include "sim/spec/model.h"
#include "sim/spec/plan.h"

namespace foresight {

// What one device sees of one layer for one micro-batch.
struct LayerShape {
  double batch = 1;      // sequences in the micro-batch
  double seq = 1;        // query tokens per sequence on this device (seq_len / cp)
  double kv_seq = 1;     // key tokens each query attends to (the full sequence)
  double tp = 1;         // tensor-parallel degree
  bool sp = false;       // sequence parallel: norms/dropout split across TP ranks too
  double bytes_per_element = 2;
};

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

// Bytes moved by the memory-bound (elementwise) kernels of one layer, forward, on one device:
// norms, residual adds, dropout, activation function and, without flash attention, the softmax
// over the s x s score matrix.
double layer_elementwise_bytes(const ModelSpec& m, const LayerShape& s, bool moe_layer,
                               bool flash_attention);

// Activation bytes one layer keeps for backward, per micro-batch on one device. Without
// parallelism and with dropout this is Korthikanti et al. (2022) Eq. 1: s*b*h*(34 + 5*a*s/h);
// TP, SP, CP, GQA, SwiGLU and MoE generalise the same per-tensor accounting.
double layer_activation_bytes(const ModelSpec& m, const LayerShape& s, Recompute r,
                              bool flash_attention, bool moe_layer);

// Parameters of one layer held by one device (TP shard; experts also divided by `ep`).
double layer_params_per_device(const ModelSpec& m, bool moe_layer, double tp, double ep);

}  // namespace foresight
