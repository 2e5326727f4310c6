// Layer FLOPs and activation memory against the published closed forms.
#include "sim/analytic/layer_cost.h"

#include <gtest/gtest.h>

#include "sim/analytic/analytic_model.h"
#include "sim/analytic/layer_ops.h"
#include "sim/spec/hardware.h"
#include "tests/kernel_util.h"
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

// Each GEMM runs at gemm_efficiency times its shape's share (DeviceSpec::gemm_shape_efficiency):
// forward tokens x n over k, the data gradient tokens x k over n, the weight gradient k x n over
// the tokens. Llama 3 8B's QKV on an H100, 2 x 8192 tokens; without a tile, the flat rate.
TEST(LayerCost, EachGemmRunsAtItsShapesRate) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  auto loaded = load_device("h100-sxm5-80gb");
  ASSERT_TRUE(loaded.ok());
  DeviceSpec d = *loaded;
  const Plan p = testing::make_plan(1, 1, 1, 2, 2);
  const LayerShape s = plan_layer_shape(m, p);
  const double rate = d.peak(DType::kBf16) * d.gemm_efficiency, launch = d.kernel_overhead_s;
  const double tokens = 2.0 * m.seq_len, n = m.q_dim() + 2.0 * m.kv_dim(), k = m.hidden;
  const KernelCost qkv = testing::find_kernel(layer_kernels(m, d, p, s, false), KernelName::kQkv);
  ASSERT_EQ(qkv.flops, 2 * tokens * n * k);
  const double fwd = qkv.flops / (rate * d.gemm_shape_efficiency(tokens, n, k));
  const double data = qkv.flops / (rate * d.gemm_shape_efficiency(tokens, k, n));
  const double weight = qkv.flops / (rate * d.gemm_shape_efficiency(k, n, tokens));
  // RoPE rides in the QKV op (a fused kernel each way, reading and writing q and k).
  const double rope =
      m.rope ? d.stream_seconds(2.0 * tokens * (m.q_dim() + m.kv_dim()) * s.bytes_per_element) + launch : 0.0;
  EXPECT_NEAR(qkv.fwd_s, fwd + launch + rope, 1e-12);
  EXPECT_NEAR(qkv.bwd_s, data + weight + 2 * launch + rope, 1e-12);
  EXPECT_NEAR(qkv.bwd_weight_s, weight + launch, 1e-12);
  EXPECT_LT(fwd, qkv.flops / (rate * 0.9));  // a large GEMM: within 10% of the flat rate
  d.gemm_tile = {};
  const KernelCost flat = testing::find_kernel(layer_kernels(m, d, p, s, false), KernelName::kQkv);
  EXPECT_NEAR(flat.fwd_s, qkv.flops / rate + launch + rope, 1e-12);
  EXPECT_LT(flat.fwd_s, qkv.fwd_s);
}

// Flash attention runs at its long-sequence rate times the call's block share
// (DeviceSpec::attention_shape_efficiency) and the head width's factor
// (DeviceSpec::attention_head_dim_factor): Llama 3 8B on an A100, one 8,192-token sequence, head
// dimension 128, so only the blocks move it; without a tile, the flat rate.
TEST(LayerCost, AttentionRunsAtItsBlocksRate) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  auto loaded = load_device("a100-sxm4-80gb");
  ASSERT_TRUE(loaded.ok());
  DeviceSpec d = *loaded;
  const Plan p = testing::make_plan(1, 1, 1, 1, 1);
  const LayerShape s = plan_layer_shape(m, p);
  ASSERT_EQ(m.q_dim() / m.heads, 128);
  const KernelCost at = testing::find_kernel(layer_kernels(m, d, p, s, false), KernelName::kAttention);
  const double t = 0.5 * at.flops / (d.peak(DType::kBf16) * d.attention_efficiency);
  const double share = d.attention_shape_efficiency(s.seq, s.kv_seq, s.batch * m.heads);
  EXPECT_LT(share, 1.0);
  EXPECT_NEAR(at.fwd_s, t / share + d.kernel_overhead_s, 1e-12);
  EXPECT_NEAR(at.bwd_s, 2.5 * t / share + 2 * d.kernel_overhead_s, 1e-12);
  d.attention_tile = {};
  const KernelCost flat = testing::find_kernel(layer_kernels(m, d, p, s, false), KernelName::kAttention);
  EXPECT_NEAR(flat.fwd_s, t + d.kernel_overhead_s, 1e-12);
}

// Narrower heads spend more of attention on exponentials: GPT-3 175B's 128-wide heads against the
// same model with twice as many 64-wide ones (the same FLOPs), FlashAttention-2 on an A100.
TEST(LayerCost, NarrowHeadsAttendSlowerPerFlop) {
  ModelSpec wide = testing::preset_model("gpt3-175b");
  ModelSpec narrow = wide;
  wide.heads = static_cast<int>(wide.hidden / 128);
  wide.head_dim = 128;
  narrow.heads = static_cast<int>(narrow.hidden / 64);
  narrow.head_dim = 64;
  auto d = load_device("a100-sxm4-80gb");
  ASSERT_TRUE(d.ok());
  const Plan p = testing::make_plan(1, 1, 1, 1, 1);
  const KernelCost a = testing::find_kernel(layer_kernels(wide, *d, p, plan_layer_shape(wide, p), false),
                                            KernelName::kAttention);
  const KernelCost b = testing::find_kernel(layer_kernels(narrow, *d, p, plan_layer_shape(narrow, p), false),
                                            KernelName::kAttention);
  ASSERT_DOUBLE_EQ(a.flops, b.flops);
  EXPECT_GT(b.fwd_s, a.fwd_s * 1.03);
}

// The routed experts run as one grouped GEMM over the rank's experts, each on its share of the
// routed tokens: Mixtral 8x7B with 8-way expert parallelism has one expert per rank, which
// receives the top-2 copies of the 8 ranks' tokens: 2 x tokens rows.
TEST(LayerCost, ExpertsRunAsAGroupedGemmOfTheirTokens) {
  const ModelSpec m = testing::preset_model("mixtral-8x7b");
  auto loaded = load_device("h100-sxm5-80gb");
  ASSERT_TRUE(loaded.ok());
  const DeviceSpec& d = *loaded;
  Plan p = testing::make_plan(1, 1, 8, 1, 8);
  p.ep = 8;
  const LayerShape s = plan_layer_shape(m, p);
  const double tokens = s.batch * s.seq, width = 2.0 * m.moe.expert_ffn_hidden;
  const double rate = d.peak(DType::kBf16) * d.gemm_efficiency;
  const KernelCost up = testing::find_kernel(layer_kernels(m, d, p, s, true), KernelName::kMlpUp);
  const double routed = tokens * m.moe.top_k * p.ep / m.moe.experts;
  ASSERT_EQ(routed, 2 * tokens);
  EXPECT_NEAR(up.fwd_s,
              up.flops / (rate * d.gemm_shape_efficiency(routed, width, m.hidden, 1)) + d.kernel_overhead_s,
              1e-12);
  // Without expert parallelism each rank runs all 8 experts on a quarter of its tokens each.
  p.ep = 1;
  const KernelCost all = testing::find_kernel(layer_kernels(m, d, p, s, true), KernelName::kMlpUp);
  EXPECT_NEAR(
      all.fwd_s,
      all.flops / (rate * d.gemm_shape_efficiency(tokens / 4, width, m.hidden, 8)) + d.kernel_overhead_s,
      1e-12);
}

}  // namespace
}  // namespace foresight
