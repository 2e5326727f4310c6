// The CPU backend's fast paths for the kernels where the straightforward references are slow:
// attention as Eigen GEMMs per (sequence, head) and a fused softmax-cross-entropy forward+backward.
// Same contracts as kernels/reference.h (tests/runtime compares them); the references stay the
// oracle for the CUDA kernels.
#pragma once

#include "kernels/reference.h"

namespace foresight::runtime {

// out[rows x n] = in[rows x k] * w[k x n] (Eigen, row-major).
void gemm_forward(float* out, const float* in, const float* w, int rows, int k, int n);
// din = dout * w^T (overwritten); dw += in^T * dout.
void gemm_backward(float* din, float* dw, const float* dout, const float* in, const float* w, int rows, int k, int n);

// = kernels::rmsnorm_forward_cpu / rmsnorm_backward_cpu (dweight accumulated), vectorised.
void rmsnorm_forward_fast(float* out, float* rstd, const float* x, const float* weight, int rows, int cols, float eps);
void rmsnorm_backward_fast(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                           const float* rstd, int rows, int cols);
// = kernels::swiglu_forward_cpu / swiglu_backward_cpu and bias_gelu_*_cpu without bias, vectorised
// (Eigen's SIMD exp and tanh).
void swiglu_forward_fast(float* out, const float* gate_up, int rows, int cols);
void swiglu_backward_fast(float* dgate_up, const float* gate_up, const float* dout, int rows, int cols);
void gelu_forward_fast(float* out, const float* x, std::size_t n);
void gelu_backward_fast(float* dx, const float* x, const float* dout, std::size_t n);

// = kernels::adamw_cpu, vectorised.
void adamw_fast(float* params, float* m, float* v, const float* grads, std::size_t n, const kernels::AdamWConfig& c,
                int step, float grad_scale);

// = kernels::attention_forward_cpu.
void attention_forward_fast(float* out, float* probs, const float* qkv, const kernels::AttentionShape& s);
// = kernels::attention_backward_cpu (dqkv overwritten); `scratch` holds seq * seq floats.
void attention_backward_fast(float* dqkv, float* scratch, const float* dout, const float* probs, const float* qkv,
                             const kernels::AttentionShape& s);
// Losses of each row (= kernels::crossentropy_forward_cpu) and, in the same pass, the logits'
// gradient (= kernels::crossentropy_backward_cpu with `dloss`). Returns the sum of the losses.
// Each row's maximum m and sum of exp(logit - m), the exponentials written to `exps` (the
// vocabulary-parallel cross-entropy's first pass, on this rank's slice).
void softmax_row_stats(float* row_max, float* row_sum, float* exps, const float* logits, int rows, int cols);
// x[r, :] *= scale[r].
void scale_rows(float* x, const float* scale, int rows, int cols);
double crossentropy_fused(float* losses, float* dlogits, const float* logits, const int* targets, float dloss, int rows,
                          int vocab);

}  // namespace foresight::runtime
