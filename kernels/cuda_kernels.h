// CUDA kernels: one device implementation per CPU reference in kernels/reference.h, with the same
// contract and argument order minus the `_cpu` suffix. Pointers are device pointers; every call
// is asynchronous on `stream` (the last argument) and returns as soon as the work is queued.
// Errors (a bad launch, a failed allocation) throw `CudaError` (kernels/cuda_check.h) with the
// file and line; nothing here prints or exits.
//
//   // x, w, out: device buffers of rows * cols (w: cols) bf16 values; rstd: rows floats.
//   rmsnorm_forward(out, rstd, x, w, rows, cols, 1e-5f, stream);
//   rmsnorm_backward(dx, dweight, dout, x, w, rstd, rows, cols, stream);   // dweight: fp32, +=
//
// Precision: the memory-bound kernels of mixed-precision training (norms, residual, GeLU, SwiGLU,
// residual + RMSNorm) have fp32 and bf16 (`__nv_bfloat16`) overloads. The bf16 ones read and write
// bf16 activations and parameters but accumulate in fp32, keep per-row statistics (mean, rstd) in
// fp32, and accumulate weight gradients into fp32 buffers. Everything else is fp32.
//
// Weight-gradient reductions use float atomics, so their last bits may vary from run to run.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda_check.h"
#include "kernels/reference.h"

namespace foresight::kernels {

// --- embedding (kernels/elementwise.cu) ------------------------------------------------------------
// ids: device ints. The backward adds with float atomics (repeated ids in any order).
void embedding_forward(float* out, const float* table, const int* ids, int rows, int hidden,
                       cudaStream_t stream);
void embedding_forward(__nv_bfloat16* out, const __nv_bfloat16* table, const int* ids, int rows, int hidden,
                       cudaStream_t stream);
void embedding_backward(float* dtable, const float* dout, const int* ids, int rows, int hidden,
                        cudaStream_t stream);
void embedding_backward(float* dtable, const __nv_bfloat16* dout, const int* ids, int rows, int hidden,
                        cudaStream_t stream);

// --- linear layers (kernels/matmul.cu) -------------------------------------------------------------
// cuBLAS GEMMs (cublasGemmEx, fp32 accumulation; fp32 operands stay fp32 unless the handle's math
// mode allows TF32) on the handle's stream: set it with
// cublasSetStream to the stream the other kernels run on. The bf16 overloads take bf16 operands
// and round the output (and din) to bf16 once; their weight gradient accumulates in fp32.
void matmul_forward(float* out, const float* in, const float* w, int rows, int k, int n,
                    cublasHandle_t handle);
void matmul_forward(__nv_bfloat16* out, const __nv_bfloat16* in, const __nv_bfloat16* w, int rows, int k,
                    int n, cublasHandle_t handle);
void matmul_backward(float* din, float* dw, const float* dout, const float* in, const float* w, int rows,
                     int k, int n, cublasHandle_t handle);
void matmul_backward(__nv_bfloat16* din, float* dw, const __nv_bfloat16* dout, const __nv_bfloat16* in,
                     const __nv_bfloat16* w, int rows, int k, int n, cublasHandle_t handle);
// bf16 operands, fp32 outputs (the runtime's bf16 GEMMs between fp32 tensors: autocast for matmuls,
// without rounding the output): out and din are written in fp32, dw accumulates in fp32.
void matmul_forward(float* out, const __nv_bfloat16* in, const __nv_bfloat16* w, int rows, int k, int n,
                    cublasHandle_t handle);
void matmul_backward(float* din, float* dw, const __nv_bfloat16* dout, const __nv_bfloat16* in,
                     const __nv_bfloat16* w, int rows, int k, int n, cublasHandle_t handle);

// --- normalisation (kernels/norm.cu) ------------------------------------------------------------
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* weight, int rows, int cols,
                     float eps, cudaStream_t stream);
void rmsnorm_forward(__nv_bfloat16* out, float* rstd, const __nv_bfloat16* x, const __nv_bfloat16* weight,
                     int rows, int cols, float eps, cudaStream_t stream);
void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                      const float* rstd, int rows, int cols, cudaStream_t stream);
void rmsnorm_backward(__nv_bfloat16* dx, float* dweight, const __nv_bfloat16* dout, const __nv_bfloat16* x,
                      const __nv_bfloat16* weight, const float* rstd, int rows, int cols,
                      cudaStream_t stream);
void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight,
                       const float* bias, int rows, int cols, float eps, cudaStream_t stream);
void layernorm_forward(__nv_bfloat16* out, float* mean, float* rstd, const __nv_bfloat16* x,
                       const __nv_bfloat16* weight, const __nv_bfloat16* bias, int rows, int cols, float eps,
                       cudaStream_t stream);
void layernorm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                        const float* weight, const float* mean, const float* rstd, int rows, int cols,
                        cudaStream_t stream);
void layernorm_backward(__nv_bfloat16* dx, float* dweight, float* dbias, const __nv_bfloat16* dout,
                        const __nv_bfloat16* x, const __nv_bfloat16* weight, const float* mean,
                        const float* rstd, int rows, int cols, cudaStream_t stream);

// --- elementwise (kernels/elementwise.cu) ---------------------------------------------------------
void residual_forward(float* out, const float* a, const float* b, std::size_t n, cudaStream_t stream);
void residual_forward(__nv_bfloat16* out, const __nv_bfloat16* a, const __nv_bfloat16* b, std::size_t n,
                      cudaStream_t stream);
// bias may be null. dx may alias dout (each element is read before it is written).
void bias_gelu_forward(float* out, const float* x, const float* bias, int rows, int cols,
                       cudaStream_t stream);
void bias_gelu_forward(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* bias, int rows,
                       int cols, cudaStream_t stream);
void bias_gelu_backward(float* dx, float* dbias, const float* x, const float* bias, const float* dout,
                        int rows, int cols, cudaStream_t stream);
// dbias accumulates the fp32 column sums of dx before dx is rounded to bf16.
void bias_gelu_backward(__nv_bfloat16* dx, float* dbias, const __nv_bfloat16* x, const __nv_bfloat16* bias,
                        const __nv_bfloat16* dout, int rows, int cols, cudaStream_t stream);
void swiglu_forward(float* out, const float* gate_up, int rows, int cols, cudaStream_t stream);
void swiglu_forward(__nv_bfloat16* out, const __nv_bfloat16* gate_up, int rows, int cols,
                    cudaStream_t stream);
void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int rows, int cols,
                     cudaStream_t stream);
void swiglu_backward(__nv_bfloat16* dgate_up, const __nv_bfloat16* gate_up, const __nv_bfloat16* dout,
                     int rows, int cols, cudaStream_t stream);
void rope(float* qkv, const AttentionShape& s, float theta, bool inverse, cudaStream_t stream);

// --- attention (kernels/attention.cu) -------------------------------------------------------------
// Unfused steps, each a batched, causally masked tiled product in fp32; tiles entirely above the
// diagonal are skipped. Shapes and layouts as in reference.h.
void attention_scores(float* scores, const float* qkv, const AttentionShape& s, cudaStream_t stream);
// probs may alias scores (row by row in place).
void causal_softmax_forward(float* probs, const float* scores, const AttentionShape& s, cudaStream_t stream);
void attention_values(float* out, const float* probs, const float* qkv, const AttentionShape& s,
                      cudaStream_t stream);
void attention_values_backward(float* dprobs, float* dqkv, const float* dout, const float* probs,
                               const float* qkv, const AttentionShape& s, cudaStream_t stream);
void causal_softmax_backward(float* dscores, const float* dprobs, const float* probs, const AttentionShape& s,
                             cudaStream_t stream);
void attention_scores_backward(float* dqkv, const float* dscores, const float* qkv, const AttentionShape& s,
                               cudaStream_t stream);
void attention_forward(float* out, float* probs, const float* qkv, const AttentionShape& s,
                       cudaStream_t stream);
void attention_backward(float* dqkv, float* scratch_a, float* scratch_b, const float* dout,
                        const float* probs, const float* qkv, const AttentionShape& s, cudaStream_t stream);

// --- loss (kernels/loss.cu) -----------------------------------------------------------------------
void crossentropy_forward(float* losses, const float* logits, const int* targets, int rows, int vocab,
                          cudaStream_t stream);
// dlogits may alias logits.
void crossentropy_backward(float* dlogits, const float* logits, const int* targets, float dloss, int rows,
                           int vocab, cudaStream_t stream);
// The vocabulary-parallel cross-entropy's pieces on this rank's slice of the vocabulary.
void softmax_row_stats(float* row_max, float* row_sum, float* exps, const float* logits, int rows, int cols,
                       cudaStream_t stream);
void target_logits(float* out, const float* logits, const int* targets, int first, int rows, int cols,
                   cudaStream_t stream);
void add_at_targets(float* x, const int* targets, int first, int rows, int cols, float value,
                    cudaStream_t stream);
// scale: device, one factor per row.
void scale_rows(float* x, const float* scale, int rows, int cols, cudaStream_t stream);

// --- optimizer and mixed precision (kernels/adamw.cu) ----------------------------------------------
// fp32 master weights and moments; gradients fp32 or bf16.
void adamw(float* params, float* m, float* v, const float* grads, std::size_t n, const AdamWConfig& c,
           int step, float grad_scale, cudaStream_t stream);
void adamw(float* params, float* m, float* v, const __nv_bfloat16* grads, std::size_t n, const AdamWConfig& c,
           int step, float grad_scale, cudaStream_t stream);
// The device answer to has_overflow_cpu: *flag (device int) is set to 1 if any gradient is not
// finite or exceeds `limit` in magnitude, else to 0. Read it back when the step needs to decide.
void has_overflow(const float* grads, std::size_t n, float limit, int* flag, cudaStream_t stream);
void has_overflow(const __nv_bfloat16* grads, std::size_t n, float limit, int* flag, cudaStream_t stream);

// --- gradient compression (kernels/compression.cu) -------------------------------------------------
void quantize_int8(std::int8_t* q, float* scales, const float* x, std::size_t n, int block,
                   cudaStream_t stream);
void dequantize_int8(float* x, const std::int8_t* q, const float* scales, std::size_t n, int block,
                     cudaStream_t stream);
// Exact top-k by |grad + residual| (radix select on the magnitude bits, then a stable compaction,
// so indices come out ascending and ties go to the lower index). Needs n < 2^31. Allocates its
// scratch (about 8 bytes per element) stream-ordered with cudaMallocAsync. Returns min(k, n).
std::size_t topk_sparsify(std::int32_t* indices, float* values, float* residual, const float* grad,
                          std::size_t n, std::size_t k, cudaStream_t stream);

// --- helpers with no reference.h counterpart (CPU references in tests/kernels/) -------------------
// Type conversion (round to nearest even to bf16).
void convert(float* out, const __nv_bfloat16* in, std::size_t n, cudaStream_t stream);
void convert(__nv_bfloat16* out, const float* in, std::size_t n, cudaStream_t stream);
// out[r, c] = x[r, c] + bias[c] (a linear layer's bias after its GEMM). out may alias x.
void bias_forward(float* out, const float* x, const float* bias, int rows, int cols, cudaStream_t stream);
void bias_forward(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* bias, int rows, int cols,
                  cudaStream_t stream);
// dbias[c] += sum_r dout[r, c] (fp32 accumulation).
void bias_backward(float* dbias, const float* dout, int rows, int cols, cudaStream_t stream);
void bias_backward(float* dbias, const __nv_bfloat16* dout, int rows, int cols, cudaStream_t stream);

}  // namespace foresight::kernels
