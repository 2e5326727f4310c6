// CPU reference kernels (kernels/reference.h) checked from first principles: every backward
// against central differences of its forward, and closed forms for the rest (a constant row's
// norm, causal softmax rows, uniform-logit cross-entropy, AdamW's first step, overflow limits,
// int8 round-trip error, top-k selection and error feedback).
#include "kernels/reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "tests/kernels/kernel_test_util.h"

namespace foresight::kernels {
namespace {

using testing::all_close;
using testing::dot;
using testing::random_vector;
using testing::Tolerance;

// --- finite differences ---------------------------------------------------------------------------
// Central differences of a scalar loss L = sum(forward(x) * g), summed in double over fp32
// forward outputs, with step h = 1e-2 on inputs of magnitude ~1. Error budget per derivative:
// truncation h^2/6 * |f'''| ~ 2e-5, plus fp32 rounding of the forward, ~sqrt(n) * 6e-8 * |y g| / (2h)
// ~ 3e-5 for these sizes (n <= a few hundred outputs). The tolerance 2e-3 + 1e-2 * |grad| is 50x
// that and still far below what a wrong term (a missing factor, a sign, a dropped path) produces.
constexpr float kStep = 1e-2f;
constexpr Tolerance kFiniteDiff{2e-3, 1e-2};

std::vector<double> numeric_gradient(std::vector<float>& x, const std::function<double()>& loss) {
  std::vector<double> grad(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float x0 = x[i];
    const float up = x0 + kStep, down = x0 - kStep;
    x[i] = up;
    const double lp = loss();
    x[i] = down;
    const double lm = loss();
    x[i] = x0;
    grad[i] = (lp - lm) / (static_cast<double>(up) - static_cast<double>(down));  // the step actually taken
  }
  return grad;
}

std::vector<float> minus(const std::vector<float>& a, float b) {
  std::vector<float> r(a);
  for (float& x : r) x -= b;
  return r;
}

// Accumulated outputs start here, so the tests also check "+=" rather than "=".
constexpr float kAccumStart = 0.25f;

TEST(ReferenceGradient, RmsnormBackward) {
  std::mt19937 rng(1);
  const int rows = 3, cols = 8;
  const float eps = 1e-5f;
  auto x = random_vector(rows * cols, rng);
  auto w = random_vector(cols, rng, 0.5f, 1.5f);
  const auto g = random_vector(rows * cols, rng);
  std::vector<float> out(rows * cols), rstd(rows);
  auto loss = [&] {
    rmsnorm_forward_cpu(out.data(), rstd.data(), x.data(), w.data(), rows, cols, eps);
    return dot(out, g);
  };
  loss();
  std::vector<float> dx(rows * cols), dw(cols, kAccumStart);
  rmsnorm_backward_cpu(dx.data(), dw.data(), g.data(), x.data(), w.data(), rstd.data(), rows, cols);
  EXPECT_TRUE(all_close(dx, numeric_gradient(x, loss), kFiniteDiff)) << "dx";
  EXPECT_TRUE(all_close(minus(dw, kAccumStart), numeric_gradient(w, loss), kFiniteDiff)) << "dweight";
}

TEST(ReferenceGradient, LayernormBackward) {
  std::mt19937 rng(2);
  const int rows = 3, cols = 8;
  const float eps = 1e-5f;
  auto x = random_vector(rows * cols, rng, -1.0f, 2.0f);  // non-zero mean
  auto w = random_vector(cols, rng, 0.5f, 1.5f);
  auto b = random_vector(cols, rng);
  const auto g = random_vector(rows * cols, rng);
  std::vector<float> out(rows * cols), mean(rows), rstd(rows);
  auto loss = [&] {
    layernorm_forward_cpu(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows, cols,
                          eps);
    return dot(out, g);
  };
  loss();
  std::vector<float> dx(rows * cols), dw(cols, kAccumStart), db(cols, kAccumStart);
  layernorm_backward_cpu(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), mean.data(),
                         rstd.data(), rows, cols);
  EXPECT_TRUE(all_close(dx, numeric_gradient(x, loss), kFiniteDiff)) << "dx";
  EXPECT_TRUE(all_close(minus(dw, kAccumStart), numeric_gradient(w, loss), kFiniteDiff)) << "dweight";
  EXPECT_TRUE(all_close(minus(db, kAccumStart), numeric_gradient(b, loss), kFiniteDiff)) << "dbias";
}

TEST(ReferenceGradient, BiasGeluBackward) {
  std::mt19937 rng(3);
  const int rows = 3, cols = 8;
  auto x = random_vector(rows * cols, rng, -3.0f, 3.0f);  // across the curved part of tanh
  auto bias = random_vector(cols, rng, -0.5f, 0.5f);
  const auto g = random_vector(rows * cols, rng);
  std::vector<float> out(rows * cols);
  auto loss = [&] {
    bias_gelu_forward_cpu(out.data(), x.data(), bias.data(), rows, cols);
    return dot(out, g);
  };
  std::vector<float> dx(rows * cols), dbias(cols, kAccumStart);
  bias_gelu_backward_cpu(dx.data(), dbias.data(), x.data(), bias.data(), g.data(), rows, cols);
  EXPECT_TRUE(all_close(dx, numeric_gradient(x, loss), kFiniteDiff)) << "dx";
  EXPECT_TRUE(all_close(minus(dbias, kAccumStart), numeric_gradient(bias, loss), kFiniteDiff)) << "dbias";

  // Without a bias: gelu(x) itself.
  auto loss_nobias = [&] {
    bias_gelu_forward_cpu(out.data(), x.data(), nullptr, rows, cols);
    return dot(out, g);
  };
  bias_gelu_backward_cpu(dx.data(), nullptr, x.data(), nullptr, g.data(), rows, cols);
  EXPECT_TRUE(all_close(dx, numeric_gradient(x, loss_nobias), kFiniteDiff)) << "dx without bias";
}

TEST(ReferenceGradient, SwigluBackward) {
  std::mt19937 rng(4);
  const int rows = 3, cols = 6;
  auto gate_up = random_vector(rows * 2 * cols, rng, -3.0f, 3.0f);
  const auto g = random_vector(rows * cols, rng);
  std::vector<float> out(rows * cols);
  auto loss = [&] {
    swiglu_forward_cpu(out.data(), gate_up.data(), rows, cols);
    return dot(out, g);
  };
  std::vector<float> dgu(rows * 2 * cols);
  swiglu_backward_cpu(dgu.data(), gate_up.data(), g.data(), rows, cols);
  EXPECT_TRUE(all_close(dgu, numeric_gradient(gate_up, loss), kFiniteDiff));
}

// Attention shape for the gradient checks: grouped-query (two query heads per kv head), a
// sequence long enough that every causal row length 1..5 occurs.
AttentionShape small_shape() {
  AttentionShape s;
  s.batch = 2, s.seq = 5, s.q_heads = 4, s.kv_heads = 2, s.head_dim = 4;
  return s;
}

TEST(ReferenceGradient, RopeBackwardIsTheInverseRotation) {
  std::mt19937 rng(5);
  const AttentionShape s = small_shape();
  const float theta = 10000.0f;
  auto qkv = random_vector(s.tokens() * s.qkv_width(), rng);
  const auto g = random_vector(qkv.size(), rng);
  auto loss = [&] {
    std::vector<float> y(qkv);
    rope_cpu(y.data(), s, theta, false);
    return dot(y, g);
  };
  // rope is linear, so its gradient is its transpose applied to g: the inverse rotation.
  std::vector<float> grad(g);
  rope_cpu(grad.data(), s, theta, true);
  EXPECT_TRUE(all_close(grad, numeric_gradient(qkv, loss), kFiniteDiff));
}

std::vector<float> causal_probs(const AttentionShape& s, std::mt19937& rng) {
  std::vector<float> scores = random_vector(s.score_elems(), rng, -2.0f, 2.0f), probs(s.score_elems());
  causal_softmax_forward_cpu(probs.data(), scores.data(), s);
  return probs;
}

TEST(ReferenceGradient, AttentionValuesBackward) {
  std::mt19937 rng(6);
  const AttentionShape s = small_shape();
  auto probs = causal_probs(s, rng);
  auto qkv = random_vector(s.tokens() * s.qkv_width(), rng);
  const auto g = random_vector(s.tokens() * s.q_heads * s.head_dim, rng);
  std::vector<float> out(g.size());
  auto loss = [&] {
    attention_values_cpu(out.data(), probs.data(), qkv.data(), s);
    return dot(out, g);
  };
  const float untouched = 7.0f;  // the q and k parts of dqkv are not this step's to write
  std::vector<float> dprobs(probs.size()), dqkv(qkv.size(), untouched);
  attention_values_backward_cpu(dprobs.data(), dqkv.data(), g.data(), probs.data(), qkv.data(), s);
  EXPECT_TRUE(all_close(dprobs, numeric_gradient(probs, loss), kFiniteDiff)) << "dprobs";
  const auto num = numeric_gradient(qkv, loss);
  const int w = s.qkv_width(), v0 = (s.q_heads + s.kv_heads) * s.head_dim;
  std::vector<float> dv, qk;
  std::vector<double> num_v;
  for (std::size_t t = 0; t < s.tokens(); ++t)
    for (int c = 0; c < w; ++c) {
      const std::size_t i = t * w + c;
      if (c >= v0) {
        dv.push_back(dqkv[i]);
        num_v.push_back(num[i]);
      } else {
        qk.push_back(dqkv[i]);
      }
    }
  EXPECT_TRUE(all_close(dv, num_v, kFiniteDiff)) << "dv";
  EXPECT_TRUE(std::all_of(qk.begin(), qk.end(), [&](float v) { return v == untouched; }))
      << "q/k parts overwritten";
}

TEST(ReferenceGradient, CausalSoftmaxBackward) {
  std::mt19937 rng(7);
  const AttentionShape s = small_shape();
  auto scores = random_vector(s.score_elems(), rng, -2.0f, 2.0f);
  const auto g = random_vector(s.score_elems(), rng);
  std::vector<float> probs(s.score_elems());
  auto loss = [&] {
    causal_softmax_forward_cpu(probs.data(), scores.data(), s);
    return dot(probs, g);
  };
  loss();
  std::vector<float> dscores(s.score_elems());
  causal_softmax_backward_cpu(dscores.data(), g.data(), probs.data(), s);
  // Above the diagonal both sides are 0: the forward ignores those scores.
  EXPECT_TRUE(all_close(dscores, numeric_gradient(scores, loss), kFiniteDiff));
}

TEST(ReferenceGradient, AttentionScoresBackward) {
  std::mt19937 rng(8);
  const AttentionShape s = small_shape();
  auto qkv = random_vector(s.tokens() * s.qkv_width(), rng);
  const auto g = random_vector(s.score_elems(), rng);  // also above the diagonal: must be ignored
  std::vector<float> scores(s.score_elems());
  auto loss = [&] {
    attention_scores_cpu(scores.data(), qkv.data(), s);
    return dot(scores, g);
  };
  const float untouched = 7.0f;
  std::vector<float> dqkv(qkv.size(), untouched);
  attention_scores_backward_cpu(dqkv.data(), g.data(), qkv.data(), s);
  const auto num = numeric_gradient(qkv, loss);
  const int w = s.qkv_width(), v0 = (s.q_heads + s.kv_heads) * s.head_dim;
  std::vector<float> dqk;
  std::vector<double> num_qk;
  for (std::size_t t = 0; t < s.tokens(); ++t)
    for (int c = 0; c < w; ++c) {
      const std::size_t i = t * w + c;
      if (c < v0) {
        dqk.push_back(dqkv[i]);
        num_qk.push_back(num[i]);
      } else {
        EXPECT_EQ(dqkv[i], untouched) << "v part overwritten at " << i;
        EXPECT_EQ(num[i], 0.0) << "scores depend on v at " << i;
      }
    }
  EXPECT_TRUE(all_close(dqk, num_qk, kFiniteDiff)) << "dq, dk";
}

TEST(ReferenceGradient, AttentionBackwardWholeChain) {
  std::mt19937 rng(9);
  const AttentionShape s = small_shape();
  auto qkv = random_vector(s.tokens() * s.qkv_width(), rng);
  const auto g = random_vector(s.tokens() * s.q_heads * s.head_dim, rng);
  std::vector<float> out(g.size()), probs(s.score_elems());
  auto loss = [&] {
    attention_forward_cpu(out.data(), probs.data(), qkv.data(), s);
    return dot(out, g);
  };
  loss();
  std::vector<float> dqkv(qkv.size(),
                          std::numeric_limits<float>::quiet_NaN());  // every element must be written
  std::vector<float> scratch_a(s.score_elems()), scratch_b(s.score_elems());
  attention_backward_cpu(dqkv.data(), scratch_a.data(), scratch_b.data(), g.data(), probs.data(), qkv.data(),
                         s);
  EXPECT_TRUE(all_close(dqkv, numeric_gradient(qkv, loss), kFiniteDiff));
}

TEST(ReferenceGradient, CrossentropyBackward) {
  std::mt19937 rng(10);
  const int rows = 3, vocab = 7;
  const float dloss = 1.0f / rows;  // a mean over rows
  auto logits = random_vector(rows * vocab, rng, -2.0f, 2.0f);
  const std::vector<int> targets = {0, 6, 3};
  std::vector<float> losses(rows);
  auto loss = [&] {
    crossentropy_forward_cpu(losses.data(), logits.data(), targets.data(), rows, vocab);
    return dloss * std::accumulate(losses.begin(), losses.end(), 0.0);
  };
  std::vector<float> dlogits(logits.size());
  crossentropy_backward_cpu(dlogits.data(), logits.data(), targets.data(), dloss, rows, vocab);
  EXPECT_TRUE(all_close(dlogits, numeric_gradient(logits, loss), kFiniteDiff));
}

// --- closed forms --------------------------------------------------------------------------------

TEST(ReferenceClosedForm, RmsnormOfConstantRow) {
  // x = c everywhere: rms = |c|, so out = c / sqrt(c^2 + eps) * w and rstd = 1 / sqrt(c^2 + eps).
  const int cols = 16;
  const float c = -3.0f, eps = 1e-5f;
  std::vector<float> x(cols, c), w(cols), out(cols), rstd(1);
  for (int i = 0; i < cols; ++i) w[i] = 0.5f + 0.1f * static_cast<float>(i);
  rmsnorm_forward_cpu(out.data(), rstd.data(), x.data(), w.data(), 1, cols, eps);
  const double r = 1.0 / std::sqrt(static_cast<double>(c) * c + eps);
  EXPECT_NEAR(rstd[0], r, 1e-6 * r);
  for (int i = 0; i < cols; ++i) EXPECT_NEAR(out[i], c * r * w[i], 1e-6) << i;  // ~ -w[i]
}

TEST(ReferenceClosedForm, LayernormOfConstantRowIsTheBias) {
  const int cols = 16;
  const float eps = 1e-5f;
  std::vector<float> x(cols, 2.5f), w(cols, 3.0f), b(cols), out(cols), mean(1), rstd(1);
  for (int i = 0; i < cols; ++i) b[i] = static_cast<float>(i) - 4.0f;
  layernorm_forward_cpu(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), 1, cols, eps);
  EXPECT_FLOAT_EQ(mean[0], 2.5f);
  EXPECT_NEAR(rstd[0], 1.0 / std::sqrt(eps), 1e-3);  // variance 0
  for (int i = 0; i < cols; ++i) EXPECT_FLOAT_EQ(out[i], b[i]) << i;
}

TEST(ReferenceClosedForm, CausalSoftmaxRowsSumToOneAndAreCausal) {
  std::mt19937 rng(11);
  AttentionShape s = small_shape();
  s.seq = 9;
  auto scores = random_vector(s.score_elems(), rng, -5.0f, 5.0f);
  std::vector<float> probs(s.score_elems(), -1.0f);  // every element must be written, zeros included
  causal_softmax_forward_cpu(probs.data(), scores.data(), s);
  for (std::size_t r = 0; r < s.score_elems() / s.seq; ++r) {
    const int i = static_cast<int>(r % s.seq);
    double sum = 0;
    for (int j = 0; j < s.seq; ++j) {
      const float p = probs[r * s.seq + j];
      if (j > i) {
        EXPECT_EQ(p, 0.0f) << "row " << r << " sees the future at " << j;
      } else {
        EXPECT_GT(p, 0.0f);
        sum += p;
      }
    }
    EXPECT_NEAR(sum, 1.0, 1e-6) << "row " << r;
  }
}

TEST(ReferenceClosedForm, AttentionWithEqualScoresAveragesThePastValues) {
  // q = 0 makes every visible score 0: row i attends uniformly to keys 0..i, so its output is
  // the mean of v_0..v_i (of its kv head).
  std::mt19937 rng(12);
  const AttentionShape s = small_shape();
  auto qkv = random_vector(s.tokens() * s.qkv_width(), rng);
  const int w = s.qkv_width(), group = s.q_heads / s.kv_heads;
  for (std::size_t t = 0; t < s.tokens(); ++t)
    for (int c = 0; c < s.q_heads * s.head_dim; ++c) qkv[t * w + c] = 0.0f;
  std::vector<float> out(s.tokens() * s.q_heads * s.head_dim), probs(s.score_elems());
  attention_forward_cpu(out.data(), probs.data(), qkv.data(), s);
  for (int b = 0; b < s.batch; ++b)
    for (int i = 0; i < s.seq; ++i)
      for (int h = 0; h < s.q_heads; ++h)
        for (int d = 0; d < s.head_dim; ++d) {
          double mean = 0;
          for (int j = 0; j <= i; ++j)
            mean += qkv[(static_cast<std::size_t>(b) * s.seq + j) * w +
                        (s.q_heads + s.kv_heads + h / group) * s.head_dim + d];
          mean /= i + 1;
          const float got =
              out[(static_cast<std::size_t>(b) * s.seq + i) * s.q_heads * s.head_dim + h * s.head_dim + d];
          EXPECT_NEAR(got, mean, 1e-6) << "b " << b << " i " << i << " h " << h << " d " << d;
        }
}

TEST(ReferenceClosedForm, RopeRotatesPairsByPositionTimesFrequency) {
  // head_dim 4, theta 100: pair p turns by angle pos * 100^(-2p/4), i.e. pos * {1, 0.1}.
  AttentionShape s;
  s.batch = 1, s.seq = 3, s.q_heads = 1, s.kv_heads = 1, s.head_dim = 4;
  std::vector<float> qkv(s.tokens() * s.qkv_width());
  for (std::size_t t = 0; t < s.tokens(); ++t)
    for (int c = 0; c < s.qkv_width(); ++c)
      qkv[t * s.qkv_width() + c] = (c % 4 < 2) ? 1.0f : 0.0f;  // x1 = 1, x2 = 0
  const auto orig = qkv;
  rope_cpu(qkv.data(), s, 100.0f, false);
  for (int pos = 0; pos < s.seq; ++pos) {
    const float* row = qkv.data() + pos * s.qkv_width();
    for (int h = 0; h < 2; ++h)  // q and k heads
      for (int p = 0; p < 2; ++p) {
        const double angle = pos * std::pow(100.0, -2.0 * p / 4);
        EXPECT_NEAR(row[h * 4 + p], std::cos(angle), 1e-6) << pos << " " << h << " " << p;
        EXPECT_NEAR(row[h * 4 + p + 2], std::sin(angle), 1e-6) << pos << " " << h << " " << p;
      }
    for (int c = 8; c < 12; ++c) EXPECT_EQ(row[c], orig[pos * s.qkv_width() + c]) << "v rotated";
  }
  rope_cpu(qkv.data(), s, 100.0f, true);
  EXPECT_TRUE(all_close(qkv, orig, Tolerance{1e-6, 0})) << "inverse(forward(x)) != x";
}

TEST(ReferenceClosedForm, CrossentropyOfUniformLogitsIsLogVocab) {
  const int rows = 2, vocab = 50;
  std::vector<float> logits(rows * vocab, 0.7f), losses(rows), dlogits(logits.size());
  const std::vector<int> targets = {3, 49};
  crossentropy_forward_cpu(losses.data(), logits.data(), targets.data(), rows, vocab);
  for (float l : losses) EXPECT_NEAR(l, std::log(static_cast<double>(vocab)), 1e-6);
  // d/dlogits = (1/V - onehot) * dloss
  crossentropy_backward_cpu(dlogits.data(), logits.data(), targets.data(), 2.0f, rows, vocab);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < vocab; ++c)
      EXPECT_NEAR(dlogits[r * vocab + c], 2.0 * (1.0 / vocab - (c == targets[r] ? 1.0 : 0.0)), 1e-6);
}

TEST(ReferenceClosedForm, AdamwFirstStepMovesByLrTimesSign) {
  // Step 1 from m = v = 0: mhat = g and vhat = g^2 after bias correction, so without weight decay
  // the update is lr * g / (|g| + eps) = lr * sign(g) whatever |g| (up to eps / |g| <= 1e-6 here).
  std::mt19937 rng(13);
  const std::size_t n = 64;
  auto g = random_vector(n, rng);
  for (float& x : g) x = (x < 0 ? -1.0f : 1.0f) * (0.01f + std::fabs(x) * 100.0f);  // |g| in [0.01, 100]
  auto p = random_vector(n, rng);
  const auto p0 = p;
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  AdamWConfig c;
  c.lr = 1e-3f, c.weight_decay = 0.0f;
  adamw_cpu(p.data(), m.data(), v.data(), g.data(), n, c, 1, 1.0f);
  for (std::size_t i = 0; i < n; ++i)
    EXPECT_NEAR(p[i] - p0[i], -c.lr * (g[i] > 0 ? 1.0f : -1.0f), 1e-3 * c.lr) << i << " g " << g[i];

  // With decoupled weight decay the step adds lr * wd * p; grad_scale multiplies the gradient
  // first (sign unchanged; |g| * 1/8 >= 1.25e-3 keeps eps / |g| <= 1e-5); a second step with the
  // same gradient is bias-corrected back to mhat = g, vhat = g^2 as well.
  c.weight_decay = 0.1f;
  p = p0;
  std::fill(m.begin(), m.end(), 0.0f);
  std::fill(v.begin(), v.end(), 0.0f);
  adamw_cpu(p.data(), m.data(), v.data(), g.data(), n, c, 1, 0.125f);
  for (std::size_t i = 0; i < n; ++i)
    EXPECT_NEAR(p[i] - p0[i], -c.lr * ((g[i] > 0 ? 1.0f : -1.0f) + c.weight_decay * p0[i]), 1e-3 * c.lr) << i;
  const auto p1 = p;
  adamw_cpu(p.data(), m.data(), v.data(), g.data(), n, c, 2, 0.125f);
  for (std::size_t i = 0; i < n; ++i)
    EXPECT_NEAR(p[i] - p1[i], -c.lr * ((g[i] > 0 ? 1.0f : -1.0f) + c.weight_decay * p1[i]), 1e-3 * c.lr) << i;
}

TEST(ReferenceClosedForm, OverflowDetection) {
  const float limit = 65504.0f;  // the largest finite fp16
  std::vector<float> g(100, 1.0f);
  g[50] = -65504.0f;
  EXPECT_FALSE(has_overflow_cpu(g.data(), g.size(), limit)) << "65504 itself is representable";
  for (float bad : {65505.0f, -65505.0f, std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    auto h = g;
    h[99] = bad;
    EXPECT_TRUE(has_overflow_cpu(h.data(), h.size(), limit)) << bad;
  }
  EXPECT_FALSE(has_overflow_cpu(g.data(), 0, limit));
}

TEST(ReferenceClosedForm, Int8RoundTripErrorIsAtMostHalfAScale) {
  std::mt19937 rng(14);
  const std::size_t n = 1000;  // not a multiple of the block: a short last block
  const int block = 64;
  auto x = random_vector(n, rng, -3.0f, 3.0f);
  for (std::size_t i = 128; i < 192; ++i) x[i] = 0.0f;     // an all-zero block
  for (std::size_t i = 192; i < 256; ++i) x[i] *= 1e-30f;  // a tiny-scale block
  const std::size_t blocks = (n + block - 1) / block;
  std::vector<std::int8_t> q(n);
  std::vector<float> scales(blocks), y(n);
  quantize_int8_cpu(q.data(), scales.data(), x.data(), n, block);
  dequantize_int8_cpu(y.data(), q.data(), scales.data(), n, block);
  for (std::size_t b = 0; b < blocks; ++b) {
    float amax = 0;
    for (std::size_t i = b * block; i < std::min(n, (b + 1) * block); ++i)
      amax = std::max(amax, std::fabs(x[i]));
    EXPECT_FLOAT_EQ(scales[b], amax / 127.0f) << "block " << b;
  }
  EXPECT_EQ(scales[2], 0.0f);
  for (std::size_t i = 0; i < n; ++i) {
    const float scale = scales[i / block];
    // scale / 2 from rounding to the nearest integer, plus a few ulps of fp32 for x / scale and q * scale.
    EXPECT_LE(std::fabs(y[i] - x[i]),
              scale * 0.5f * (1 + 4 * FLT_EPSILON) + 4 * FLT_EPSILON * std::fabs(x[i]))
        << i;
    EXPECT_GE(q[i], -127);
  }
  // The largest magnitude of a block maps to +-127 exactly.
  const auto it = std::max_element(x.begin(), x.begin() + block,
                                   [](float a, float b) { return std::fabs(a) < std::fabs(b); });
  EXPECT_EQ(std::abs(q[it - x.begin()]), 127);
}

// Top-k the slow, obvious way: sort all indices by (|acc| descending, index ascending).
std::vector<std::int32_t> brute_topk(const std::vector<float>& acc, std::size_t k) {
  std::vector<std::int32_t> order(acc.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int32_t a, std::int32_t b) { return std::fabs(acc[a]) > std::fabs(acc[b]); });
  order.resize(std::min(k, acc.size()));
  std::sort(order.begin(), order.end());
  return order;
}

TEST(ReferenceTopk, PicksTheLargestAndKeepsExactlyTheRest) {
  std::mt19937 rng(15);
  const std::size_t n = 200;
  // Few distinct magnitudes, both signs: many ties, which must go to the lower index.
  auto grad = random_vector(n, rng);
  for (float& g : grad) g = std::round(g * 4.0f) / 4.0f;
  auto residual = random_vector(n, rng);
  for (float& r : residual) r = std::round(r * 2.0f) / 4.0f;
  std::vector<float> acc(n);
  for (std::size_t i = 0; i < n; ++i) acc[i] = grad[i] + residual[i];
  for (std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{17}, std::size_t{100}, n - 1, n, n + 5}) {
    auto res = residual;
    std::vector<std::int32_t> idx(n, -1);
    std::vector<float> val(n);
    const std::size_t sent = topk_sparsify_cpu(idx.data(), val.data(), res.data(), grad.data(), n, k);
    ASSERT_EQ(sent, std::min(k, n));
    const auto want = brute_topk(acc, k);
    ASSERT_EQ(std::vector<std::int32_t>(idx.begin(), idx.begin() + sent), want) << "k " << k;
    std::vector<bool> picked(n, false);
    for (std::size_t j = 0; j < sent; ++j) {
      picked[idx[j]] = true;
      EXPECT_EQ(val[j], acc[idx[j]]) << "k " << k;
    }
    for (std::size_t i = 0; i < n; ++i)
      EXPECT_EQ(res[i], picked[i] ? 0.0f : acc[i]) << "k " << k << " i " << i;
  }
}

TEST(ReferenceTopk, ErrorFeedbackEventuallyTransmitsTheWholeSum) {
  // Every step sends k of n entries and keeps the rest, so after any number of steps
  //   sum of everything sent + residual == sum of all gradients fed in   (nothing is lost),
  // and once the gradients stop, ceil(n / k) more steps empty the residual.
  std::mt19937 rng(16);
  const std::size_t n = 50, k = 7;
  std::vector<float> residual(n, 0.0f);
  std::vector<double> fed(n, 0.0), sent(n, 0.0);
  std::vector<std::int32_t> idx(k);
  std::vector<float> val(k);
  for (int step = 0; step < 20; ++step) {
    const auto g = random_vector(n, rng);
    for (std::size_t i = 0; i < n; ++i) fed[i] += g[i];
    const std::size_t m = topk_sparsify_cpu(idx.data(), val.data(), residual.data(), g.data(), n, k);
    for (std::size_t j = 0; j < m; ++j) sent[idx[j]] += val[j];
    for (std::size_t i = 0; i < n; ++i)
      EXPECT_NEAR(sent[i] + residual[i], fed[i], 1e-4) << "step " << step << " i " << i;
  }
  const std::vector<float> zero(n, 0.0f);
  for (std::size_t step = 0; step < (n + k - 1) / k; ++step) {
    const std::size_t m = topk_sparsify_cpu(idx.data(), val.data(), residual.data(), zero.data(), n, k);
    for (std::size_t j = 0; j < m; ++j) sent[idx[j]] += val[j];
  }
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_EQ(residual[i], 0.0f) << i;
    EXPECT_NEAR(sent[i], fed[i], 1e-4) << i;
  }
}

}  // namespace
}  // namespace foresight::kernels
