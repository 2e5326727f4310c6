// RMSNorm, LayerNorm and fused residual + RMSNorm on the GPU (references: kernels/reference.cpp).
// Forward and dx: one block per row, fp32 statistics from block reductions. Weight and bias
// gradients: a separate column reduction (cuda_common.cuh), launched before the dx kernel so that
// dx may overwrite dout.
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_kernels.h"

namespace foresight::kernels {

using cuda_detail::block_sum;
using cuda_detail::from_float;
using cuda_detail::kThreads;
using cuda_detail::to_float;

namespace {

template <typename T>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const T* x, const T* weight, int cols,
                                       float eps) {
  const std::size_t off = static_cast<std::size_t>(blockIdx.x) * cols;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = to_float(x[off + c]);
    ss += v * v;
  }
  ss = block_sum(ss);
  const float s = 1.0f / sqrtf(ss / static_cast<float>(cols) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = s;
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    out[off + c] = from_float<T>(to_float(x[off + c]) * s * to_float(weight[c]));
}

template <typename T>
__global__ void rmsnorm_backward_dx_kernel(T* dx, const T* dout, const T* x, const T* weight,
                                           const float* rstd, int cols) {
  const std::size_t off = static_cast<std::size_t>(blockIdx.x) * cols;
  const float s = rstd[blockIdx.x];
  float dot = 0.0f;  // sum_c w_c dy_c x_c
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    dot += to_float(weight[c]) * to_float(dout[off + c]) * to_float(x[off + c]);
  dot = block_sum(dot);
  const float k = dot * s * s * s / static_cast<float>(cols);
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    dx[off + c] = from_float<T>(s * to_float(weight[c]) * to_float(dout[off + c]) - k * to_float(x[off + c]));
}

template <typename T>
struct RmsnormWeightGrad {
  const T* dout;
  const T* x;
  const float* rstd;
  int cols;
  __device__ void operator()(int r, int c, float* acc) const {
    const std::size_t i = static_cast<std::size_t>(r) * cols + c;
    acc[0] += to_float(dout[i]) * to_float(x[i]) * rstd[r];
  }
};

template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* x, const T* weight,
                                         const T* bias, int cols, float eps) {
  const std::size_t off = static_cast<std::size_t>(blockIdx.x) * cols;
  float sum = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) sum += to_float(x[off + c]);
  const float mu = block_sum(sum) / static_cast<float>(cols);
  float var = 0.0f;  // two passes: no cancellation when |mean| >> std
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float d = to_float(x[off + c]) - mu;
    var += d * d;
  }
  var = block_sum(var) / static_cast<float>(cols);
  const float s = 1.0f / sqrtf(var + eps);
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = mu;
    rstd[blockIdx.x] = s;
  }
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    out[off + c] = from_float<T>((to_float(x[off + c]) - mu) * s * to_float(weight[c]) + to_float(bias[c]));
}

template <typename T>
__global__ void layernorm_backward_dx_kernel(T* dx, const T* dout, const T* x, const T* weight,
                                             const float* mean, const float* rstd, int cols) {
  const std::size_t off = static_cast<std::size_t>(blockIdx.x) * cols;
  const float mu = mean[blockIdx.x], s = rstd[blockIdx.x];
  float sum_d = 0.0f, sum_dx = 0.0f;  // sums of dxhat and dxhat * xhat
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float xhat = (to_float(x[off + c]) - mu) * s;
    const float d = to_float(dout[off + c]) * to_float(weight[c]);
    sum_d += d;
    sum_dx += d * xhat;
  }
  const float mean_d = block_sum(sum_d) / static_cast<float>(cols);
  const float mean_dx = block_sum(sum_dx) / static_cast<float>(cols);
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float xhat = (to_float(x[off + c]) - mu) * s;
    const float d = to_float(dout[off + c]) * to_float(weight[c]);
    dx[off + c] = from_float<T>(s * (d - mean_d - xhat * mean_dx));
  }
}

template <typename T>
struct LayernormParamGrad {
  const T* dout;
  const T* x;
  const float* mean;
  const float* rstd;
  int cols;
  __device__ void operator()(int r, int c, float* acc) const {
    const std::size_t i = static_cast<std::size_t>(r) * cols + c;
    const float d = to_float(dout[i]);
    acc[0] += d * (to_float(x[i]) - mean[r]) * rstd[r];
    acc[1] += d;
  }
};

template <typename T>
void rmsnorm_forward_impl(T* out, float* rstd, const T* x, const T* weight, int rows, int cols, float eps,
                          cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  rmsnorm_forward_kernel<T><<<rows, kThreads, 0, stream>>>(out, rstd, x, weight, cols, eps);
  FS_CUDA_CHECK_LAUNCH();
}

template <typename T>
void rmsnorm_backward_impl(T* dx, float* dweight, const T* dout, const T* x, const T* weight,
                           const float* rstd, int rows, int cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  cuda_detail::column_reduce<1>(RmsnormWeightGrad<T>{dout, x, rstd, cols}, rows, cols,
                                cuda_detail::ColumnOutputs<1>{{dweight}}, stream);
  rmsnorm_backward_dx_kernel<T><<<rows, kThreads, 0, stream>>>(dx, dout, x, weight, rstd, cols);
  FS_CUDA_CHECK_LAUNCH();
}

template <typename T>
void layernorm_forward_impl(T* out, float* mean, float* rstd, const T* x, const T* weight, const T* bias,
                            int rows, int cols, float eps, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  layernorm_forward_kernel<T><<<rows, kThreads, 0, stream>>>(out, mean, rstd, x, weight, bias, cols, eps);
  FS_CUDA_CHECK_LAUNCH();
}

template <typename T>
void layernorm_backward_impl(T* dx, float* dweight, float* dbias, const T* dout, const T* x, const T* weight,
                             const float* mean, const float* rstd, int rows, int cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  cuda_detail::column_reduce<2>(LayernormParamGrad<T>{dout, x, mean, rstd, cols}, rows, cols,
                                cuda_detail::ColumnOutputs<2>{{dweight, dbias}}, stream);
  layernorm_backward_dx_kernel<T><<<rows, kThreads, 0, stream>>>(dx, dout, x, weight, mean, rstd, cols);
  FS_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* weight, int rows, int cols,
                     float eps, cudaStream_t stream) {
  rmsnorm_forward_impl(out, rstd, x, weight, rows, cols, eps, stream);
}
void rmsnorm_forward(__nv_bfloat16* out, float* rstd, const __nv_bfloat16* x, const __nv_bfloat16* weight,
                     int rows, int cols, float eps, cudaStream_t stream) {
  rmsnorm_forward_impl(out, rstd, x, weight, rows, cols, eps, stream);
}
void rmsnorm_backward(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                      const float* rstd, int rows, int cols, cudaStream_t stream) {
  rmsnorm_backward_impl(dx, dweight, dout, x, weight, rstd, rows, cols, stream);
}
void rmsnorm_backward(__nv_bfloat16* dx, float* dweight, const __nv_bfloat16* dout, const __nv_bfloat16* x,
                      const __nv_bfloat16* weight, const float* rstd, int rows, int cols,
                      cudaStream_t stream) {
  rmsnorm_backward_impl(dx, dweight, dout, x, weight, rstd, rows, cols, stream);
}
void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* weight,
                       const float* bias, int rows, int cols, float eps, cudaStream_t stream) {
  layernorm_forward_impl(out, mean, rstd, x, weight, bias, rows, cols, eps, stream);
}
void layernorm_forward(__nv_bfloat16* out, float* mean, float* rstd, const __nv_bfloat16* x,
                       const __nv_bfloat16* weight, const __nv_bfloat16* bias, int rows, int cols, float eps,
                       cudaStream_t stream) {
  layernorm_forward_impl(out, mean, rstd, x, weight, bias, rows, cols, eps, stream);
}
void layernorm_backward(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                        const float* weight, const float* mean, const float* rstd, int rows, int cols,
                        cudaStream_t stream) {
  layernorm_backward_impl(dx, dweight, dbias, dout, x, weight, mean, rstd, rows, cols, stream);
}
void layernorm_backward(__nv_bfloat16* dx, float* dweight, float* dbias, const __nv_bfloat16* dout,
                        const __nv_bfloat16* x, const __nv_bfloat16* weight, const float* mean,
                        const float* rstd, int rows, int cols, cudaStream_t stream) {
  layernorm_backward_impl(dx, dweight, dbias, dout, x, weight, mean, rstd, rows, cols, stream);
}

}  // namespace foresight::kernels
