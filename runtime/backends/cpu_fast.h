// The CPU backend's fast paths for the kernels where the straightforward references are slow:
// attention as Eigen GEMMs per (sequence, head) and a fused softmax-cross-entropy forward+backward.
// Same contracts as kernels/reference.h (tests/runtime compares them); the references stay the
// oracle for the CUDA kernels.
#pragma once

#include <vector>

#include "kernels/reference.h"

namespace foresight::runtime {

// out[rows x n] = in[rows x k] * w[k x n] (Eigen, row-major).
void gemm_forward(float* out, const float* in, const float* w, int rows, int k, int n);
// din = dout * w^T (overwritten); dw += in^T * dout.
void gemm_backward(float* din, float* dw, const float* dout, const float* in, const float* w, int rows, int k,
                   int n);

// = kernels::rmsnorm_forward_cpu / rmsnorm_backward_cpu (dweight accumulated), vectorised.
void rmsnorm_forward_fast(float* out, float* rstd, const float* x, const float* weight, int rows, int cols,
                          float eps);
void rmsnorm_backward_fast(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                           const float* rstd, int rows, int cols);
// = kernels::swiglu_forward_cpu / swiglu_backward_cpu and bias_gelu_*_cpu without bias, vectorised
// (Eigen's SIMD exp and tanh).
void swiglu_forward_fast(float* out, const float* gate_up, int rows, int cols);
void swiglu_backward_fast(float* dgate_up, const float* gate_up, const float* dout, int rows, int cols);
// Eager (unfused) RMSNorm and SwiGLU, for plans with kernel_fusion off: one pass over memory per
// operator, each writing its own intermediate tensor, as PyTorch eager code runs them (the
// passes sim/analytic/layer_ops.cpp counts for unfused chains). Same contracts as the _fast ones.
//  - RMSNorm forward, x * rsqrt(mean(x^2) + eps) * w: pow (read x, write x^2), mean (read, one
//    value per row), rsqrt (per row), multiply (read x, write y), scale (read y, write out): 7
//    passes of the tensor where the fused kernel makes 2. Backward, as autograd replays the chain
//    (y recomputed from x and rstd rather than kept): y (2 passes), the weight's gradient (2),
//    dy = dout * w (2), dx = dy * rstd (2), the row sums of dy * x (2), d(x^2) expanded (1),
//    2 x d(x^2) (2), the sum of the two input gradients (3): 16 passes.
//  - SwiGLU forward, silu(gate) * up: silu (read, write s), multiply (read s and up, write): 5
//    passes of the output's size where the fused kernel makes 3. Backward (s recomputed, not
//    kept): sigmoid(gate) (2), s (3), d(up) = dout * s (3), d(s) = dout * up (3), silu's backward
//    (4): 15, with one exponential per element as the fused kernel.
void rmsnorm_forward_eager(float* out, float* rstd, const float* x, const float* weight, int rows, int cols,
                           float eps);
void rmsnorm_backward_eager(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                            const float* rstd, int rows, int cols);
void swiglu_forward_eager(float* out, const float* gate_up, int rows, int cols);
void swiglu_backward_eager(float* dgate_up, const float* gate_up, const float* dout, int rows, int cols);
void gelu_forward_fast(float* out, const float* x, std::size_t n);
void gelu_backward_fast(float* dx, const float* x, const float* dout, std::size_t n);

// = kernels::adamw_cpu, vectorised.
void adamw_fast(float* params, float* m, float* v, const float* grads, std::size_t n,
                const kernels::AdamWConfig& c, int step, float grad_scale);

// = kernels::attention_forward_cpu.
void attention_forward_fast(float* out, float* probs, const float* qkv, const kernels::AttentionShape& s);
// = kernels::attention_backward_cpu (dqkv overwritten); `scratch` holds seq * seq floats.
void attention_backward_fast(float* dqkv, float* scratch, const float* dout, const float* probs,
                             const float* qkv, const kernels::AttentionShape& s);
// Losses of each row (= kernels::crossentropy_forward_cpu) and, in the same pass, the logits'
// gradient (= kernels::crossentropy_backward_cpu with `dloss`). Returns the sum of the losses.
// Each row's maximum m and sum of exp(logit - m), the exponentials written to `exps` (the
// vocabulary-parallel cross-entropy's first pass, on this rank's slice).
void softmax_row_stats(float* row_max, float* row_sum, float* exps, const float* logits, int rows, int cols);
// x[r, :] *= scale[r].
void scale_rows(float* x, const float* scale, int rows, int cols);
double crossentropy_fused(float* losses, float* dlogits, const float* logits, const int* targets, float dloss,
                          int rows, int vocab);

// = kernels::rope_cpu, bit for bit (its rope_table and rope_rotate), with the table of cosines and
// sines per position and frequency made once per shape and kept, as frameworks keep theirs (Hugging
// Face's and Megatron's rotary embeddings cache it); the reference makes it per call, and its sines
// and cosines cost more than the rotation.
class RopeTable {
 public:
  void apply(float* qkv, const kernels::AttentionShape& s, float theta, bool inverse);

 private:
  int seq_ = 0, head_dim_ = 0;
  float theta_ = 0;
  std::vector<float> cos_, sin_;  // [seq][head_dim / 2]
};

}  // namespace foresight::runtime
