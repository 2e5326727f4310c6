// AdamW on fp32 master weights and the gradient overflow check of mixed-precision training, on the
// GPU (references: kernels/reference.cpp). Both are grid-stride loops over the flat parameters.
#include <cmath>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_kernels.h"

namespace foresight::kernels {

using cuda_detail::grid_1d;
using cuda_detail::kThreads;
using cuda_detail::to_float;

namespace {

template <typename G>
__global__ void adamw_kernel(float* params, float* m, float* v, const G* grads, std::size_t n, AdamWConfig c,
                             float bc1, float bc2, float grad_scale) {
  FS_GRID_STRIDE(i, n) {
    const float g = to_float(grads[i]) * grad_scale;
    const float mi = c.beta1 * m[i] + (1.0f - c.beta1) * g;
    const float vi = c.beta2 * v[i] + (1.0f - c.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi / bc1, vhat = vi / bc2;
    const float p = params[i];
    params[i] = p - c.lr * (mhat / (sqrtf(vhat) + c.eps) + c.weight_decay * p);
  }
}

// !(|g| <= limit) is true for NaN and for +-inf as well as for large finite values.
template <typename G>
__global__ void overflow_kernel(const G* grads, std::size_t n, float limit, int* flag) {
  bool found = false;
  FS_GRID_STRIDE(i, n)
  found |= !(fabsf(to_float(grads[i])) <= limit);
  if (found) *flag = 1;  // every writer stores the same value
}

template <typename G>
void adamw_impl(float* params, float* m, float* v, const G* grads, std::size_t n, const AdamWConfig& c,
                int step, float grad_scale, cudaStream_t stream) {
  if (n == 0) return;
  // Bias corrections on the host in float, exactly as the reference computes them.
  const float bc1 = 1.0f - std::pow(c.beta1, static_cast<float>(step));
  const float bc2 = 1.0f - std::pow(c.beta2, static_cast<float>(step));
  adamw_kernel<G><<<grid_1d(n), kThreads, 0, stream>>>(params, m, v, grads, n, c, bc1, bc2, grad_scale);
  FS_CUDA_CHECK_LAUNCH();
}

template <typename G>
void has_overflow_impl(const G* grads, std::size_t n, float limit, int* flag, cudaStream_t stream) {
  FS_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), stream));
  if (n == 0) return;
  overflow_kernel<G><<<grid_1d(n), kThreads, 0, stream>>>(grads, n, limit, flag);
  FS_CUDA_CHECK_LAUNCH();
}

}  // namespace

void adamw(float* params, float* m, float* v, const float* grads, std::size_t n, const AdamWConfig& c,
           int step, float grad_scale, cudaStream_t stream) {
  adamw_impl(params, m, v, grads, n, c, step, grad_scale, stream);
}
void adamw(float* params, float* m, float* v, const __nv_bfloat16* grads, std::size_t n, const AdamWConfig& c,
           int step, float grad_scale, cudaStream_t stream) {
  adamw_impl(params, m, v, grads, n, c, step, grad_scale, stream);
}
void has_overflow(const float* grads, std::size_t n, float limit, int* flag, cudaStream_t stream) {
  has_overflow_impl(grads, n, limit, flag, stream);
}
void has_overflow(const __nv_bfloat16* grads, std::size_t n, float limit, int* flag, cudaStream_t stream) {
  has_overflow_impl(grads, n, limit, flag, stream);
}

}  // namespace foresight::kernels
