// Layer FLOPs and activation memory against the published closed forms.
#include "sim/analytic/layer_cost.h"

#include <gtest/gtest.h>

#include "sim/analytic/analytic_model.h"
#include "tests/test_util.h"

namespace foresight {
namespace {

LayerShape shape(double b, double s, double t = 1, bool sp = false) {
  LayerShape x;
  x.batch = b;
  x.seq = s;
  x.kv_seq = s;
  x.tp = t;
  x.sp = sp;
  return x;
}

TEST(LayerCost, GptForwardFlopsEqualClosedForm) {
  const ModelSpec m = testing::gpt3_shape();
  for (double b : {1.0, 4.0}) {
    for (double s : {512.0, 2048.0}) {
      const double h = static_cast<double>(m.hidden);
      const double expected = 24 * b * s * h * h + 4 * b * s * s * h;  // Narayanan et al. 2021, Sec. 5.1
      EXPECT_DOUBLE_EQ(dense_layer_flops(m, shape(b, s)).total(), expected);
      // Tensor parallelism divides every FLOP of the layer by t.
      EXPECT_DOUBLE_EQ(dense_layer_flops(m, shape(b, s, 8)).total(), expected / 8);
    }
  }
}

TEST(LayerCost, ModelFlopsAreAboutSixNPerToken) {
  // Forward + backward = 3x forward. Per token this is 6 * (non-embedding params) plus the LM head
  // and attention; for GPT-3 at s=2048 attention adds s/(6h) = 2.8%, so within 4% of 6N.
  const ModelSpec m = testing::gpt3_shape();
  const double s = 2048;
  const double per_token =
      3 * (m.layers * dense_layer_flops(m, shape(1, s)).total() + logits_flops(m, shape(1, s))) / s;
  const double six_n = 6 * m.total_params();
  EXPECT_NEAR(per_token / six_n, 1.0, 0.04) << per_token / six_n;
  EXPECT_GT(per_token, six_n);  // attention makes it more, never less
}

// Korthikanti et al. 2022 (arXiv:2205.05198), Sec. 4: bytes of activations per layer with 16-bit
// activations and 1-byte dropout masks.
TEST(LayerCost, ActivationsEqualKorthikanti) {
  const ModelSpec m = testing::gpt3_shape();
  const double s = 2048, b = 1, h = 12288, a = 96, t = 8;
  const double sbh = s * b * h;
  auto act = [&](double tp, bool sp, Recompute r) {
    return layer_activation_bytes(m, shape(b, s, tp, sp), r, /*flash=*/false, /*moe=*/false);
  };
  EXPECT_DOUBLE_EQ(act(1, false, Recompute::kNone), sbh * (34 + 5 * a * s / h));                 // Eq. 1
  EXPECT_DOUBLE_EQ(act(t, false, Recompute::kNone), sbh * (10 + 24 / t + 5 * a * s / (h * t)));  // Eq. 2
  EXPECT_DOUBLE_EQ(act(t, true, Recompute::kNone), sbh / t * (34 + 5 * a * s / h));              // Eq. 4
  EXPECT_DOUBLE_EQ(act(t, true, Recompute::kSelective), sbh / t * 34);                           // Eq. 6
  EXPECT_DOUBLE_EQ(act(1, false, Recompute::kFull), 2 * sbh);                                    // Sec. 4.3
}

// FP8 (Transformer Engine) keeps the four linear layers' inputs as their FP8 copies, one byte:
// the QKV and first MLP inputs (the norms' outputs), the projection's and the second MLP
// linear's, 2 + 2 + 2 + 8 sbh of Korthikanti's 34 (GPT, 4h MLP) at half their 16-bit size.
TEST(LayerCost, Fp8KeepsTheLinearInputsInOneByte) {
  const ModelSpec m = testing::gpt3_shape();
  const double s = 2048, h = 12288;
  LayerShape x = shape(1, s);
  const double bf16 = layer_activation_bytes(m, x, Recompute::kNone, true, false);
  x.linear_input_bytes = 1;
  const double fp8 = layer_activation_bytes(m, x, Recompute::kNone, true, false);
  EXPECT_DOUBLE_EQ(bf16 - fp8, (1 + 1 + 1 + 4) * s * h);
  Plan p;
  p.precision = Precision::kFp8;
  EXPECT_EQ(plan_layer_shape(m, p).linear_bytes(), 1.0);
  p.precision = Precision::kBf16;
  EXPECT_EQ(plan_layer_shape(m, p).linear_bytes(), 2.0);
}

TEST(LayerCost, FlashAttentionDropsTheQuadraticTerm) {
  const ModelSpec m = testing::gpt3_shape();
  const double with_scores = layer_activation_bytes(m, shape(1, 2048), Recompute::kNone, false, false);
  const double flash = layer_activation_bytes(m, shape(1, 2048), Recompute::kNone, true, false);
  const double s = 2048, h = 12288, a = 96;
  // Only the softmax statistics (4 bytes per row and head) remain of 5*a*s^2*b.
  EXPECT_DOUBLE_EQ(with_scores - flash, 5 * a * s * s - 4 * a * s);
  EXPECT_GT(flash, 34 * s * h - 1);
}

TEST(LayerCost, GqaAndSwigluShrinkKvAndGrowMlp) {
  ModelSpec m = testing::gpt3_shape();
  m.kv_heads = 8;
  m.mlp = MlpKind::kSwiglu;
  m.ffn_hidden = 32768;
  m.dropout = false;
  const double s = 1024, h = static_cast<double>(m.hidden);
  const LayerFlops f = dense_layer_flops(m, shape(1, s));
  const double kv = 8 * 128;
  EXPECT_DOUBLE_EQ(f.attn_linear, 2 * s * (h * (h + 2 * kv) + h * h));
  EXPECT_DOUBLE_EQ(f.mlp, 2 * s * 3 * h * 32768);
}

TEST(LayerCost, MoeLayerCountsVisitedExperts) {
  ModelSpec m = testing::gpt3_shape();
  m.hidden = 4096;
  m.heads = 32;
  m.kv_heads = 8;
  m.head_dim = 128;
  m.mlp = MlpKind::kSwiglu;
  m.ffn_hidden = 14336;
  m.moe.experts = 8;
  m.moe.top_k = 2;
  m.moe.expert_ffn_hidden = 14336;
  const double s = 4096;
  const LayerFlops dense = dense_layer_flops(m, shape(1, s));
  const LayerFlops moe = moe_layer_flops(m, shape(1, s));
  EXPECT_DOUBLE_EQ(moe.mlp, 2 * dense.mlp);        // top-2 of same-width experts
  EXPECT_DOUBLE_EQ(moe.router, 2 * s * 4096 * 8);  // gate: h x experts per token
  // Parameters: all 8 experts held; with ep=4 a device holds 2.
  EXPECT_NEAR(layer_params_per_device(m, true, 1, 1) - layer_params_per_device(m, true, 1, 4),
              6 * m.expert_params(), 1.0);
}

}  // namespace
}  // namespace foresight
