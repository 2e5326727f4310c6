// Gradient compression on the GPU (references: kernels/reference.cpp): symmetric int8 per block,
// and exact top-k sparsification with error feedback.
//
// Top-k without a sort: the k-th largest |acc| is found by a 4-pass radix select over the bits of
// |acc| (for non-negative floats the bit pattern orders like the value), 8 bits per pass, each pass
// a histogram of the candidates that still match the prefix. That gives the threshold T and how
// many entries equal to T are still to be taken (k_eq). Entries > T are all sent; of those == T the
// k_eq with the lowest indices are (an exclusive scan of the "== T" flags ranks them). An exclusive
// scan of the final flags gives each sent entry its output slot, so indices come out ascending.
#include <climits>
#include <cub/device/device_scan.cuh>
#include <stdexcept>
#include <string>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_kernels.h"

namespace foresight::kernels {

using cuda_detail::block_max;
using cuda_detail::grid_1d;
using cuda_detail::kThreads;

namespace {

// --- int8 ---------------------------------------------------------------------------------------
// One thread block per quantisation block (grid-stride over blocks). rintf rounds half to even, as
// std::nearbyint in the default rounding mode; x / scale is IEEE division on both sides.
__global__ void quantize_int8_kernel(std::int8_t* q, float* scales, const float* x, std::size_t n, int block,
                                     std::size_t blocks) {
  for (std::size_t blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
    const std::size_t b0 = blk * block, e = n - b0 < static_cast<std::size_t>(block) ? n : b0 + block;
    float amax = 0.0f;
    for (std::size_t i = b0 + threadIdx.x; i < e; i += blockDim.x) amax = fmaxf(amax, fabsf(x[i]));
    amax = block_max(amax);
    const float scale = amax / 127.0f;
    if (threadIdx.x == 0) scales[blk] = scale;
    for (std::size_t i = b0 + threadIdx.x; i < e; i += blockDim.x) {
      const float r = scale > 0.0f ? rintf(x[i] / scale) : 0.0f;
      q[i] = static_cast<std::int8_t>(fminf(fmaxf(r, -127.0f), 127.0f));
    }
  }
}

__global__ void dequantize_int8_kernel(float* x, const std::int8_t* q, const float* scales, std::size_t n,
                                       int block) {
  FS_GRID_STRIDE(i, n) x[i] = static_cast<float>(q[i]) * scales[i / block];
}

// --- top-k ----------------------------------------------------------------------------------------
__device__ __forceinline__ unsigned magnitude_key(float x) { return __float_as_uint(fabsf(x)); }

struct SelectState {
  unsigned prefix;  // the bits of the threshold found so far
  unsigned mask;    // which bits of `prefix` are decided
  unsigned k_rem;   // how many still to take among the keys that match `prefix`
};

__global__ void accumulate_kernel(float* residual, const float* grad, std::size_t n) {
  FS_GRID_STRIDE(i, n) residual[i] += grad[i];
}

// k >= n: everything is sent, in index order.
__global__ void take_all_kernel(std::int32_t* indices, float* values, float* residual, std::size_t n) {
  FS_GRID_STRIDE(i, n) {
    indices[i] = static_cast<std::int32_t>(i);
    values[i] = residual[i];
    residual[i] = 0.0f;
  }
}

__global__ void select_init_kernel(SelectState* st, unsigned k) { *st = SelectState{0u, 0u, k}; }

// Histogram of the 8-bit digit at `shift` over the keys that match the prefix decided so far.
__global__ void digit_histogram_kernel(const float* acc, std::size_t n, const SelectState* st, int shift,
                                       unsigned* hist) {
  __shared__ unsigned local[256];
  for (int b = threadIdx.x; b < 256; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const unsigned prefix = st->prefix, mask = st->mask;
  FS_GRID_STRIDE(i, n) {
    const unsigned key = magnitude_key(acc[i]);
    if ((key & mask) == prefix) atomicAdd(&local[(key >> shift) & 0xFFu], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < 256; b += blockDim.x)
    if (local[b] != 0) atomicAdd(&hist[b], local[b]);
}

// One thread: walks the digits from the largest down to the one that holds the k_rem-th key.
__global__ void digit_select_kernel(SelectState* st, const unsigned* hist, int shift) {
  const unsigned k = st->k_rem;
  unsigned above = 0;  // candidates with a larger digit: all taken
  for (int d = 255; d >= 0; --d) {
    if (above + hist[d] >= k) {
      st->prefix |= static_cast<unsigned>(d) << shift;
      st->mask |= 0xFFu << shift;
      st->k_rem = k - above;
      return;
    }
    above += hist[d];
  }
}

__global__ void equal_flags_kernel(int* flags, const float* acc, std::size_t n, const SelectState* st) {
  const unsigned t = st->prefix;
  FS_GRID_STRIDE(i, n) flags[i] = magnitude_key(acc[i]) == t ? 1 : 0;
}

// flags[i] = 1 if entry i is sent. rank_equal: exclusive scan of the "== T" flags.
__global__ void send_flags_kernel(int* flags, const int* rank_equal, const float* acc, std::size_t n,
                                  const SelectState* st) {
  const unsigned t = st->prefix, k_eq = st->k_rem;
  FS_GRID_STRIDE(i, n) {
    const unsigned key = magnitude_key(acc[i]);
    flags[i] = (key > t || (key == t && static_cast<unsigned>(rank_equal[i]) < k_eq)) ? 1 : 0;
  }
}

// slot: exclusive scan of the send flags. residual holds acc; the sent entries leave it.
__global__ void scatter_kernel(std::int32_t* indices, float* values, float* residual, const int* flags,
                               const int* slot, std::size_t n) {
  FS_GRID_STRIDE(i, n) {
    if (!flags[i]) continue;
    indices[slot[i]] = static_cast<std::int32_t>(i);
    values[slot[i]] = residual[i];
    residual[i] = 0.0f;
  }
}

// Stream-ordered scratch, released stream-ordered on every path out of the call.
class StreamScratch {
 public:
  StreamScratch(std::size_t bytes, cudaStream_t stream) : stream_(stream) {
    FS_CUDA_CHECK(cudaMallocAsync(&p_, bytes, stream));
  }
  ~StreamScratch() {
    if (p_)
      static_cast<void>(cudaFreeAsync(p_, stream_));  // nothing useful to do with an error in a destructor
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  char* get() const { return static_cast<char*>(p_); }

 private:
  void* p_ = nullptr;
  cudaStream_t stream_;
};

std::size_t align_up(std::size_t x) { return (x + 255) / 256 * 256; }

}  // namespace

void quantize_int8(std::int8_t* q, float* scales, const float* x, std::size_t n, int block,
                   cudaStream_t stream) {
  if (block <= 0)
    throw std::invalid_argument("quantize_int8: block must be positive, got " + std::to_string(block));
  if (n == 0) return;
  const std::size_t blocks = (n + block - 1) / block;
  const unsigned grid = static_cast<unsigned>(std::min<std::size_t>(blocks, 65535));
  quantize_int8_kernel<<<grid, kThreads, 0, stream>>>(q, scales, x, n, block, blocks);
  FS_CUDA_CHECK_LAUNCH();
}

void dequantize_int8(float* x, const std::int8_t* q, const float* scales, std::size_t n, int block,
                     cudaStream_t stream) {
  if (block <= 0)
    throw std::invalid_argument("dequantize_int8: block must be positive, got " + std::to_string(block));
  if (n == 0) return;
  dequantize_int8_kernel<<<grid_1d(n), kThreads, 0, stream>>>(x, q, scales, n, block);
  FS_CUDA_CHECK_LAUNCH();
}

std::size_t topk_sparsify(std::int32_t* indices, float* values, float* residual, const float* grad,
                          std::size_t n, std::size_t k, cudaStream_t stream) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw std::invalid_argument("topk_sparsify: n must be below 2^31 (int32 indices), got " +
                                std::to_string(n));
  if (n == 0) return 0;
  accumulate_kernel<<<grid_1d(n), kThreads, 0, stream>>>(residual, grad, n);
  FS_CUDA_CHECK_LAUNCH();
  k = std::min(k, n);
  if (k == 0) return 0;
  if (k == n) {
    take_all_kernel<<<grid_1d(n), kThreads, 0, stream>>>(indices, values, residual, n);
    FS_CUDA_CHECK_LAUNCH();
    return k;
  }

  const int items = static_cast<int>(n);
  std::size_t scan_bytes = 0;
  FS_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, static_cast<int*>(nullptr),
                                              static_cast<int*>(nullptr), items, stream));
  const std::size_t state_off = 0, hist_off = align_up(sizeof(SelectState)),
                    a_off = hist_off + align_up(256 * 4), b_off = a_off + align_up(n * sizeof(int)),
                    scan_off = b_off + align_up(n * sizeof(int));
  StreamScratch scratch(scan_off + align_up(scan_bytes), stream);
  auto* state = reinterpret_cast<SelectState*>(scratch.get() + state_off);
  auto* hist = reinterpret_cast<unsigned*>(scratch.get() + hist_off);
  int* a = reinterpret_cast<int*>(scratch.get() + a_off);
  int* b = reinterpret_cast<int*>(scratch.get() + b_off);
  void* scan_tmp = scratch.get() + scan_off;

  select_init_kernel<<<1, 1, 0, stream>>>(state, static_cast<unsigned>(k));
  FS_CUDA_CHECK_LAUNCH();
  for (int shift = 24; shift >= 0; shift -= 8) {
    FS_CUDA_CHECK(cudaMemsetAsync(hist, 0, 256 * sizeof(unsigned), stream));
    digit_histogram_kernel<<<std::min(grid_1d(n), 1024u), kThreads, 0, stream>>>(residual, n, state, shift,
                                                                                 hist);
    FS_CUDA_CHECK_LAUNCH();
    digit_select_kernel<<<1, 1, 0, stream>>>(state, hist, shift);
    FS_CUDA_CHECK_LAUNCH();
  }
  equal_flags_kernel<<<grid_1d(n), kThreads, 0, stream>>>(a, residual, n, state);
  FS_CUDA_CHECK_LAUNCH();
  FS_CUDA_CHECK(
      cub::DeviceScan::ExclusiveSum(scan_tmp, scan_bytes, a, b, items, stream));  // b: rank among == T
  send_flags_kernel<<<grid_1d(n), kThreads, 0, stream>>>(a, b, residual, n, state);
  FS_CUDA_CHECK_LAUNCH();
  FS_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(scan_tmp, scan_bytes, a, b, items, stream));  // b: output slot
  scatter_kernel<<<grid_1d(n), kThreads, 0, stream>>>(indices, values, residual, a, b, n);
  FS_CUDA_CHECK_LAUNCH();
  return k;
}

}  // namespace foresight::kernels
