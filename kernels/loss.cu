// Cross-entropy over a vocabulary on the GPU (references: kernels/reference.cpp): one block per
// row; max, then the sum of exponentials, each a block reduction in fp32.
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_kernels.h"

namespace foresight::kernels {

using cuda_detail::block_max;
using cuda_detail::block_sum;
using cuda_detail::kThreads;

namespace {

// Returns the row's max and writes 1 / sum(exp(l - max)) to *inv_sum. Every thread must call it.
__device__ float row_softmax_stats(const float* l, int vocab, float* inv_sum) {
  float mx = -INFINITY;
  for (int c = threadIdx.x; c < vocab; c += blockDim.x) mx = fmaxf(mx, l[c]);
  mx = block_max(mx);
  float sum = 0.0f;
  for (int c = threadIdx.x; c < vocab; c += blockDim.x) sum += expf(l[c] - mx);
  *inv_sum = 1.0f / block_sum(sum);
  return mx;
}

// A target outside [0, vocab) has no defined loss: the row gets NaN rather than a wild read.
__global__ void crossentropy_forward_kernel(float* losses, const float* logits, const int* targets,
                                            int vocab) {
  const float* l = logits + static_cast<std::size_t>(blockIdx.x) * vocab;
  float inv_sum = 0.0f;
  const float mx = row_softmax_stats(l, vocab, &inv_sum);
  if (threadIdx.x != 0) return;
  const int t = targets[blockIdx.x];
  losses[blockIdx.x] = (t >= 0 && t < vocab) ? -logf(inv_sum) - (l[t] - mx) : NAN;
}

// dlogits may alias logits: the statistics are complete (block reductions) before any write, and
// each thread then reads an element just before it overwrites it.
__global__ void crossentropy_backward_kernel(float* dlogits, const float* logits, const int* targets,
                                             float dloss, int vocab) {
  const std::size_t off = static_cast<std::size_t>(blockIdx.x) * vocab;
  float inv_sum = 0.0f;
  const float mx = row_softmax_stats(logits + off, vocab, &inv_sum);
  const int t = targets[blockIdx.x];
  const bool valid = t >= 0 && t < vocab;
  for (int c = threadIdx.x; c < vocab; c += blockDim.x) {
    const float p = expf(logits[off + c] - mx) * inv_sum;
    dlogits[off + c] = valid ? (p - (c == t ? 1.0f : 0.0f)) * dloss : NAN;
  }
}

}  // namespace

void crossentropy_forward(float* losses, const float* logits, const int* targets, int rows, int vocab,
                          cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return;
  crossentropy_forward_kernel<<<rows, kThreads, 0, stream>>>(losses, logits, targets, vocab);
  FS_CUDA_CHECK_LAUNCH();
}

void crossentropy_backward(float* dlogits, const float* logits, const int* targets, float dloss, int rows,
                           int vocab, cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return;
  crossentropy_backward_kernel<<<rows, kThreads, 0, stream>>>(dlogits, logits, targets, dloss, vocab);
  FS_CUDA_CHECK_LAUNCH();
}

// --- the vocabulary-parallel cross-entropy's pieces ------------------------------------------------

namespace {

__global__ void softmax_row_stats_kernel(float* row_max, float* row_sum, float* exps, const float* logits,
                                         int cols) {
  const std::size_t off = static_cast<std::size_t>(blockIdx.x) * cols;
  float mx = -INFINITY;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) mx = fmaxf(mx, logits[off + c]);
  mx = block_max(mx);
  float sum = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float e = expf(logits[off + c] - mx);
    exps[off + c] = e;
    sum += e;
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) {
    row_max[blockIdx.x] = mx;
    row_sum[blockIdx.x] = sum;
  }
}

__global__ void target_logits_kernel(float* out, const float* logits, const int* targets, int first, int rows,
                                     int cols) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const int t = targets[r] - first;
  out[r] = (t >= 0 && t < cols) ? logits[static_cast<std::size_t>(r) * cols + t] : -INFINITY;
}

__global__ void add_at_targets_kernel(float* x, const int* targets, int first, int rows, int cols,
                                      float value) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const int t = targets[r] - first;
  if (t >= 0 && t < cols) x[static_cast<std::size_t>(r) * cols + t] += value;
}

__global__ void scale_rows_kernel(float* x, const float* scale, std::size_t n, int cols) {
  FS_GRID_STRIDE(i, n) x[i] *= scale[i / cols];
}

}  // namespace

void softmax_row_stats(float* row_max, float* row_sum, float* exps, const float* logits, int rows, int cols,
                       cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  softmax_row_stats_kernel<<<rows, kThreads, 0, stream>>>(row_max, row_sum, exps, logits, cols);
  FS_CUDA_CHECK_LAUNCH();
}

void target_logits(float* out, const float* logits, const int* targets, int first, int rows, int cols,
                   cudaStream_t stream) {
  if (rows <= 0) return;
  target_logits_kernel<<<(rows + kThreads - 1) / kThreads, kThreads, 0, stream>>>(out, logits, targets, first,
                                                                                  rows, cols);
  FS_CUDA_CHECK_LAUNCH();
}

void add_at_targets(float* x, const int* targets, int first, int rows, int cols, float value,
                    cudaStream_t stream) {
  if (rows <= 0) return;
  add_at_targets_kernel<<<(rows + kThreads - 1) / kThreads, kThreads, 0, stream>>>(x, targets, first, rows,
                                                                                   cols, value);
  FS_CUDA_CHECK_LAUNCH();
}

void scale_rows(float* x, const float* scale, int rows, int cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  scale_rows_kernel<<<cuda_detail::grid_1d(n), kThreads, 0, stream>>>(x, scale, n, cols);
  FS_CUDA_CHECK_LAUNCH();
}

}  // namespace foresight::kernels
