// Eigen attention and fused cross-entropy for the CPU backend.
#include "runtime/backends/cpu_fast.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/backends/buffer.h"

namespace foresight::runtime {

namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Strided = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;
using CStrided = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
using MapM = Eigen::Map<RowMat>;
using CMapM = Eigen::Map<const RowMat>;
using RowArr = Eigen::Array<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapA = Eigen::Map<RowArr>;
using CMapA = Eigen::Map<const RowArr>;
using CVec = Eigen::Map<const Eigen::Array<float, 1, Eigen::Dynamic>>;
using Vec1 = Eigen::Map<Eigen::Array<float, 1, Eigen::Dynamic>>;
using Col = Eigen::Map<Eigen::Array<float, Eigen::Dynamic, 1>>;
using CCol = Eigen::Map<const Eigen::Array<float, Eigen::Dynamic, 1>>;
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)

// Views of one head of one sequence in the fused QKV layout (rows are tokens, `w` floats apart).
struct Heads {
  const kernels::AttentionShape& s;
  int w, group;
  explicit Heads(const kernels::AttentionShape& sh)
      : s(sh), w(sh.qkv_width()), group(sh.q_heads / sh.kv_heads) {}
  std::size_t base(int b) const { return static_cast<std::size_t>(b) * s.seq * w; }
  std::size_t q(int b, int h) const { return base(b) + static_cast<std::size_t>(h) * s.head_dim; }
  std::size_t k(int b, int h) const {
    return base(b) + static_cast<std::size_t>(s.q_heads + h / group) * s.head_dim;
  }
  std::size_t v(int b, int h) const {
    return base(b) + static_cast<std::size_t>(s.q_heads + s.kv_heads + h / group) * s.head_dim;
  }
  std::size_t out(int b, int h) const {
    return static_cast<std::size_t>(b) * s.seq * s.q_heads * s.head_dim +
           static_cast<std::size_t>(h) * s.head_dim;
  }
  std::size_t probs(int b, int h) const {
    return (static_cast<std::size_t>(b) * s.q_heads + h) * s.seq * s.seq;
  }
};
}  // namespace

void gemm_forward(float* out, const float* in, const float* w, int rows, int k, int n) {
  MapM(out, rows, n).noalias() = CMapM(in, rows, k) * CMapM(w, k, n);
}

void gemm_backward(float* din, float* dw, const float* dout, const float* in, const float* w, int rows, int k,
                   int n) {
  MapM(din, rows, k).noalias() = CMapM(dout, rows, n) * CMapM(w, k, n).transpose();
  MapM(dw, k, n).noalias() += CMapM(in, rows, k).transpose() * CMapM(dout, rows, n);
}

void rmsnorm_forward_fast(float* out, float* rstd, const float* x, const float* weight, int rows, int cols,
                          float eps) {
  CMapA X(x, rows, cols);
  Col r(rstd, rows);
  r = ((X.square().rowwise().sum() / static_cast<float>(cols)) + eps).rsqrt();
  MapA(out, rows, cols) = (X.colwise() * r).rowwise() * CVec(weight, cols);
}

void rmsnorm_backward_fast(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                           const float* rstd, int rows, int cols) {
  // Row by row, so every pass is a contiguous vectorised stream (the column sums of a whole-matrix
  // expression made Eigen walk the row-major arrays by column: 12x slower at 128 x 256).
  const auto w = CVec(weight, cols);
  Vec1 dw(dweight, cols);
  for (int r = 0; r < rows; ++r) {
    const std::size_t at = static_cast<std::size_t>(r) * cols;
    const CVec X(x + at, cols), dY(dout + at, cols);
    const float rs = rstd[r];
    const float k = (dY * w * X).sum() * rs * rs * rs / static_cast<float>(cols);
    Vec1(dx + at, cols) = dY * w * rs - X * k;
    dw += dY * X * rs;
  }
}

void swiglu_forward_fast(float* out, const float* gate_up, int rows, int cols) {
  CMapA G(gate_up, rows, 2 * cols);
  const auto g = G.leftCols(cols);
  MapA(out, rows, cols) = g * (1.0f + (-g).exp()).inverse() * G.rightCols(cols);
}

void swiglu_backward_fast(float* dgate_up, const float* gate_up, const float* dout, int rows, int cols) {
  // Row by row; the sigmoid lands in the up half of the output first (no temporary).
  for (int r = 0; r < rows; ++r) {
    const std::size_t in = static_cast<std::size_t>(r) * 2 * cols;
    const CVec g(gate_up + in, cols), u(gate_up + in + cols, cols),
        d(dout + static_cast<std::size_t>(r) * cols, cols);
    Vec1 dg(dgate_up + in, cols), du(dgate_up + in + cols, cols);
    du = (1.0f + (-g).exp()).inverse();
    dg = d * u * du * (1.0f + g * (1.0f - du));
    du *= d * g;
  }
}

void rmsnorm_forward_eager(float* out, float* rstd, const float* x, const float* weight, int rows, int cols,
                           float eps) {
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  CMapA X(x, rows, cols);
  Buffer sq(n), ms(static_cast<std::size_t>(rows)), y(n);
  MapA(sq.data(), rows, cols) = X.square();                                                       // pow
  Col(ms.data(), rows) = MapA(sq.data(), rows, cols).rowwise().sum() / static_cast<float>(cols);  // mean
  Col(rstd, rows) = (Col(ms.data(), rows) + eps).rsqrt();                                         // rsqrt
  MapA(y.data(), rows, cols) = X.colwise() * CCol(rstd, rows);                                    // multiply
  MapA(out, rows, cols) = MapA(y.data(), rows, cols).rowwise() * CVec(weight, cols);              // scale
}

void rmsnorm_backward_eager(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                            const float* rstd, int rows, int cols) {
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  CMapA X(x, rows, cols), dOut(dout, rows, cols);
  const CCol r(rstd, rows);
  Buffer y(n), dy(n), rowsum(static_cast<std::size_t>(rows)), dsq(n), dx2(n);
  MapA(y.data(), rows, cols) = X.colwise() * r;
  // The weight's gradient: column sums of dout * y, row by row (contiguous streams).
  Vec1 dw(dweight, cols);
  for (int i = 0; i < rows; ++i) {
    const std::size_t at = static_cast<std::size_t>(i) * cols;
    dw += CVec(dout + at, cols) * CVec(y.data() + at, cols);
  }
  MapA(dy.data(), rows, cols) = dOut.rowwise() * CVec(weight, cols);
  MapA(dx, rows, cols) = MapA(dy.data(), rows, cols).colwise() * r;
  Col(rowsum.data(), rows) = (MapA(dy.data(), rows, cols) * X).rowwise().sum();
  // d(rstd) = row sum; d(mean) = -rstd^3 / 2 times it; d(x^2) = d(mean) / cols, expanded.
  const Eigen::Array<float, Eigen::Dynamic, 1> dmean = -0.5f * r.cube() * Col(rowsum.data(), rows);
  MapA(dsq.data(), rows, cols) = (dmean / static_cast<float>(cols)).replicate(1, cols);
  MapA(dx2.data(), rows, cols) = 2.0f * X * MapA(dsq.data(), rows, cols);
  MapA(dx, rows, cols) += MapA(dx2.data(), rows, cols);
}

void swiglu_forward_eager(float* out, const float* gate_up, int rows, int cols) {
  CMapA G(gate_up, rows, 2 * cols);
  Buffer s(static_cast<std::size_t>(rows) * cols);
  MapA(s.data(), rows, cols) = G.leftCols(cols) * (1.0f + (-G.leftCols(cols)).exp()).inverse();  // silu
  MapA(out, rows, cols) = MapA(s.data(), rows, cols) * G.rightCols(cols);                        // multiply
}

void swiglu_backward_eager(float* dgate_up, const float* gate_up, const float* dout, int rows, int cols) {
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  CMapA G(gate_up, rows, 2 * cols), dOut(dout, rows, cols);
  MapA dG(dgate_up, rows, 2 * cols);
  const auto g = G.leftCols(cols);
  Buffer sig(n), s(n), ds(n);
  MapA Sig(sig.data(), rows, cols), S(s.data(), rows, cols), dS(ds.data(), rows, cols);
  Sig = (1.0f + (-g).exp()).inverse();                       // sigmoid: the one exponential per element
  S = g * Sig;                                               // silu(gate), recomputed
  dG.rightCols(cols) = dOut * S;                             // d(up)
  dS = dOut * G.rightCols(cols);                             // d(silu)
  dG.leftCols(cols) = dS * Sig * (1.0f + g * (1.0f - Sig));  // silu's backward
}

void gelu_forward_fast(float* out, const float* x, std::size_t n) {
  const auto u = CCol(x, static_cast<Eigen::Index>(n));
  Col(out, static_cast<Eigen::Index>(n)) = 0.5f * u * (1.0f + (kGeluC * (u + 0.044715f * u.cube())).tanh());
}

void gelu_backward_fast(float* dx, const float* x, const float* dout, std::size_t n) {
  const auto u = CCol(x, static_cast<Eigen::Index>(n));
  const Eigen::Array<float, Eigen::Dynamic, 1> t = (kGeluC * (u + 0.044715f * u.cube())).tanh();
  Col(dx, static_cast<Eigen::Index>(n)) =
      CCol(dout, static_cast<Eigen::Index>(n)) *
      (0.5f * (1.0f + t) + 0.5f * u * (1.0f - t.square()) * kGeluC * (1.0f + 3.0f * 0.044715f * u.square()));
}

void adamw_fast(float* params, float* m, float* v, const float* grads, std::size_t n,
                const kernels::AdamWConfig& c, int step, float grad_scale) {
  const float bc1 = 1.0f - std::pow(c.beta1, static_cast<float>(step));
  const float bc2 = 1.0f - std::pow(c.beta2, static_cast<float>(step));
  // In blocks that stay in L1 (4 arrays x 8 KiB): the three updates below are three passes over a
  // block, so over memory the step is one pass, reading parameters, gradients and moments once and
  // writing parameters and moments once (28 bytes per parameter, as fused AdamW kernels do). As
  // three whole-tensor expressions it was three passes (40 bytes), measurably slower with the
  // state out of cache (`foresight calibrate` prints AdamW's GB/s).
  constexpr std::size_t kBlock = 2048;
  for (std::size_t at = 0; at < n; at += kBlock) {
    const auto N = static_cast<Eigen::Index>(std::min(kBlock, n - at));
    Col P(params + at, N), M(m + at, N), V(v + at, N);
    const auto G = CCol(grads + at, N) * grad_scale;
    M = c.beta1 * M + (1.0f - c.beta1) * G;
    V = c.beta2 * V + (1.0f - c.beta2) * G.square();
    P -= c.lr * ((M / bc1) / ((V / bc2).sqrt() + c.eps) + c.weight_decay * P);
  }
}

void attention_forward_fast(float* out, float* probs, const float* qkv, const kernels::AttentionShape& s) {
  const Heads x(s);
  const int S = s.seq, D = s.head_dim, ow = s.q_heads * s.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.q_heads; ++h) {
      CStrided Q(qkv + x.q(b, h), S, D, Eigen::OuterStride<>(x.w));
      CStrided K(qkv + x.k(b, h), S, D, Eigen::OuterStride<>(x.w));
      CStrided V(qkv + x.v(b, h), S, D, Eigen::OuterStride<>(x.w));
      MapM P(probs + x.probs(b, h), S, S);
      P.noalias() = scale * (Q * K.transpose());
      for (int i = 0; i < S; ++i) {  // causal softmax of row i over keys 0..i
        float* row = P.data() + static_cast<std::size_t>(i) * S;
        const float mx = *std::max_element(row, row + i + 1);
        float sum = 0;
        for (int j = 0; j <= i; ++j) sum += (row[j] = std::exp(row[j] - mx));
        const float inv = 1.0f / sum;
        for (int j = 0; j <= i; ++j) row[j] *= inv;
        std::fill(row + i + 1, row + S, 0.0f);
      }
      Strided O(out + x.out(b, h), S, D, Eigen::OuterStride<>(ow));
      O.noalias() = P * V;
    }
}

void attention_backward_fast(float* dqkv, float* scratch, const float* dout, const float* probs,
                             const float* qkv, const kernels::AttentionShape& s) {
  const Heads x(s);
  const int S = s.seq, D = s.head_dim, ow = s.q_heads * s.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // k and v gradients accumulate over the query heads that share them.
  for (int b = 0; b < s.batch; ++b)
    for (int g = 0; g < s.kv_heads; ++g) {
      Strided(dqkv + x.k(b, g * x.group), S, D, Eigen::OuterStride<>(x.w)).setZero();
      Strided(dqkv + x.v(b, g * x.group), S, D, Eigen::OuterStride<>(x.w)).setZero();
    }
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.q_heads; ++h) {
      CStrided Q(qkv + x.q(b, h), S, D, Eigen::OuterStride<>(x.w));
      CStrided K(qkv + x.k(b, h), S, D, Eigen::OuterStride<>(x.w));
      CStrided V(qkv + x.v(b, h), S, D, Eigen::OuterStride<>(x.w));
      CStrided dO(dout + x.out(b, h), S, D, Eigen::OuterStride<>(ow));
      CMapM P(probs + x.probs(b, h), S, S);
      MapM dS(scratch, S, S);
      Strided(dqkv + x.v(b, h), S, D, Eigen::OuterStride<>(x.w)).noalias() += P.transpose() * dO;
      dS.noalias() = dO * V.transpose();  // dP
      for (int i = 0; i < S; ++i) {       // dS = P * (dP - rowsum(dP * P)), causal part only
        float* d = dS.data() + static_cast<std::size_t>(i) * S;
        const float* p = P.data() + static_cast<std::size_t>(i) * S;
        float dot = 0;
        for (int j = 0; j <= i; ++j) dot += d[j] * p[j];
        for (int j = 0; j <= i; ++j) d[j] = p[j] * (d[j] - dot) * scale;
        std::fill(d + i + 1, d + S, 0.0f);
      }
      Strided(dqkv + x.q(b, h), S, D, Eigen::OuterStride<>(x.w)).noalias() = dS * K;
      Strided(dqkv + x.k(b, h), S, D, Eigen::OuterStride<>(x.w)).noalias() += dS.transpose() * Q;
    }
}

void softmax_row_stats(float* row_max, float* row_sum, float* exps, const float* logits, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const auto l = CCol(logits + static_cast<std::size_t>(r) * cols, cols);
    Col e(exps + static_cast<std::size_t>(r) * cols, cols);
    row_max[r] = l.maxCoeff();
    e = (l - row_max[r]).exp();
    row_sum[r] = e.sum();
  }
}

void scale_rows(float* x, const float* scale, int rows, int cols) {
  MapA(x, rows, cols).colwise() *= CCol(scale, rows);
}

double crossentropy_fused(float* losses, float* dlogits, const float* logits, const int* targets, float dloss,
                          int rows, int vocab) {
  double total = 0;
  for (int r = 0; r < rows; ++r) {
    const auto l = CCol(logits + static_cast<std::size_t>(r) * vocab, vocab);
    Col d(dlogits + static_cast<std::size_t>(r) * vocab, vocab);
    const float mx = l.maxCoeff();
    d = (l - mx).exp();
    const float sum = d.sum();
    d *= dloss / sum;
    d(targets[r]) -= dloss;
    losses[r] = std::log(sum) - (l(targets[r]) - mx);
    total += losses[r];
  }
  return total;
}

void RopeTable::apply(float* qkv, const kernels::AttentionShape& s, float theta, bool inverse) {
  if (s.seq != seq_ || s.head_dim != head_dim_ || theta != theta_) {
    cos_.resize(static_cast<std::size_t>(s.seq) * (s.head_dim / 2));
    sin_.resize(cos_.size());
    kernels::rope_table(cos_.data(), sin_.data(), s.seq, s.head_dim, theta);
    seq_ = s.seq;
    head_dim_ = s.head_dim;
    theta_ = theta;
  }
  kernels::rope_rotate(qkv, s, cos_.data(), sin_.data(), inverse);
}

}  // namespace foresight::runtime
