// Elementwise kernels on the GPU (references: kernels/reference.cpp): embedding gather and
// scatter, residual add, bias + GeLU, SwiGLU, rotary embedding, and the helpers of
// cuda_kernels.h (conversion, bias add and its gradient). Grid-stride loops; fp32 arithmetic whatever the
// storage type.
#include <stdexcept>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_kernels.h"

namespace foresight::kernels {

using cuda_detail::from_float;
using cuda_detail::grid_1d;
using cuda_detail::kThreads;
using cuda_detail::to_float;

namespace {

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi), as reference.cpp
constexpr float kGeluA = 0.044715f;            // GPT-2's tanh approximation

__device__ __forceinline__ float gelu(float u) {
  return 0.5f * u * (1.0f + tanhf(kGeluC * (u + kGeluA * u * u * u)));
}
__device__ __forceinline__ float gelu_grad(float u) {
  const float t = tanhf(kGeluC * (u + kGeluA * u * u * u));
  return 0.5f * (1.0f + t) + 0.5f * u * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluA * u * u);
}
// IEEE division and the accurate expf: this is not a hot spot and matches the reference closely.
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

template <typename T>
__global__ void residual_kernel(T* out, const T* a, const T* b, std::size_t n) {
  FS_GRID_STRIDE(i, n) out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
}

// One row of `hidden` per id: gathered forward, scattered (added) backward.
template <typename T>
__global__ void embedding_forward_kernel(T* out, const T* table, const int* ids, int hidden, std::size_t n) {
  FS_GRID_STRIDE(i, n) {
    const std::size_t r = i / static_cast<std::size_t>(hidden), c = i % static_cast<std::size_t>(hidden);
    out[i] = table[static_cast<std::size_t>(ids[r]) * hidden + c];
  }
}

template <typename T>
__global__ void embedding_backward_kernel(float* dtable, const T* dout, const int* ids, int hidden,
                                          std::size_t n) {
  FS_GRID_STRIDE(i, n) {
    const std::size_t r = i / static_cast<std::size_t>(hidden), c = i % static_cast<std::size_t>(hidden);
    atomicAdd(dtable + static_cast<std::size_t>(ids[r]) * hidden + c, to_float(dout[i]));
  }
}

template <typename Out, typename In>
__global__ void convert_kernel(Out* out, const In* in, std::size_t n) {
  FS_GRID_STRIDE(i, n) out[i] = from_float<Out>(to_float(in[i]));
}

template <typename T>
__global__ void bias_kernel(T* out, const T* x, const T* bias, std::size_t n, int cols) {
  FS_GRID_STRIDE(i, n) out[i] = from_float<T>(to_float(x[i]) + to_float(bias[i % cols]));
}

template <typename T>
__global__ void bias_gelu_forward_kernel(T* out, const T* x, const T* bias, std::size_t n, int cols) {
  FS_GRID_STRIDE(i, n) {
    const float u = to_float(x[i]) + (bias ? to_float(bias[i % cols]) : 0.0f);
    out[i] = from_float<T>(gelu(u));
  }
}

// dx = dout * gelu'(x + bias), written here; the fp32 dx is also the column-sum contribution.
template <typename T>
struct BiasGeluBackward {
  T* dx;
  const T* x;
  const T* bias;
  const T* dout;
  int cols;
  __device__ void operator()(int r, int c, float* acc) const {
    const std::size_t i = static_cast<std::size_t>(r) * cols + c;
    const float u = to_float(x[i]) + (bias ? to_float(bias[c]) : 0.0f);
    const float d = to_float(dout[i]) * gelu_grad(u);
    dx[i] = from_float<T>(d);
    acc[0] += d;
  }
};

template <typename T>
struct ColumnSum {
  const T* dout;
  int cols;
  __device__ void operator()(int r, int c, float* acc) const {
    acc[0] += to_float(dout[static_cast<std::size_t>(r) * cols + c]);
  }
};

template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* gate_up, std::size_t n, int cols) {
  FS_GRID_STRIDE(i, n) {
    const std::size_t r = i / cols, c = i % cols;
    const float g = to_float(gate_up[r * 2 * cols + c]), u = to_float(gate_up[r * 2 * cols + cols + c]);
    out[i] = from_float<T>(g * sigmoid(g) * u);
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(T* dgate_up, const T* gate_up, const T* dout, std::size_t n,
                                       int cols) {
  FS_GRID_STRIDE(i, n) {
    const std::size_t r = i / cols, c = i % cols;
    const std::size_t gi = r * 2 * cols + c, ui = gi + cols;
    const float g = to_float(gate_up[gi]), u = to_float(gate_up[ui]), d = to_float(dout[i]);
    const float s = sigmoid(g);
    dgate_up[gi] = from_float<T>(d * u * s * (1.0f + g * (1.0f - s)));
    dgate_up[ui] = from_float<T>(d * g * s);
  }
}

// One thread per (token, rotated head, pair p): rotates (x[p], x[p + half]) by angle pos * inv_freq[p].
__global__ void rope_kernel(float* qkv, int seq, int width, int rotated_heads, int head_dim, float theta,
                            bool inverse, std::size_t n) {
  const int half = head_dim / 2;
  FS_GRID_STRIDE(i, n) {
    const int p = static_cast<int>(i % half);
    const std::size_t t = i / half;  // t = token * rotated_heads + head
    const int h = static_cast<int>(t % rotated_heads);
    const std::size_t token = t / rotated_heads;
    const int pos = static_cast<int>(token % seq);
    // As the reference: the frequency in double, rounded once to float, then a float angle.
    const float inv_freq = static_cast<float>(pow(static_cast<double>(theta), -2.0 * p / head_dim));
    const float angle = static_cast<float>(pos) * inv_freq;
    const float c = cosf(angle), sn = inverse ? -sinf(angle) : sinf(angle);
    float* x = qkv + token * width + static_cast<std::size_t>(h) * head_dim;
    const float x1 = x[p], x2 = x[p + half];
    x[p] = x1 * c - x2 * sn;
    x[p + half] = x1 * sn + x2 * c;
  }
}

template <typename T>
void residual_impl(T* out, const T* a, const T* b, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  residual_kernel<T><<<grid_1d(n), kThreads, 0, stream>>>(out, a, b, n);
  FS_CUDA_CHECK_LAUNCH();
}

template <typename T>
void bias_gelu_forward_impl(T* out, const T* x, const T* bias, int rows, int cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  bias_gelu_forward_kernel<T><<<grid_1d(n), kThreads, 0, stream>>>(out, x, bias, n, cols);
  FS_CUDA_CHECK_LAUNCH();
}

template <typename T>
void bias_gelu_backward_impl(T* dx, float* dbias, const T* x, const T* bias, const T* dout, int rows,
                             int cols, cudaStream_t stream) {
  // The column layout costs nothing when dbias is null (no atomics) and keeps one code path.
  cuda_detail::column_reduce<1>(BiasGeluBackward<T>{dx, x, bias, dout, cols}, rows, cols,
                                cuda_detail::ColumnOutputs<1>{{dbias}}, stream);
}

template <typename T>
void swiglu_forward_impl(T* out, const T* gate_up, int rows, int cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  swiglu_forward_kernel<T><<<grid_1d(n), kThreads, 0, stream>>>(out, gate_up, n, cols);
  FS_CUDA_CHECK_LAUNCH();
}

template <typename T>
void swiglu_backward_impl(T* dgate_up, const T* gate_up, const T* dout, int rows, int cols,
                          cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  swiglu_backward_kernel<T><<<grid_1d(n), kThreads, 0, stream>>>(dgate_up, gate_up, dout, n, cols);
  FS_CUDA_CHECK_LAUNCH();
}

template <typename Out, typename In>
void convert_impl(Out* out, const In* in, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  convert_kernel<Out, In><<<grid_1d(n), kThreads, 0, stream>>>(out, in, n);
  FS_CUDA_CHECK_LAUNCH();
}

template <typename T>
void bias_forward_impl(T* out, const T* x, const T* bias, int rows, int cols, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  bias_kernel<T><<<grid_1d(n), kThreads, 0, stream>>>(out, x, bias, n, cols);
  FS_CUDA_CHECK_LAUNCH();
}

template <typename T>
void embedding_forward_impl(T* out, const T* table, const int* ids, int rows, int hidden,
                            cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(rows) * hidden;
  if (n == 0) return;
  embedding_forward_kernel<T><<<grid_1d(n), kThreads, 0, stream>>>(out, table, ids, hidden, n);
  FS_CUDA_CHECK_LAUNCH();
}

template <typename T>
void embedding_backward_impl(float* dtable, const T* dout, const int* ids, int rows, int hidden,
                             cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(rows) * hidden;
  if (n == 0) return;
  embedding_backward_kernel<T><<<grid_1d(n), kThreads, 0, stream>>>(dtable, dout, ids, hidden, n);
  FS_CUDA_CHECK_LAUNCH();
}

}  // namespace

void embedding_forward(float* out, const float* table, const int* ids, int rows, int hidden,
                       cudaStream_t stream) {
  embedding_forward_impl(out, table, ids, rows, hidden, stream);
}
void embedding_forward(__nv_bfloat16* out, const __nv_bfloat16* table, const int* ids, int rows, int hidden,
                       cudaStream_t stream) {
  embedding_forward_impl(out, table, ids, rows, hidden, stream);
}
void embedding_backward(float* dtable, const float* dout, const int* ids, int rows, int hidden,
                        cudaStream_t stream) {
  embedding_backward_impl(dtable, dout, ids, rows, hidden, stream);
}
void embedding_backward(float* dtable, const __nv_bfloat16* dout, const int* ids, int rows, int hidden,
                        cudaStream_t stream) {
  embedding_backward_impl(dtable, dout, ids, rows, hidden, stream);
}

void residual_forward(float* out, const float* a, const float* b, std::size_t n, cudaStream_t stream) {
  residual_impl(out, a, b, n, stream);
}
void residual_forward(__nv_bfloat16* out, const __nv_bfloat16* a, const __nv_bfloat16* b, std::size_t n,
                      cudaStream_t stream) {
  residual_impl(out, a, b, n, stream);
}
void bias_gelu_forward(float* out, const float* x, const float* bias, int rows, int cols,
                       cudaStream_t stream) {
  bias_gelu_forward_impl(out, x, bias, rows, cols, stream);
}
void bias_gelu_forward(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* bias, int rows,
                       int cols, cudaStream_t stream) {
  bias_gelu_forward_impl(out, x, bias, rows, cols, stream);
}
void bias_gelu_backward(float* dx, float* dbias, const float* x, const float* bias, const float* dout,
                        int rows, int cols, cudaStream_t stream) {
  bias_gelu_backward_impl(dx, dbias, x, bias, dout, rows, cols, stream);
}
void bias_gelu_backward(__nv_bfloat16* dx, float* dbias, const __nv_bfloat16* x, const __nv_bfloat16* bias,
                        const __nv_bfloat16* dout, int rows, int cols, cudaStream_t stream) {
  bias_gelu_backward_impl(dx, dbias, x, bias, dout, rows, cols, stream);
}
void swiglu_forward(float* out, const float* gate_up, int rows, int cols, cudaStream_t stream) {
  swiglu_forward_impl(out, gate_up, rows, cols, stream);
}
void swiglu_forward(__nv_bfloat16* out, const __nv_bfloat16* gate_up, int rows, int cols,
                    cudaStream_t stream) {
  swiglu_forward_impl(out, gate_up, rows, cols, stream);
}
void swiglu_backward(float* dgate_up, const float* gate_up, const float* dout, int rows, int cols,
                     cudaStream_t stream) {
  swiglu_backward_impl(dgate_up, gate_up, dout, rows, cols, stream);
}
void swiglu_backward(__nv_bfloat16* dgate_up, const __nv_bfloat16* gate_up, const __nv_bfloat16* dout,
                     int rows, int cols, cudaStream_t stream) {
  swiglu_backward_impl(dgate_up, gate_up, dout, rows, cols, stream);
}

void rope(float* qkv, const AttentionShape& s, float theta, bool inverse, cudaStream_t stream) {
  if (s.head_dim % 2 != 0)
    throw std::invalid_argument("rope: head_dim must be even, got " + std::to_string(s.head_dim));
  const int rotated = s.q_heads + s.kv_heads;
  const std::size_t n = s.tokens() * rotated * (s.head_dim / 2);
  if (n == 0) return;
  rope_kernel<<<grid_1d(n), kThreads, 0, stream>>>(qkv, s.seq, s.qkv_width(), rotated, s.head_dim, theta,
                                                   inverse, n);
  FS_CUDA_CHECK_LAUNCH();
}

void convert(float* out, const __nv_bfloat16* in, std::size_t n, cudaStream_t stream) {
  convert_impl(out, in, n, stream);
}
void convert(__nv_bfloat16* out, const float* in, std::size_t n, cudaStream_t stream) {
  convert_impl(out, in, n, stream);
}
void bias_forward(float* out, const float* x, const float* bias, int rows, int cols, cudaStream_t stream) {
  bias_forward_impl(out, x, bias, rows, cols, stream);
}
void bias_forward(__nv_bfloat16* out, const __nv_bfloat16* x, const __nv_bfloat16* bias, int rows, int cols,
                  cudaStream_t stream) {
  bias_forward_impl(out, x, bias, rows, cols, stream);
}
void bias_backward(float* dbias, const float* dout, int rows, int cols, cudaStream_t stream) {
  cuda_detail::column_reduce<1>(ColumnSum<float>{dout, cols}, rows, cols,
                                cuda_detail::ColumnOutputs<1>{{dbias}}, stream);
}
void bias_backward(float* dbias, const __nv_bfloat16* dout, int rows, int cols, cudaStream_t stream) {
  cuda_detail::column_reduce<1>(ColumnSum<__nv_bfloat16>{dout, cols}, rows, cols,
                                cuda_detail::ColumnOutputs<1>{{dbias}}, stream);
}

}  // namespace foresight::kernels
