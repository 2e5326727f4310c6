// Eigen attention and fused cross-entropy for the CPU backend.
#include "runtime/cpu_fast.h"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace foresight::runtime {

namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Strided = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;
using CStrided = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
using MapM = Eigen::Map<RowMat>;
using CMapM = Eigen::Map<const RowMat>;

// Views of one head of one sequence in the fused QKV layout (rows are tokens, `w` floats apart).
struct Heads {
  const kernels::AttentionShape& s;
  int w, group;
  explicit Heads(const kernels::AttentionShape& sh) : s(sh), w(sh.qkv_width()), group(sh.q_heads / sh.kv_heads) {}
  std::size_t base(int b) const { return static_cast<std::size_t>(b) * s.seq * w; }
  std::size_t q(int b, int h) const { return base(b) + static_cast<std::size_t>(h) * s.head_dim; }
  std::size_t k(int b, int h) const { return base(b) + static_cast<std::size_t>(s.q_heads + h / group) * s.head_dim; }
  std::size_t v(int b, int h) const {
    return base(b) + static_cast<std::size_t>(s.q_heads + s.kv_heads + h / group) * s.head_dim;
  }
  std::size_t out(int b, int h) const {
    return static_cast<std::size_t>(b) * s.seq * s.q_heads * s.head_dim + static_cast<std::size_t>(h) * s.head_dim;
  }
  std::size_t probs(int b, int h) const { return (static_cast<std::size_t>(b) * s.q_heads + h) * s.seq * s.seq; }
};
}  // namespace

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

void attention_backward_fast(float* dqkv, float* scratch, const float* dout, const float* probs, const float* qkv,
                             const kernels::AttentionShape& s) {
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
      for (int i = 0; i < S; ++i) {      // dS = P * (dP - rowsum(dP * P)), causal part only
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

double crossentropy_fused(float* losses, float* dlogits, const float* logits, const int* targets, float dloss, int rows,
                          int vocab) {
  double total = 0;
  for (int r = 0; r < rows; ++r) {
    const float* l = logits + static_cast<std::size_t>(r) * vocab;
    float* d = dlogits + static_cast<std::size_t>(r) * vocab;
    const float mx = *std::max_element(l, l + vocab);
    double sum = 0;
    for (int c = 0; c < vocab; ++c) sum += (d[c] = std::exp(l[c] - mx));
    const float scale = static_cast<float>(dloss / sum);
    for (int c = 0; c < vocab; ++c) d[c] *= scale;
    d[targets[r]] -= dloss;
    losses[r] = static_cast<float>(std::log(sum) - (l[targets[r]] - mx));
    total += losses[r];
  }
  return total;
}

}  // namespace foresight::runtime
