// Device helpers shared by the kernels in kernels/*.cu (private: not installed, not included by
// users of cuda_kernels.h): fp32/bf16 loads and stores, warp and block reductions, launch sizes,
// and the column-reduction kernel behind every weight and bias gradient.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/cuda_check.h"

namespace foresight::kernels::cuda_detail {

// --- element types ----------------------------------------------------------------------------
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
// Round to nearest even, as a framework's bf16 cast.
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// --- reductions -------------------------------------------------------------------------------
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Every thread of the block gets the total. blockDim.x must be a multiple of 32 (at most 1024)
// and every thread must call it. The first barrier lets a block call it several times in a row.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_sum(lane < warps ? partial[lane] : 0.0f);
}
__device__ __forceinline__ float block_max(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_max(lane < warps ? partial[lane] : -INFINITY);
}

// --- launch sizes -----------------------------------------------------------------------------
// for (i = this thread's first element; i < n; i += all threads): the loop of every 1-D kernel.
#define FS_GRID_STRIDE(i, n)                                                                     \
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)

constexpr int kThreads = 256;  // threads per block for 1-D and row kernels (8 warps)

inline int ceil_div(long long a, long long b) { return static_cast<int>((a + b - 1) / b); }

// Blocks for a grid-stride loop over n elements: enough to fill any current GPU several times
// over, few enough that each thread does a handful of elements.
inline unsigned grid_1d(std::size_t n, int threads = kThreads) {
  const std::size_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::min<std::size_t>(std::max<std::size_t>(blocks, 1), 65535));
}

// --- column reductions ------------------------------------------------------------------------
// out_k[c] += sum_r f(r, c)_k for k < N: weight and bias gradients of row-wise ops. A block owns 32
// adjacent columns (one per lane, so each row's loads are coalesced) and a slice of the rows, 8
// rows at a time; the 8 partial sums meet in shared memory and one float atomic per column adds
// the block's share. `f(r, c, acc)` adds its N contributions to acc[0..N) and may also write the
// element's own output (e.g. dx), which no other thread touches.
constexpr int kColTile = 32, kColRows = 8;

template <int N>
struct ColumnOutputs {
  float* p[N];
};

template <int N, typename F>
__global__ void __launch_bounds__(kColTile* kColRows)
    column_reduce_kernel(F f, int rows, int cols, int rows_per_block, ColumnOutputs<N> out) {
  __shared__ float partial[N][kColRows][kColTile + 1];
  const int c = blockIdx.x * kColTile + threadIdx.x;
  const int r_begin = blockIdx.y * rows_per_block;
  const int r_end = min(rows, r_begin + rows_per_block);
  float acc[N];
#pragma unroll
  for (int k = 0; k < N; ++k) acc[k] = 0.0f;
  if (c < cols)
    for (int r = r_begin + static_cast<int>(threadIdx.y); r < r_end; r += kColRows) f(r, c, acc);
#pragma unroll
  for (int k = 0; k < N; ++k) partial[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    if (out.p[k] == nullptr) continue;
    float s = 0.0f;
    for (int y = 0; y < kColRows; ++y) s += partial[k][y][threadIdx.x];
    atomicAdd(out.p[k] + c, s);
  }
}

// Launches column_reduce_kernel with about 2048 blocks (>= 32 rows each), enough for any current GPU.
template <int N, typename F>
void column_reduce(F f, int rows, int cols, ColumnOutputs<N> out, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const int gx = ceil_div(cols, kColTile);
  int gy = std::max(1, std::min(ceil_div(rows, 32), ceil_div(2048, gx)));
  const int rows_per_block = ceil_div(rows, gy);
  gy = ceil_div(rows, rows_per_block);
  column_reduce_kernel<N, F>
      <<<dim3(gx, gy), dim3(kColTile, kColRows), 0, stream>>>(f, rows, cols, rows_per_block, out);
  FS_CUDA_CHECK_LAUNCH();
}

}  // namespace foresight::kernels::cuda_detail
