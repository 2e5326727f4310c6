// CPU reference kernels (see reference.h): straightforward loops, fp32 storage, double where a
// reduction over a row would otherwise lose digits.
#include "kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace foresight::kernels {

namespace {
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void embedding_forward_cpu(float* out, const float* table, const int* ids, int rows, int hidden) {
  for (int r = 0; r < rows; ++r)
    std::copy_n(table + static_cast<std::size_t>(ids[r]) * hidden, hidden,
                out + static_cast<std::size_t>(r) * hidden);
}

void embedding_backward_cpu(float* dtable, const float* dout, const int* ids, int rows, int hidden) {
  for (int r = 0; r < rows; ++r) {
    const float* d = dout + static_cast<std::size_t>(r) * hidden;
    float* row = dtable + static_cast<std::size_t>(ids[r]) * hidden;
    for (int c = 0; c < hidden; ++c) row[c] += d[c];
  }
}

void matmul_forward_cpu(float* out, const float* in, const float* w, int rows, int k, int n) {
  for (int r = 0; r < rows; ++r) {
    float* o = out + static_cast<std::size_t>(r) * n;
    std::fill(o, o + n, 0.0f);
    for (int i = 0; i < k; ++i) {
      const float a = in[static_cast<std::size_t>(r) * k + i];
      const float* wr = w + static_cast<std::size_t>(i) * n;
      for (int c = 0; c < n; ++c) o[c] += a * wr[c];
    }
  }
}

void matmul_backward_cpu(float* din, float* dw, const float* dout, const float* in, const float* w, int rows,
                         int k, int n) {
  for (int r = 0; r < rows; ++r) {
    const float* d = dout + static_cast<std::size_t>(r) * n;
    for (int i = 0; i < k; ++i) {
      const float* wr = w + static_cast<std::size_t>(i) * n;
      float acc = 0;
      for (int c = 0; c < n; ++c) acc += d[c] * wr[c];
      din[static_cast<std::size_t>(r) * k + i] = acc;
      const float a = in[static_cast<std::size_t>(r) * k + i];
      float* dwr = dw + static_cast<std::size_t>(i) * n;
      for (int c = 0; c < n; ++c) dwr[c] += a * d[c];
    }
  }
}

void rmsnorm_forward_cpu(float* out, float* rstd, const float* x, const float* weight, int rows, int cols,
                         float eps) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<std::size_t>(r) * cols;
    double ss = 0;
    for (int c = 0; c < cols; ++c) ss += static_cast<double>(xr[c]) * xr[c];
    const float s = static_cast<float>(1.0 / std::sqrt(ss / cols + eps));
    rstd[r] = s;
    float* o = out + static_cast<std::size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) o[c] = xr[c] * s * weight[c];
  }
}

void rmsnorm_backward_cpu(float* dx, float* dweight, const float* dout, const float* x, const float* weight,
                          const float* rstd, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const std::size_t off = static_cast<std::size_t>(r) * cols;
    const float s = rstd[r];
    double dot = 0;  // sum_j w_j dy_j x_j
    for (int c = 0; c < cols; ++c) dot += static_cast<double>(weight[c]) * dout[off + c] * x[off + c];
    const float k = static_cast<float>(dot) * s * s * s / static_cast<float>(cols);
    for (int c = 0; c < cols; ++c) {
      dx[off + c] = s * weight[c] * dout[off + c] - k * x[off + c];
      dweight[c] += dout[off + c] * x[off + c] * s;
    }
  }
}

void layernorm_forward_cpu(float* out, float* mean, float* rstd, const float* x, const float* weight,
                           const float* bias, int rows, int cols, float eps) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<std::size_t>(r) * cols;
    double sum = 0;
    for (int c = 0; c < cols; ++c) sum += xr[c];
    const double mu = sum / cols;
    double var = 0;
    for (int c = 0; c < cols; ++c) var += (xr[c] - mu) * (xr[c] - mu);
    const float s = static_cast<float>(1.0 / std::sqrt(var / cols + eps));
    mean[r] = static_cast<float>(mu);
    rstd[r] = s;
    float* o = out + static_cast<std::size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) o[c] = (xr[c] - mean[r]) * s * weight[c] + bias[c];
  }
}

void layernorm_backward_cpu(float* dx, float* dweight, float* dbias, const float* dout, const float* x,
                            const float* weight, const float* mean, const float* rstd, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const std::size_t off = static_cast<std::size_t>(r) * cols;
    double mean_d = 0, mean_dx = 0;  // mean(dxhat), mean(dxhat * xhat)
    for (int c = 0; c < cols; ++c) {
      const float xhat = (x[off + c] - mean[r]) * rstd[r];
      const float d = dout[off + c] * weight[c];
      mean_d += d;
      mean_dx += static_cast<double>(d) * xhat;
    }
    mean_d /= cols;
    mean_dx /= cols;
    for (int c = 0; c < cols; ++c) {
      const float xhat = (x[off + c] - mean[r]) * rstd[r];
      const float d = dout[off + c] * weight[c];
      dx[off + c] = rstd[r] * (d - static_cast<float>(mean_d) - xhat * static_cast<float>(mean_dx));
      dweight[c] += dout[off + c] * xhat;
      dbias[c] += dout[off + c];
    }
  }
}

void residual_forward_cpu(float* out, const float* a, const float* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void bias_gelu_forward_cpu(float* out, const float* x, const float* bias, int rows, int cols) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const std::size_t i = static_cast<std::size_t>(r) * cols + c;
      const float u = x[i] + (bias ? bias[c] : 0.0f);
      out[i] = 0.5f * u * (1.0f + std::tanh(kGeluC * (u + 0.044715f * u * u * u)));
    }
}

void bias_gelu_backward_cpu(float* dx, float* dbias, const float* x, const float* bias, const float* dout,
                            int rows, int cols) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const std::size_t i = static_cast<std::size_t>(r) * cols + c;
      const float u = x[i] + (bias ? bias[c] : 0.0f);
      const float t = std::tanh(kGeluC * (u + 0.044715f * u * u * u));
      const float grad =
          0.5f * (1.0f + t) + 0.5f * u * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * 0.044715f * u * u);
      dx[i] = dout[i] * grad;
      if (dbias) dbias[c] += dx[i];
    }
}

void swiglu_forward_cpu(float* out, const float* gate_up, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const float* g = gate_up + static_cast<std::size_t>(r) * 2 * cols;
    const float* u = g + cols;
    float* o = out + static_cast<std::size_t>(r) * cols;
    for (int c = 0; c < cols; ++c) o[c] = g[c] * sigmoid(g[c]) * u[c];
  }
}

void swiglu_backward_cpu(float* dgate_up, const float* gate_up, const float* dout, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const float* g = gate_up + static_cast<std::size_t>(r) * 2 * cols;
    const float* u = g + cols;
    const float* d = dout + static_cast<std::size_t>(r) * cols;
    float* dg = dgate_up + static_cast<std::size_t>(r) * 2 * cols;
    float* du = dg + cols;
    for (int c = 0; c < cols; ++c) {
      const float s = sigmoid(g[c]);
      dg[c] = d[c] * u[c] * s * (1.0f + g[c] * (1.0f - s));
      du[c] = d[c] * g[c] * s;
    }
  }
}

void rope_table(float* cos, float* sin, int seq, int head_dim, float theta) {
  const int half = head_dim / 2;
  std::vector<float> inv_freq(static_cast<std::size_t>(half));
  for (int p = 0; p < half; ++p) inv_freq[p] = static_cast<float>(std::pow(theta, -2.0 * p / head_dim));
  for (int i = 0; i < seq; ++i)
    for (int p = 0; p < half; ++p) {
      const float angle = static_cast<float>(i) * inv_freq[p];
      cos[static_cast<std::size_t>(i) * half + p] = std::cos(angle);
      sin[static_cast<std::size_t>(i) * half + p] = std::sin(angle);
    }
}

void rope_rotate(float* qkv, const AttentionShape& s, const float* cos, const float* sin, bool inverse) {
  const int half = s.head_dim / 2, w = s.qkv_width();
  const int rotated = s.q_heads + s.kv_heads;  // q and k heads sit first in each row
  for (int b = 0; b < s.batch; ++b)
    for (int i = 0; i < s.seq; ++i) {
      float* row = qkv + (static_cast<std::size_t>(b) * s.seq + i) * w;
      const float* c = cos + static_cast<std::size_t>(i) * half;
      const float* sn = sin + static_cast<std::size_t>(i) * half;
      for (int h = 0; h < rotated; ++h) {
        float* x = row + h * s.head_dim;
        for (int p = 0; p < half; ++p) {
          const float sp = inverse ? -sn[p] : sn[p];
          const float x1 = x[p], x2 = x[p + half];
          x[p] = x1 * c[p] - x2 * sp;
          x[p + half] = x1 * sp + x2 * c[p];
        }
      }
    }
}

void rope_cpu(float* qkv, const AttentionShape& s, float theta, bool inverse) {
  const std::size_t n = static_cast<std::size_t>(s.seq) * (s.head_dim / 2);
  std::vector<float> cos(n), sin(n);
  rope_table(cos.data(), sin.data(), s.seq, s.head_dim, theta);
  rope_rotate(qkv, s, cos.data(), sin.data(), inverse);
}

namespace {
// Index helpers for the fused QKV layout.
struct QkvView {
  const AttentionShape& s;
  int w, group;
  explicit QkvView(const AttentionShape& shape)
      : s(shape), w(shape.qkv_width()), group(shape.q_heads / shape.kv_heads) {}
  std::size_t row(int b, int i) const { return (static_cast<std::size_t>(b) * s.seq + i) * w; }
  std::size_t q(int b, int i, int h) const { return row(b, i) + static_cast<std::size_t>(h) * s.head_dim; }
  std::size_t k(int b, int j, int h) const {
    return row(b, j) + static_cast<std::size_t>(s.q_heads + h / group) * s.head_dim;
  }
  std::size_t v(int b, int j, int h) const {
    return row(b, j) + static_cast<std::size_t>(s.q_heads + s.kv_heads + h / group) * s.head_dim;
  }
  std::size_t score(int b, int h, int i) const {
    return ((static_cast<std::size_t>(b) * s.q_heads + h) * s.seq + i) * s.seq;
  }
  std::size_t out(int b, int i, int h) const {
    return (static_cast<std::size_t>(b) * s.seq + i) * s.q_heads * s.head_dim +
           static_cast<std::size_t>(h) * s.head_dim;
  }
};
}  // namespace

void attention_scores_cpu(float* scores, const float* qkv, const AttentionShape& s) {
  const QkvView x(s);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.q_heads; ++h)
      for (int i = 0; i < s.seq; ++i) {
        float* row = scores + x.score(b, h, i);
        const float* q = qkv + x.q(b, i, h);
        for (int j = 0; j < s.seq; ++j) {
          if (j > i) {
            row[j] = 0;
            continue;
          }
          const float* k = qkv + x.k(b, j, h);
          float dot = 0;
          for (int d = 0; d < s.head_dim; ++d) dot += q[d] * k[d];
          row[j] = dot * scale;
        }
      }
}

void causal_softmax_forward_cpu(float* probs, const float* scores, const AttentionShape& s) {
  const std::size_t rows = static_cast<std::size_t>(s.batch) * s.q_heads * s.seq;
  for (std::size_t r = 0; r < rows; ++r) {
    const int i = static_cast<int>(r % s.seq);  // query position: keys 0..i are visible
    const float* in = scores + r * s.seq;
    float* out = probs + r * s.seq;
    float mx = -std::numeric_limits<float>::infinity();
    for (int j = 0; j <= i; ++j) mx = std::max(mx, in[j]);
    double sum = 0;
    for (int j = 0; j <= i; ++j) {
      out[j] = std::exp(in[j] - mx);
      sum += out[j];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int j = 0; j <= i; ++j) out[j] *= inv;
    for (int j = i + 1; j < s.seq; ++j) out[j] = 0;
  }
}

void attention_values_cpu(float* out, const float* probs, const float* qkv, const AttentionShape& s) {
  const QkvView x(s);
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.q_heads; ++h)
      for (int i = 0; i < s.seq; ++i) {
        float* o = out + x.out(b, i, h);
        std::fill(o, o + s.head_dim, 0.0f);
        const float* p = probs + x.score(b, h, i);
        for (int j = 0; j <= i; ++j) {
          const float* v = qkv + x.v(b, j, h);
          for (int d = 0; d < s.head_dim; ++d) o[d] += p[j] * v[d];
        }
      }
}

void attention_values_backward_cpu(float* dprobs, float* dqkv, const float* dout, const float* probs,
                                   const float* qkv, const AttentionShape& s) {
  const QkvView x(s);
  for (int b = 0; b < s.batch; ++b)
    for (int j = 0; j < s.seq; ++j)
      for (int g = 0; g < s.kv_heads; ++g) {
        float* dv = dqkv + x.v(b, j, g * x.group);
        std::fill(dv, dv + s.head_dim, 0.0f);
      }
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.q_heads; ++h)
      for (int i = 0; i < s.seq; ++i) {
        const float* dO = dout + x.out(b, i, h);
        const float* p = probs + x.score(b, h, i);
        float* dp = dprobs + x.score(b, h, i);
        for (int j = 0; j < s.seq; ++j) {
          if (j > i) {
            dp[j] = 0;
            continue;
          }
          const float* v = qkv + x.v(b, j, h);
          float* dv = dqkv + x.v(b, j, h);
          float dot = 0;
          for (int d = 0; d < s.head_dim; ++d) {
            dot += dO[d] * v[d];
            dv[d] += p[j] * dO[d];
          }
          dp[j] = dot;
        }
      }
}

void causal_softmax_backward_cpu(float* dscores, const float* dprobs, const float* probs,
                                 const AttentionShape& s) {
  const std::size_t rows = static_cast<std::size_t>(s.batch) * s.q_heads * s.seq;
  for (std::size_t r = 0; r < rows; ++r) {
    const int i = static_cast<int>(r % s.seq);
    const float* p = probs + r * s.seq;
    const float* dp = dprobs + r * s.seq;
    float* ds = dscores + r * s.seq;
    double dot = 0;
    for (int j = 0; j <= i; ++j) dot += static_cast<double>(p[j]) * dp[j];
    for (int j = 0; j <= i; ++j) ds[j] = p[j] * (dp[j] - static_cast<float>(dot));
    for (int j = i + 1; j < s.seq; ++j) ds[j] = 0;
  }
}

void attention_scores_backward_cpu(float* dqkv, const float* dscores, const float* qkv,
                                   const AttentionShape& s) {
  const QkvView x(s);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  for (int b = 0; b < s.batch; ++b)
    for (int i = 0; i < s.seq; ++i) {
      float* dq = dqkv + x.q(b, i, 0);
      std::fill(dq, dq + static_cast<std::size_t>(s.q_heads + s.kv_heads) * s.head_dim,
                0.0f);  // q and k parts
    }
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.q_heads; ++h)
      for (int i = 0; i < s.seq; ++i) {
        const float* ds = dscores + x.score(b, h, i);
        const float* q = qkv + x.q(b, i, h);
        float* dq = dqkv + x.q(b, i, h);
        for (int j = 0; j <= i; ++j) {
          const float g = ds[j] * scale;
          const float* k = qkv + x.k(b, j, h);
          float* dk = dqkv + x.k(b, j, h);
          for (int d = 0; d < s.head_dim; ++d) {
            dq[d] += g * k[d];
            dk[d] += g * q[d];
          }
        }
      }
}

void attention_forward_cpu(float* out, float* probs, const float* qkv, const AttentionShape& s) {
  attention_scores_cpu(probs, qkv, s);
  causal_softmax_forward_cpu(probs, probs, s);  // row by row, so in place is safe
  attention_values_cpu(out, probs, qkv, s);
}

void attention_backward_cpu(float* dqkv, float* scratch_a, float* scratch_b, const float* dout,
                            const float* probs, const float* qkv, const AttentionShape& s) {
  attention_values_backward_cpu(scratch_a, dqkv, dout, probs, qkv, s);
  causal_softmax_backward_cpu(scratch_b, scratch_a, probs, s);
  attention_scores_backward_cpu(dqkv, scratch_b, qkv, s);
}

void crossentropy_forward_cpu(float* losses, const float* logits, const int* targets, int rows, int vocab) {
  for (int r = 0; r < rows; ++r) {
    const float* l = logits + static_cast<std::size_t>(r) * vocab;
    const float mx = *std::max_element(l, l + vocab);
    double sum = 0;
    for (int c = 0; c < vocab; ++c) sum += std::exp(static_cast<double>(l[c] - mx));
    losses[r] = static_cast<float>(std::log(sum) - (l[targets[r]] - mx));
  }
}

void crossentropy_backward_cpu(float* dlogits, const float* logits, const int* targets, float dloss, int rows,
                               int vocab) {
  for (int r = 0; r < rows; ++r) {
    const float* l = logits + static_cast<std::size_t>(r) * vocab;
    float* d = dlogits + static_cast<std::size_t>(r) * vocab;
    const float mx = *std::max_element(l, l + vocab);
    double sum = 0;
    for (int c = 0; c < vocab; ++c) sum += std::exp(static_cast<double>(l[c] - mx));
    const double inv = 1.0 / sum;
    for (int c = 0; c < vocab; ++c) {
      const float p = static_cast<float>(std::exp(static_cast<double>(l[c] - mx)) * inv);
      d[c] = (p - (c == targets[r] ? 1.0f : 0.0f)) * dloss;
    }
  }
}

void target_logits_cpu(float* out, const float* logits, const int* targets, int first, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const int t = targets[r] - first;
    out[r] = t >= 0 && t < cols ? logits[static_cast<std::size_t>(r) * cols + t]
                                : -std::numeric_limits<float>::infinity();
  }
}

void softmax_row_stats_cpu(float* row_max, float* row_sum, float* exps, const float* logits, int rows,
                           int cols) {
  for (int r = 0; r < rows; ++r) {
    const float* l = logits + static_cast<std::size_t>(r) * cols;
    float* e = exps + static_cast<std::size_t>(r) * cols;
    const float mx = *std::max_element(l, l + cols);
    double sum = 0;
    for (int c = 0; c < cols; ++c) {
      e[c] = std::exp(l[c] - mx);
      sum += e[c];
    }
    row_max[r] = mx;
    row_sum[r] = static_cast<float>(sum);
  }
}

void scale_rows_cpu(float* x, const float* scale, int rows, int cols) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) x[static_cast<std::size_t>(r) * cols + c] *= scale[r];
}

void add_at_targets_cpu(float* x, const int* targets, int first, int rows, int cols, float value) {
  for (int r = 0; r < rows; ++r) {
    const int t = targets[r] - first;
    if (t >= 0 && t < cols) x[static_cast<std::size_t>(r) * cols + t] += value;
  }
}

void adamw_cpu(float* params, float* m, float* v, const float* grads, std::size_t n, const AdamWConfig& c,
               int step, float grad_scale) {
  const float bc1 = 1.0f - std::pow(c.beta1, static_cast<float>(step));
  const float bc2 = 1.0f - std::pow(c.beta2, static_cast<float>(step));
  for (std::size_t i = 0; i < n; ++i) {
    const float g = grads[i] * grad_scale;
    m[i] = c.beta1 * m[i] + (1.0f - c.beta1) * g;
    v[i] = c.beta2 * v[i] + (1.0f - c.beta2) * g * g;
    const float mhat = m[i] / bc1, vhat = v[i] / bc2;
    params[i] -= c.lr * (mhat / (std::sqrt(vhat) + c.eps) + c.weight_decay * params[i]);
  }
}

bool has_overflow_cpu(const float* grads, std::size_t n, float limit) {
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isfinite(grads[i]) || std::fabs(grads[i]) > limit) return true;
  return false;
}

void quantize_int8_cpu(std::int8_t* q, float* scales, const float* x, std::size_t n, int block) {
  const std::size_t bs = static_cast<std::size_t>(block);
  for (std::size_t b0 = 0, blk = 0; b0 < n; b0 += bs, ++blk) {
    const std::size_t e = std::min(n, b0 + bs);
    float amax = 0;
    for (std::size_t i = b0; i < e; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float scale = amax / 127.0f;
    scales[blk] = scale;
    for (std::size_t i = b0; i < e; ++i) {
      const float r = scale > 0 ? std::nearbyint(x[i] / scale) : 0.0f;
      q[i] = static_cast<std::int8_t>(std::clamp(r, -127.0f, 127.0f));
    }
  }
}

void dequantize_int8_cpu(float* x, const std::int8_t* q, const float* scales, std::size_t n, int block) {
  for (std::size_t i = 0; i < n; ++i)
    x[i] = static_cast<float>(q[i]) * scales[i / static_cast<std::size_t>(block)];
}

std::size_t topk_sparsify_cpu(std::int32_t* indices, float* values, float* residual, const float* grad,
                              std::size_t n, std::size_t k) {
  for (std::size_t i = 0; i < n; ++i) residual[i] += grad[i];  // the accumulator lives in `residual`
  k = std::min(k, n);
  std::vector<std::int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto larger = [&](std::int32_t a, std::int32_t b) {
    const float fa = std::fabs(residual[a]), fb = std::fabs(residual[b]);
    return fa > fb || (fa == fb && a < b);
  };
  std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(), larger);
  std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
  for (std::size_t i = 0; i < k; ++i) {
    indices[i] = order[i];
    values[i] = residual[order[i]];
    residual[order[i]] = 0;
  }
  return k;
}

}  // namespace foresight::kernels
