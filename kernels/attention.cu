// Causal grouped-query attention on the GPU, unfused, in fp32 (references: kernels/reference.cpp).
//
// The five products of the forward and backward (Q K^T, P V, dO V^T, P^T dO, dS K, dS^T Q) are one
// batched tiled kernel, `causal_gemm_kernel`, parameterised by strided operand views over the fused
// QKV buffer and the [batch, q_heads, seq, seq] score tensors, and by where the causal mask falls:
//   kOutputLower  C[i][j] = 0 above the diagonal (scores, dprobs); tiles wholly above are not computed
//   kInnerUpTo    the sum runs over k <= m (P V, dS K: row i sees keys j <= i)
//   kInnerFrom    the sum runs over k >= m (P^T dO, dS^T Q: key j is seen by queries i >= j)
// so about half the tiles of every product are skipped. Grouped-query heads: a kv operand maps
// query head h to kv head h / group; dK and dV sum the group's query heads as `segments` of the
// inner dimension. Softmax forward and backward are one block per score row.
//
// Performance is secondary to being obviously right: 64x64 output tiles, 16-wide k steps through
// shared memory, 4x4 outputs per thread, FFMA (no tensor cores).
#include <stdexcept>
#include <string>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_kernels.h"

namespace foresight::kernels {

using cuda_detail::block_max;
using cuda_detail::block_sum;
using cuda_detail::ceil_div;
using cuda_detail::kThreads;

namespace {

enum class Causal : int { kOutputLower, kInnerUpTo, kInnerFrom };

// Element (r, c) of the matrix of slot (batch b, head index h):
//   p[b * batch_stride + (h / head_div) * head_stride + r * row_stride + c * col_stride]
struct Operand {
  const float* p;
  long long batch_stride, head_stride, row_stride, col_stride;
  int head_div;
};
struct Output {
  float* p;
  long long batch_stride, head_stride, row_stride, col_stride;
};
// C (M x N) = alpha * sum over segments s of A_s (M x K) B_s (K x N), for every (batch, head) slot
// z of the grid; segment s of head `head` reads operand head index head * segments + s.
struct Gemm {
  int M, N, K;
  int heads, segments;
  float alpha;
  Causal causal;
  Operand a, b;
  Output c;
};

constexpr int kTileM = 64, kTileN = 64, kTileK = 16, kGemmThreads = 256;  // 16 x 16 threads, 4 x 4 each

__global__ void __launch_bounds__(kGemmThreads) causal_gemm_kernel(const Gemm g) {
  __shared__ float as[kTileK][kTileM + 1];  // +1: the k-major stores below hit distinct banks
  __shared__ float bs[kTileK][kTileN + 1];
  const int batch = static_cast<int>(blockIdx.z) / g.heads, head = static_cast<int>(blockIdx.z) % g.heads;
  const int m0 = blockIdx.y * kTileM, n0 = blockIdx.x * kTileN;
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;

  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

  // A tile wholly above the diagonal is all zeros (the whole block takes the same branch).
  const bool zero_tile = g.causal == Causal::kOutputLower && n0 > m0 + kTileM - 1;
  if (!zero_tile) {
    int k_begin = 0, k_end = g.K;
    if (g.causal == Causal::kInnerUpTo) k_end = min(g.K, m0 + kTileM);
    if (g.causal == Causal::kInnerFrom) k_begin = m0;  // a multiple of kTileK
    // Walk the unit-stride dimension with consecutive threads so global loads coalesce.
    const bool a_k_unit = g.a.col_stride == 1, b_n_unit = g.b.col_stride == 1;
    for (int s = 0; s < g.segments; ++s) {
      const int h = head * g.segments + s;
      const float* ap =
          g.a.p + batch * g.a.batch_stride + static_cast<long long>(h / g.a.head_div) * g.a.head_stride;
      const float* bp =
          g.b.p + batch * g.b.batch_stride + static_cast<long long>(h / g.b.head_div) * g.b.head_stride;
      for (int k0 = k_begin; k0 < k_end; k0 += kTileK) {
#pragma unroll
        for (int l = 0; l < kTileM * kTileK / kGemmThreads; ++l) {
          const int e = tid + l * kGemmThreads;
          const int mm = a_k_unit ? e / kTileK : e % kTileM;
          const int kk = a_k_unit ? e % kTileK : e / kTileM;
          const int m = m0 + mm, k = k0 + kk;
          bool in = m < g.M && k < k_end;
          if (g.causal == Causal::kInnerUpTo) in = in && k <= m;
          if (g.causal == Causal::kInnerFrom) in = in && k >= m;
          as[kk][mm] = in ? ap[m * g.a.row_stride + k * g.a.col_stride] : 0.0f;
        }
#pragma unroll
        for (int l = 0; l < kTileN * kTileK / kGemmThreads; ++l) {
          const int e = tid + l * kGemmThreads;
          const int nn = b_n_unit ? e % kTileN : e / kTileK;
          const int kk = b_n_unit ? e / kTileN : e % kTileK;
          const int n = n0 + nn, k = k0 + kk;
          bs[kk][nn] = (n < g.N && k < k_end) ? bp[k * g.b.row_stride + n * g.b.col_stride] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kTileK; ++kk) {
          float ar[4], br[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) ar[i] = as[kk][ty + 16 * i];
#pragma unroll
          for (int j = 0; j < 4; ++j) br[j] = bs[kk][tx + 16 * j];
#pragma unroll
          for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(ar[i], br[j], acc[i][j]);
        }
        __syncthreads();
      }
    }
  }

  float* cp = g.c.p + batch * g.c.batch_stride + head * g.c.head_stride;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
      if (m >= g.M || n >= g.N) continue;
      const bool masked = g.causal == Causal::kOutputLower && n > m;
      cp[m * g.c.row_stride + n * g.c.col_stride] = masked ? 0.0f : g.alpha * acc[i][j];
    }
}

// Row r of the [batch * q_heads * seq, seq] scores is query position i = r % seq: keys 0..i.
// probs may alias scores: each thread reads an element before it writes it, after the reductions.
__global__ void causal_softmax_forward_kernel(float* probs, const float* scores, int seq) {
  const std::size_t off = static_cast<std::size_t>(blockIdx.x) * seq;
  const int i = static_cast<int>(blockIdx.x % seq);
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) mx = fmaxf(mx, scores[off + j]);
  mx = block_max(mx);
  float sum = 0.0f;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) sum += expf(scores[off + j] - mx);
  const float inv = 1.0f / block_sum(sum);
  for (int j = threadIdx.x; j < seq; j += blockDim.x)
    probs[off + j] = j <= i ? expf(scores[off + j] - mx) * inv : 0.0f;
}

__global__ void causal_softmax_backward_kernel(float* dscores, const float* dprobs, const float* probs,
                                               int seq) {
  const std::size_t off = static_cast<std::size_t>(blockIdx.x) * seq;
  const int i = static_cast<int>(blockIdx.x % seq);
  float dot = 0.0f;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) dot += probs[off + j] * dprobs[off + j];
  dot = block_sum(dot);
  for (int j = threadIdx.x; j < seq; j += blockDim.x)
    dscores[off + j] = j <= i ? probs[off + j] * (dprobs[off + j] - dot) : 0.0f;
}

// Strides of the tensors an attention call touches, from its shape.
struct Strides {
  long long w, seq, hd, hq, hkv, group, out_w, ss;
  explicit Strides(const AttentionShape& s)
      : w(s.qkv_width()),
        seq(s.seq),
        hd(s.head_dim),
        hq(s.q_heads),
        hkv(s.kv_heads),
        group(s.q_heads / s.kv_heads),
        out_w(static_cast<long long>(s.q_heads) * s.head_dim),
        ss(static_cast<long long>(s.seq) * s.seq) {}
  long long k_col() const { return hq * hd; }          // first column of the k heads in a qkv row
  long long v_col() const { return (hq + hkv) * hd; }  // first column of the v heads
};

void check_shape(const AttentionShape& s, const char* what) {
  if (s.batch < 1 || s.seq < 1 || s.q_heads < 1 || s.kv_heads < 1 || s.head_dim < 1 ||
      s.q_heads % s.kv_heads != 0)
    throw std::invalid_argument(std::string(what) + ": bad attention shape (batch " +
                                std::to_string(s.batch) + ", seq " + std::to_string(s.seq) + ", q_heads " +
                                std::to_string(s.q_heads) + ", kv_heads " + std::to_string(s.kv_heads) +
                                ", head_dim " + std::to_string(s.head_dim) + ")");
}

void launch(const Gemm& g, int batch, cudaStream_t stream) {
  const long long slots = static_cast<long long>(batch) * g.heads;
  if (slots > 65535 || ceil_div(g.M, kTileM) > 65535)
    throw std::invalid_argument("attention: batch * heads and seq / 64 must each be at most 65535");
  const dim3 grid(ceil_div(g.N, kTileN), ceil_div(g.M, kTileM), static_cast<unsigned>(slots));
  causal_gemm_kernel<<<grid, kGemmThreads, 0, stream>>>(g);
  FS_CUDA_CHECK_LAUNCH();
}

float softmax_scale(const AttentionShape& s) { return 1.0f / std::sqrt(static_cast<float>(s.head_dim)); }

}  // namespace

void attention_scores(float* scores, const float* qkv, const AttentionShape& s, cudaStream_t stream) {
  check_shape(s, "attention_scores");
  const Strides t(s);
  const Gemm g{/*M=*/s.seq,
               /*N=*/s.seq,
               /*K=*/s.head_dim,
               /*heads=*/s.q_heads,
               /*segments=*/1,
               /*alpha=*/softmax_scale(s),
               Causal::kOutputLower,
               Operand{qkv, t.seq * t.w, t.hd, t.w, 1, 1},                                      // Q: (i, d)
               Operand{qkv + t.k_col(), t.seq * t.w, t.hd, 1, t.w, static_cast<int>(t.group)},  // K^T: (d, j)
               Output{scores, t.hq * t.ss, t.ss, t.seq, 1}};                                    // S: (i, j)
  launch(g, s.batch, stream);
}

void causal_softmax_forward(float* probs, const float* scores, const AttentionShape& s, cudaStream_t stream) {
  check_shape(s, "causal_softmax_forward");
  const std::size_t rows = static_cast<std::size_t>(s.batch) * s.q_heads * s.seq;
  causal_softmax_forward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(probs, scores, s.seq);
  FS_CUDA_CHECK_LAUNCH();
}

void attention_values(float* out, const float* probs, const float* qkv, const AttentionShape& s,
                      cudaStream_t stream) {
  check_shape(s, "attention_values");
  const Strides t(s);
  const Gemm g{/*M=*/s.seq,
               /*N=*/s.head_dim,
               /*K=*/s.seq,
               /*heads=*/s.q_heads,
               /*segments=*/1,
               /*alpha=*/1.0f,
               Causal::kInnerUpTo,
               Operand{probs, t.hq * t.ss, t.ss, t.seq, 1, 1},                                  // P: (i, j)
               Operand{qkv + t.v_col(), t.seq * t.w, t.hd, t.w, 1, static_cast<int>(t.group)},  // V: (j, d)
               Output{out, t.seq * t.out_w, t.hd, t.out_w, 1}};                                 // O: (i, d)
  launch(g, s.batch, stream);
}

void attention_values_backward(float* dprobs, float* dqkv, const float* dout, const float* probs,
                               const float* qkv, const AttentionShape& s, cudaStream_t stream) {
  check_shape(s, "attention_values_backward");
  const Strides t(s);
  // dP = dO V^T, zero above the diagonal
  const Gemm dp{
      /*M=*/s.seq,
      /*N=*/s.seq,
      /*K=*/s.head_dim,
      /*heads=*/s.q_heads,
      /*segments=*/1,
      /*alpha=*/1.0f,
      Causal::kOutputLower,
      Operand{dout, t.seq * t.out_w, t.hd, t.out_w, 1, 1},                             // dO: (i, d)
      Operand{qkv + t.v_col(), t.seq * t.w, t.hd, 1, t.w, static_cast<int>(t.group)},  // V^T: (d, j)
      Output{dprobs, t.hq * t.ss, t.ss, t.seq, 1}};
  launch(dp, s.batch, stream);

  // dV = sum over the group's query heads of P^T dO
  const Gemm dv{/*M=*/s.seq,
                /*N=*/s.head_dim,
                /*K=*/s.seq,
                /*heads=*/s.kv_heads,
                /*segments=*/static_cast<int>(t.group),
                /*alpha=*/1.0f,
                Causal::kInnerFrom,
                Operand{probs, t.hq * t.ss, t.ss, 1, t.seq, 1},        // P^T: (j, i)
                Operand{dout, t.seq * t.out_w, t.hd, t.out_w, 1, 1},   // dO: (i, d)
                Output{dqkv + t.v_col(), t.seq * t.w, t.hd, t.w, 1}};  // dV: (j, d)
  launch(dv, s.batch, stream);
}

void causal_softmax_backward(float* dscores, const float* dprobs, const float* probs, const AttentionShape& s,
                             cudaStream_t stream) {
  check_shape(s, "causal_softmax_backward");
  const std::size_t rows = static_cast<std::size_t>(s.batch) * s.q_heads * s.seq;
  causal_softmax_backward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(dscores, dprobs, probs,
                                                                                       s.seq);
  FS_CUDA_CHECK_LAUNCH();
}

void attention_scores_backward(float* dqkv, const float* dscores, const float* qkv, const AttentionShape& s,
                               cudaStream_t stream) {
  check_shape(s, "attention_scores_backward");
  const Strides t(s);
  const float scale = softmax_scale(s);
  // dQ = scale * dS K
  const Gemm dq{/*M=*/s.seq,
                /*N=*/s.head_dim,
                /*K=*/s.seq,
                /*heads=*/s.q_heads,
                /*segments=*/1,
                /*alpha=*/scale,
                Causal::kInnerUpTo,
                Operand{dscores, t.hq * t.ss, t.ss, t.seq, 1, 1},                                // dS: (i, j)
                Operand{qkv + t.k_col(), t.seq * t.w, t.hd, t.w, 1, static_cast<int>(t.group)},  // K: (j, d)
                Output{dqkv, t.seq * t.w, t.hd, t.w, 1}};                                        // dQ: (i, d)
  launch(dq, s.batch, stream);

  // dK = scale * sum over the group's query heads of dS^T Q
  const Gemm dk{/*M=*/s.seq,
                /*N=*/s.head_dim,
                /*K=*/s.seq,
                /*heads=*/s.kv_heads,
                /*segments=*/static_cast<int>(t.group),
                /*alpha=*/scale,
                Causal::kInnerFrom,
                Operand{dscores, t.hq * t.ss, t.ss, 1, t.seq, 1},      // dS^T: (j, i)
                Operand{qkv, t.seq * t.w, t.hd, t.w, 1, 1},            // Q: (i, d)
                Output{dqkv + t.k_col(), t.seq * t.w, t.hd, t.w, 1}};  // dK: (j, d)
  launch(dk, s.batch, stream);
}

void attention_forward(float* out, float* probs, const float* qkv, const AttentionShape& s,
                       cudaStream_t stream) {
  attention_scores(probs, qkv, s, stream);
  causal_softmax_forward(probs, probs, s, stream);  // in place, row by row
  attention_values(out, probs, qkv, s, stream);
}

void attention_backward(float* dqkv, float* scratch_a, float* scratch_b, const float* dout,
                        const float* probs, const float* qkv, const AttentionShape& s, cudaStream_t stream) {
  attention_values_backward(scratch_a, dqkv, dout, probs, qkv, s, stream);
  causal_softmax_backward(scratch_b, scratch_a, probs, s, stream);
  attention_scores_backward(dqkv, scratch_b, qkv, s, stream);
}

}  // namespace foresight::kernels
