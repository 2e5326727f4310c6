// The FP8 linear layers' quantisation kernels (sim/analytic/layer_ops.cpp, fp8_casts) by hand:
// torchao's rowwise recipe (each activation cast along both axes, the weight gradient scaled after
// its GEMM) and Plan::fp8_weight_recast (torchao's Float8Linear casting each weight at every use),
// against current scaling and the cached weights of Transformer Engine; both engines see them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sim/analytic/analytic_model.h"
#include "sim/analytic/layer_ops.h"
#include "sim/spec/plan.h"
#include "tests/engines.h"
#include "tests/kernel_util.h"
#include "tests/test_util.h"

namespace foresight {
namespace {

// Llama 3 8B's layer on one H100, FP8, eager (no fused amax), with a recipe and recast choice.
struct Fp8Layer {
  ModelSpec m = testing::preset_model("llama3-8b");
  DeviceSpec d = testing::preset_cluster("dgx-h100-ndr", 8).node.accelerator();
  Plan p = [] {
    Plan q = testing::make_plan(1, 1, 8, 1, 8);
    q.precision = Precision::kFp8;
    q.kernel_fusion = false;
    return q;
  }();
  LayerKernels kernels(Fp8Recipe recipe, bool recast, Precision precision = Precision::kFp8) const {
    Plan q = p;
    q.fp8_recipe = recipe;
    q.fp8_weight_recast = recast;
    q.precision = precision;
    return layer_kernels(m, d, q, plan_layer_shape(m, q), false);
  }
};

// Rowwise against current scaling, on the QKV GEMM (input width k = hidden, output width n):
// current reads each activation for its amax, then casts it writing both layouts (6 bytes an
// element, 3 kernels); rowwise writes one axis and a 16-bit transposed copy, then casts that copy
// (8 bytes, 2 kernels), and scales the weight gradient after its GEMM (read and write 2 bytes of
// each weight). The input's second axis (3 bytes) and that scaling belong to the weight gradient.
TEST(Fp8Casts, RowwiseCastsBothAxesAndScalesTheWeightGradient) {
  const Fp8Layer l;
  const LayerKernels current = l.kernels(Fp8Recipe::kCurrent, false),
                     rowwise = l.kernels(Fp8Recipe::kRowwise, false);
  const KernelCost &c = testing::find_kernel(current, KernelName::kQkv),
                   &r = testing::find_kernel(rowwise, KernelName::kQkv);
  ASSERT_GT(c.m, 0);
  const double t = static_cast<double>(c.m), k = static_cast<double>(c.k), n = static_cast<double>(c.n);
  const double w = k * n;
  EXPECT_NEAR(r.bytes - c.bytes, 2 * t * k + 2 * t * n + 4 * w, 1e-6 * c.bytes);
  const double launch = l.d.kernel_overhead_s;
  // Forward: current's amax (2 bytes) and cast (4) in 3 kernels; rowwise's first kernel (5) alone.
  EXPECT_NEAR(r.fwd_s - c.fwd_s, l.d.stream_seconds(5 * t * k) - l.d.stream_seconds(6 * t * k) - 2 * launch,
              1e-12);
  // The weight gradient's part gains the input's second axis and the output's scaling.
  const double weight_part = l.d.stream_seconds(3 * t * k) + l.d.stream_seconds(4 * w) + 2 * launch;
  EXPECT_NEAR(r.bwd_weight_s - c.bwd_weight_s, weight_part, 1e-12);
  // Backward: the output gradient's 8 bytes in 2 kernels against 6 in 3, plus that part.
  EXPECT_NEAR(r.bwd_s - c.bwd_s,
              l.d.stream_seconds(8 * t * n) - l.d.stream_seconds(6 * t * n) - launch + weight_part, 1e-12);
  EXPECT_GT(r.host_bwd_s, c.host_bwd_s);  // the scaling is one more operation to issue
}

// Plan::fp8_weight_recast: each linear's weight cast at every use. Tensor scaling: an amax read,
// the forward's cast (2 + 1 bytes) and the backward's (2 + 1); rowwise: the forward's cast, then
// a 16-bit transpose (2 + 2) and its cast backward. Cached weights (Transformer Engine) cost
// nothing per micro-batch, and a bf16 plan ignores the flag.
TEST(Fp8Casts, RecastWeightsAtEveryUse) {
  const Fp8Layer l;
  for (const auto& [recipe, fwd, bwd] : {std::tuple{Fp8Recipe::kCurrent, 5.0, 3.0},
                                         {Fp8Recipe::kRowwise, 3.0, 7.0},
                                         {Fp8Recipe::kDelayed, 3.0, 3.0}}) {
    const KernelCost cached = testing::find_kernel(l.kernels(recipe, false), KernelName::kMlpDown);
    const KernelCost recast = testing::find_kernel(l.kernels(recipe, true), KernelName::kMlpDown);
    const double w = static_cast<double>(cached.k) * static_cast<double>(cached.n);
    EXPECT_NEAR(recast.bytes - cached.bytes, (fwd + bwd) * w, 1e-6 * cached.bytes) << to_string(recipe);
    EXPECT_GT(recast.fwd_s - cached.fwd_s, l.d.stream_seconds(fwd * w)) << to_string(recipe);
    EXPECT_GT(recast.bwd_s - cached.bwd_s, l.d.stream_seconds(bwd * w)) << to_string(recipe);
    EXPECT_EQ(recast.bwd_weight_s, cached.bwd_weight_s) << to_string(recipe);  // the data gradient's operand
    EXPECT_GT(recast.host_fwd_s, cached.host_fwd_s) << to_string(recipe);
  }
  const KernelCost bf16 =
      testing::find_kernel(l.kernels(Fp8Recipe::kRowwise, true, Precision::kBf16), KernelName::kQkv);
  const KernelCost plain =
      testing::find_kernel(l.kernels(Fp8Recipe::kDelayed, false, Precision::kBf16), KernelName::kQkv);
  EXPECT_EQ(bf16.bytes, plain.bytes);
  EXPECT_EQ(bf16.bwd_s, plain.bwd_s);
}

// Both engines price the casts: a torchao rowwise plan with recast weights is slower than
// current scaling with cached ones in the analytic model and the simulator alike, and the plan
// file carries both fields.
TEST(Fp8Casts, BothEnginesAndThePlanFileCarryThem) {
  const Fp8Layer l;
  const ModelSpec& m = l.m;
  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 8);
  Plan p = l.p;  // fully sharded, FP8 with current scaling
  p.zero_stage = 3;
  p.fp8_recipe = Fp8Recipe::kCurrent;
  Plan torchao = p;
  torchao.fp8_recipe = Fp8Recipe::kRowwise;
  torchao.fp8_weight_recast = true;
  const double a = AnalyticModel(m, c).evaluate(p).step_time_s,
               b = AnalyticModel(m, c).evaluate(torchao).step_time_s;
  EXPECT_GT(b, a * 1.01);
  const double sa = testing::simulated(m, c, p).prediction.step_time_s,
               sb = testing::simulated(m, c, torchao).prediction.step_time_s;
  EXPECT_GT(sb, sa * 1.01);
  testing::expect_engines_agree(m, c, torchao, 0.05, "rowwise, recast");
  auto back = plan_from_json(plan_to_json(torchao), "p.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->fp8_recipe, Fp8Recipe::kRowwise);
  EXPECT_TRUE(back->fp8_weight_recast);
  EXPECT_FALSE(plan_to_json(p).contains("fp8_weight_recast"));
}

}  // namespace
}  // namespace foresight
