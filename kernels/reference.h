// CPU reference kernels: the contract every CUDA kernel in kernels/*.cu implements (llm.c style:
// `rmsnorm_forward_cpu` here, `rmsnorm_forward` on the device). The CPU runtime backend runs these
// directly (GEMMs go to Eigen); the GPU tests compare each CUDA kernel against them.
//
//   std::vector<float> out(rows * cols), rstd(rows);
//   rmsnorm_forward_cpu(out.data(), rstd.data(), x.data(), weight.data(), rows, cols, 1e-5f);
//
// Conventions: row-major, fp32, sizes in elements. "Accumulate" outputs (weight gradients) are
// added to, so gradient accumulation over micro-batches needs no extra pass; every other output is
// overwritten. Attention tensors use the fused QKV layout a QKV GEMM produces: each token's row is
// [q heads | k heads | v heads], each head `head_dim` wide.
#pragma once

#include <cstddef>
#include <cstdint>

namespace foresight::kernels {

// Shape of a causal self-attention call on one device's heads (grouped-query: q_heads is a
// multiple of kv_heads; query head h reads kv head h / (q_heads / kv_heads)).
struct AttentionShape {
  int batch = 1, seq = 1, q_heads = 1, kv_heads = 1, head_dim = 1;
  int qkv_width() const { return (q_heads + 2 * kv_heads) * head_dim; }
  std::size_t tokens() const { return static_cast<std::size_t>(batch) * seq; }
  std::size_t score_elems() const { return static_cast<std::size_t>(batch) * q_heads * seq * seq; }
};

// --- embedding --------------------------------------------------------------------------------
// out[r, :] = table[ids[r], :] (rows x hidden); backward dtable[ids[r], :] += dout[r, :]
// (accumulated; repeated ids add up).
void embedding_forward_cpu(float* out, const float* table, const int* ids, int rows, int hidden);
void embedding_backward_cpu(float* dtable, const float* dout, const int* ids, int rows, int hidden);

// --- linear layers --------------------------------------------------------------------------
// out[rows x n] = in[rows x k] * w[k x n] (the weight stored input-major, as the runtime keeps
// it). The CPU runtime runs the same contract on Eigen (runtime/backends/cpu_fast.h).
void matmul_forward_cpu(float* out, const float* in, const float* w, int rows, int k, int n);
// din = dout * w^T (overwritten); dw += in^T * dout (accumulated).
void matmul_backward_cpu(float* din, float* dw, const float* dout, const float* in, const float* w, int rows,
                         int k, int n);

// --- normalisation --------------------------------------------------------------------------
// out = x / rms(x) * weight; rstd[r] = 1 / sqrt(mean(x^2) + eps) is saved for the backward.
void rmsnorm_forward_cpu(float* out, float* rstd, const float* x, const float* weight, int rows, int cols,
                         float eps);
// dx overwritten; dweight accumulated.
void rmsnorm_backward_cpu(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                          const float* rstd, int rows, int cols);
// out = (x - mean) * rstd * weight + bias.
void layernorm_forward_cpu(float* out, float* mean, float* rstd, const float* x, const float* weight,
                           const float* bias, int rows, int cols, float eps);
// dx overwritten; dweight, dbias accumulated.
void layernorm_backward_cpu(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                            const float* weight, const float* mean, const float* rstd, int rows, int cols);

// --- elementwise ----------------------------------------------------------------------------
void residual_forward_cpu(float* out, const float* a, const float* b, std::size_t n);
// out = gelu(x + bias) (tanh approximation, as GPT-2); bias may be null. x is [rows, cols].
void bias_gelu_forward_cpu(float* out, const float* x, const float* bias, int rows, int cols);
// dx = dout * gelu'(x + bias); dbias (if not null) accumulated with the column sums of dx.
void bias_gelu_backward_cpu(float* dx, float* dbias, const float* x, const float* bias, const float* dout,
                            int rows, int cols);
// gate_up is [rows, 2*cols]: gate in the first `cols` columns, up in the rest. out = silu(gate) * up.
void swiglu_forward_cpu(float* out, const float* gate_up, int rows, int cols);
void swiglu_backward_cpu(float* dgate_up, const float* gate_up, const float* dout, int rows, int cols);
// Rotary position embedding (rotate-half convention, as Llama) on the q and k heads of a fused QKV
// buffer, in place. `inverse` applies the transposed rotation (the backward of the forward).
void rope_cpu(float* qkv, const AttentionShape& s, float theta, bool inverse);
// rope_cpu's two steps, for a caller that keeps the table: the cosine and sine of each position's
// angle per frequency ([seq][head_dim / 2] each), and the rotation with them.
void rope_table(float* cos, float* sin, int seq, int head_dim, float theta);
void rope_rotate(float* qkv, const AttentionShape& s, const float* cos, const float* sin, bool inverse);

// --- attention (causal, grouped-query) --------------------------------------------------------
// Unfused, in the three steps an unfused implementation launches:
//   scores = scale * Q K^T (upper triangle left at 0), probs = causal softmax(scores), out = P V.
// scores/probs are [batch, q_heads, seq, seq]; out is [tokens, q_heads * head_dim].
void attention_scores_cpu(float* scores, const float* qkv, const AttentionShape& s);
void causal_softmax_forward_cpu(float* probs, const float* scores, const AttentionShape& s);
void attention_values_cpu(float* out, const float* probs, const float* qkv, const AttentionShape& s);
// Backward of each step. dqkv is overwritten by attention_values_backward (its v part) and
// attention_scores_backward (its q and k parts); call values first, then scores.
void attention_values_backward_cpu(float* dprobs, float* dqkv, const float* dout, const float* probs,
                                   const float* qkv, const AttentionShape& s);
void causal_softmax_backward_cpu(float* dscores, const float* dprobs, const float* probs,
                                 const AttentionShape& s);
void attention_scores_backward_cpu(float* dqkv, const float* dscores, const float* qkv,
                                   const AttentionShape& s);
// The whole attention (the fused kernel's contract): probs are still produced for the backward.
void attention_forward_cpu(float* out, float* probs, const float* qkv, const AttentionShape& s);
// scratch: two buffers of s.score_elems() floats.
void attention_backward_cpu(float* dqkv, float* scratch_a, float* scratch_b, const float* dout,
                            const float* probs, const float* qkv, const AttentionShape& s);

// --- loss -------------------------------------------------------------------------------------
// losses[r] = -log softmax(logits[r])[targets[r]].
void crossentropy_forward_cpu(float* losses, const float* logits, const int* targets, int rows, int vocab);
// dlogits = (softmax(logits) - onehot(target)) * dloss (dloss: d total_loss / d losses[r], the same for all
// r).
void crossentropy_backward_cpu(float* dlogits, const float* logits, const int* targets, float dloss, int rows,
                               int vocab);

// The vocabulary-parallel cross-entropy's gathers on a slice [first, first + cols) of the
// vocabulary: out[r] = logits[r, targets[r] - first] where this slice holds the target, else
// -infinity; and x[r, targets[r] - first] += value where it holds it.
void target_logits_cpu(float* out, const float* logits, const int* targets, int first, int rows, int cols);
// Each row's maximum m and sum of exp(logit - m), the exponentials written to `exps`; and
// x[r, :] *= scale[r].
void softmax_row_stats_cpu(float* row_max, float* row_sum, float* exps, const float* logits, int rows,
                           int cols);
void scale_rows_cpu(float* x, const float* scale, int rows, int cols);
void add_at_targets_cpu(float* x, const int* targets, int first, int rows, int cols, float value);

// --- optimizer and mixed precision ----------------------------------------------------------------
struct AdamWConfig {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};
// One AdamW step (decoupled weight decay, bias-corrected; `step` counts from 1). Gradients are
// multiplied by `grad_scale` first (1 / loss scale, or a clipping factor).
void adamw_cpu(float* params, float* m, float* v, const float* grads, std::size_t n, const AdamWConfig& c,
               int step, float grad_scale);
// True if any gradient is not finite or exceeds `limit` in magnitude (65504: it would overflow fp16).
bool has_overflow_cpu(const float* grads, std::size_t n, float limit);

// --- gradient compression -------------------------------------------------------------------------
// Symmetric int8 per block of `block` elements: scale = absmax / 127, q = round(x / scale).
// `scales` holds ceil(n / block) floats.
void quantize_int8_cpu(std::int8_t* q, float* scales, const float* x, std::size_t n, int block);
void dequantize_int8_cpu(float* x, const std::int8_t* q, const float* scales, std::size_t n, int block);
// Top-k sparsification with error feedback: acc = grad + residual; the k entries of largest |acc|
// are sent (indices ascending, values), and residual = acc with those k entries zeroed. Ties break
// toward the lower index. Returns the number written (min(k, n)).
std::size_t topk_sparsify_cpu(std::int32_t* indices, float* values, float* residual, const float* grad,
                              std::size_t n, std::size_t k);

}  // namespace foresight::kernels
