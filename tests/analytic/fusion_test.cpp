// Kernel fusion and CUDA graphs: the unfused chains' extra memory passes and launches by hand,
// the graph's cheaper launches, their effect on a small model where launches matter and a large
// one where they do not, and the simulator running the same kernels.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "sim/analytic/analytic_model.h"
#include "sim/analytic/layer_ops.h"
#include "sim/des/simulator.h"
#include "tests/engines.h"
#include "tests/kernel_util.h"
#include "tests/test_util.h"

namespace foresight {
namespace {

// The small model's serial layer on the cpu-local preset's device, whose fields a test changes.
struct SmallLayer {
  ModelSpec m = testing::preset_model("small");
  DeviceSpec d = testing::preset_cluster("cpu-local", 1).node.accelerator();
  Plan p = testing::make_plan(1, 1, 1, 1, 8);
  LayerShape s = plan_layer_shape(m, p);
  LayerKernels kernels() const { return layer_kernels(m, d, p, s, false); }
};

// A device whose BLAS makes passes over the weight (calibrated CPU profiles): each GEMM's forward
// gains weight bytes / gemm_weight_fwd, its backward weight bytes / gemm_weight_bwd (half of it in
// the weight-gradient part); the profile keeps both rates, in the cache level too.
TEST(Fusion, GemmWeightPassesByHand) {
  SmallLayer l;
  DeviceSpec& d = l.d;
  const LayerShape& s = l.s;
  const LayerKernels plain = l.kernels();
  d.gemm_weight_fwd_bandwidth = 25e9;
  d.gemm_weight_bwd_bandwidth = 5e9;
  const LayerKernels packed = l.kernels();
  const KernelCost &a = testing::find_kernel(plain, KernelName::kMlpUp),
                   &b = testing::find_kernel(packed, KernelName::kMlpUp);
  const double w = s.bytes_per_element * static_cast<double>(b.k) * static_cast<double>(b.n);
  ASSERT_GT(w, 0);
  EXPECT_NEAR(b.fwd_s - a.fwd_s, w / 25e9, 1e-12);
  EXPECT_NEAR(b.bwd_s - a.bwd_s, w / 5e9, 1e-12);
  EXPECT_NEAR(b.bwd_weight_s - a.bwd_weight_s, 0.5 * w / 5e9, 1e-12);
  d.caches = {CacheLevel{8 << 20, 0.9, 30e9, 27e9, 15e9}};
  auto back = device_from_json(device_to_json(d), "dev.json", "");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_NEAR(back->gemm_weight_fwd_bandwidth, 25e9, 1e3);
  EXPECT_NEAR(back->gemm_weight_bwd_bandwidth, 5e9, 1e3);
  ASSERT_EQ(back->caches.size(), 1u);
  EXPECT_NEAR(back->caches[0].gemm_weight_fwd_bandwidth, 27e9, 1e3);
  EXPECT_NEAR(back->caches[0].gemm_weight_bwd_bandwidth, 15e9, 1e3);
  // Without them (every GPU preset), no weight passes.
  EXPECT_EQ(testing::preset_cluster("dgx-h100-ndr", 8).node.accelerator().gemm_weight_fwd_bandwidth, 0);
}

// The exponentials (a calibrated CPU's activation_element): the MLP activation gains one per output
// element each way, the head's forward one per logit; a JSON round trip keeps it, in a cache level
// too; no preset has one.
TEST(Fusion, ActivationExponentialsByHand) {
  SmallLayer l;
  const LayerKernels plain = l.kernels();
  const HeadCosts plain_head = head_costs(l.m, l.d, l.p, l.s);
  l.d.activation_element_s = 0.5e-9;
  const LayerKernels exp = l.kernels();
  const HeadCosts exp_head = head_costs(l.m, l.d, l.p, l.s);
  const double outputs = l.s.batch * l.s.seq * static_cast<double>(l.m.ffn_hidden);
  const KernelCost &a = testing::find_kernel(plain, KernelName::kActivation),
                   &b = testing::find_kernel(exp, KernelName::kActivation);
  EXPECT_NEAR(b.fwd_s - a.fwd_s, outputs * 0.5e-9, 1e-15);
  EXPECT_NEAR(b.bwd_s - a.bwd_s, outputs * 0.5e-9, 1e-15);
  EXPECT_EQ(testing::find_kernel(exp, KernelName::kMlpUp).fwd_s,
            testing::find_kernel(plain, KernelName::kMlpUp).fwd_s);  // the GEMMs unchanged
  EXPECT_NEAR(exp_head.fwd_s - plain_head.fwd_s,
              l.s.batch * l.s.seq * static_cast<double>(l.m.vocab) * 0.5e-9, 1e-15);
  EXPECT_EQ(exp_head.bwd_s, plain_head.bwd_s);
  DeviceSpec d = l.d;
  d.caches = {CacheLevel{8 << 20, 0.9, 30e9, 0, 0, 0.25e-9}};
  auto back = device_from_json(device_to_json(d), "dev.json", "");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_NEAR(back->activation_element_s, 0.5e-9, 1e-18);
  ASSERT_EQ(back->caches.size(), 1u);
  EXPECT_NEAR(back->caches[0].activation_element_s, 0.25e-9, 1e-18);
  EXPECT_EQ(testing::preset_cluster("cpu-local", 1).node.accelerator().activation_element_s, 0);
}

// The attention's score term (a calibrated CPU's): per causal score element, half forward, half
// backward; a JSON round trip keeps it; no preset has one.
TEST(Fusion, AttentionScoreTermByHand) {
  SmallLayer l;
  const LayerKernels plain = l.kernels();
  l.d.attention_score_s = 0.4e-9;
  const LayerKernels scored = l.kernels();
  const KernelCost &a = testing::find_kernel(plain, KernelName::kAttention),
                   &b = testing::find_kernel(scored, KernelName::kAttention);
  const double causal = 0.5 * l.s.batch * l.m.heads * l.s.seq * l.s.kv_seq;
  ASSERT_GT(causal, 0);
  EXPECT_NEAR(b.fwd_s - a.fwd_s, 0.5 * causal * 0.4e-9, 1e-15);
  EXPECT_NEAR(b.bwd_s - a.bwd_s, 0.5 * causal * 0.4e-9, 1e-15);
  auto back = device_from_json(device_to_json(l.d), "dev.json", "");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_NEAR(back->attention_score_s, 0.4e-9, 1e-18);
  EXPECT_EQ(testing::preset_cluster("dgx-h100-ndr", 8).node.accelerator().attention_score_s, 0);
  // The per-head term: half of it each way, per (sequence, head) of the micro-batch.
  l.d.attention_head_s = 1e-6;
  const LayerKernels headed = l.kernels();
  const KernelCost& c = testing::find_kernel(headed, KernelName::kAttention);
  EXPECT_NEAR(c.fwd_s - b.fwd_s, 0.5 * l.s.batch * l.m.heads * 1e-6, 1e-15);
  EXPECT_NEAR(c.bwd_s - b.bwd_s, 0.5 * l.s.batch * l.m.heads * 1e-6, 1e-15);
  auto back2 = device_from_json(device_to_json(l.d), "dev.json", "");
  ASSERT_TRUE(back2.ok()) << back2.error().message();
  EXPECT_NEAR(back2->attention_head_s, 1e-6, 1e-15);
  EXPECT_EQ(testing::preset_cluster("dgx-h100-ndr", 8).node.accelerator().attention_head_s, 0);
  // A measured backward-to-forward ratio splits the same pair: the sum stays, backward = r x forward
  // (beside the launches: one forward, two backward).
  l.d.attention_backward_ratio = 0.9;
  const LayerKernels measured = l.kernels();
  const KernelCost& split = testing::find_kernel(measured, KernelName::kAttention);
  EXPECT_NEAR(split.fwd_s + split.bwd_s, c.fwd_s + c.bwd_s, 1e-15);
  const double launch = l.d.kernel_overhead_s;
  EXPECT_NEAR(split.bwd_s - 2 * launch, 0.9 * (split.fwd_s - launch), 1e-15);
  auto back3 = device_from_json(device_to_json(l.d), "dev.json", "");
  ASSERT_TRUE(back3.ok()) << back3.error().message();
  EXPECT_DOUBLE_EQ(back3->attention_backward_ratio, 0.9);
  nlohmann::json bad = device_to_json(l.d);
  bad["efficiency"]["attention_backward"] = -1;
  EXPECT_FALSE(device_from_json(bad, "dev.json", "").ok());
  EXPECT_EQ(testing::preset_cluster("dgx-h100-ndr", 8).node.accelerator().attention_backward_ratio,
            0);  // flash's 2.5
}

TEST(Fusion, UnfusedChainsByHand) {
  const ModelSpec m = testing::preset_model("llama3-8b");  // RMSNorm, SwiGLU, no dropout
  const DeviceSpec d = testing::preset_cluster("dgx-h100-ndr", 8).node.accelerator();
  Plan p = testing::make_plan(1, 1, 8, 1, 8);
  const LayerShape s = plan_layer_shape(m, p);
  const LayerKernels fused = layer_kernels(m, d, p, s, false);
  p.kernel_fusion = false;
  const LayerKernels eager = layer_kernels(m, d, p, s, false);
  const double th = s.seq * m.hidden * 2.0;  // one pass over an h-wide bf16 activation
  const double rate = d.memory_bandwidth * d.memory_efficiency, launch = d.kernel_overhead_s;
  // RMSNorm, Llama's reference chain in fp32 between two casts: 36 bytes an element (float: 2 + 4,
  // pow: 4 + 4, mean: 4, multiply: 4 + 4, type_as: 4 + 2, weight: 2 + 2), 18 bf16 passes in 8
  // kernels, against 2 in one.
  EXPECT_DOUBLE_EQ(testing::find_kernel(fused, KernelName::kNorm1).bytes, 2 * th);
  EXPECT_DOUBLE_EQ(testing::find_kernel(eager, KernelName::kNorm1).bytes, 18 * th);
  EXPECT_NEAR(testing::find_kernel(eager, KernelName::kNorm1).fwd_s, 18 * th / rate + 8 * launch, 1e-12);
  EXPECT_NEAR(testing::find_kernel(eager, KernelName::kNorm1).bwd_s, 2 * 18 * th / rate + 16 * launch, 1e-12);
  // On fp32 activations the casts are no-ops: 7 passes, 6 kernels.
  const NormPasses fp32 = norm_passes(m, p, 4.0);
  EXPECT_DOUBLE_EQ(fp32.passes, 7.0);
  EXPECT_EQ(fp32.kernels, 6);
  // SwiGLU: 5 passes over the ffn-wide tensor in 2 kernels, against 3 in one.
  const double tf = s.seq * m.ffn_hidden * 2.0;
  EXPECT_DOUBLE_EQ(testing::find_kernel(eager, KernelName::kActivation).bytes, 5 * tf);
  EXPECT_DOUBLE_EQ(testing::find_kernel(fused, KernelName::kActivation).bytes, 3 * tf);
  // RoPE on q and k: eager, the reference chain (float, complex multiply, cast back: 2e + 16
  // bytes an element, 3 kernels a tensor) in place of one fused read and write, each way.
  ASSERT_TRUE(m.rope);
  const double rotated = s.seq * static_cast<double>(m.q_dim() + m.kv_dim());
  const KernelCost &qkv_eager = testing::find_kernel(eager, KernelName::kQkv),
                   &qkv_fused = testing::find_kernel(fused, KernelName::kQkv);
  EXPECT_NEAR(qkv_eager.bytes - qkv_fused.bytes, 16 * rotated, 1e-3);
  EXPECT_NEAR(qkv_eager.fwd_s - qkv_fused.fwd_s, 16 * rotated / rate + 5 * launch, 1e-12);
  EXPECT_NEAR(qkv_eager.bwd_s - qkv_fused.bwd_s, 16 * rotated / rate + 5 * launch, 1e-12);
  // No dropout: the residual add is one kernel either way; GEMMs do not change.
  EXPECT_DOUBLE_EQ(testing::find_kernel(eager, KernelName::kResidual1).fwd_s,
                   testing::find_kernel(fused, KernelName::kResidual1).fwd_s);
  EXPECT_DOUBLE_EQ(testing::find_kernel(eager, KernelName::kMlpUp).fwd_s,
                   testing::find_kernel(fused, KernelName::kMlpUp).fwd_s);
  EXPECT_GT(eager.fwd_seconds(), fused.fwd_seconds());
  // A residual add's backward: the branches' gradients summed (3 passes, one kernel), not twice the
  // forward; with dropout its mask applied too (5 passes and the mask, two kernels), fused or not.
  EXPECT_NEAR(testing::find_kernel(fused, KernelName::kResidual2).bwd_s, 3 * th / rate + launch, 1e-12);
  ModelSpec dropped = m;
  dropped.dropout = true;
  const double mask = s.seq * m.hidden;  // a byte per element
  for (bool fusion : {true, false}) {
    p.kernel_fusion = fusion;
    const LayerKernels k = layer_kernels(dropped, d, p, s, false);
    const KernelCost& r = testing::find_kernel(k, KernelName::kResidual1);
    EXPECT_NEAR(r.bwd_s, (5 * th + mask) / rate + 2 * launch, 1e-12) << fusion;
    EXPECT_NEAR(r.fwd_s, ((fusion ? 3 : 5) * th + mask) / rate + (fusion ? 1 : 2) * launch, 1e-12) << fusion;
  }
  p.kernel_fusion = false;
  // The final norm is an RMSNorm too: the same chain.
  const HeadCosts eager_head = head_costs(m, d, p, s);
  p.kernel_fusion = true;
  const HeadCosts fused_head = head_costs(m, d, p, s);
  EXPECT_DOUBLE_EQ(fused_head.norm_bytes, 2 * th);
  EXPECT_DOUBLE_EQ(eager_head.norm_bytes, 18 * th);
  EXPECT_NEAR(eager_head.norm_fwd_s, 18 * th / rate + 8 * launch, 1e-12);
  EXPECT_NEAR(eager_head.norm_bwd_s, 2 * 18 * th / rate + 16 * launch, 1e-12);
  // The loss: fused, 4 bytes a logit forward and 8 backward; eager, the cast to fp32 and
  // log_softmax's three reads and a write (2 + 4 + 16) forward, the zero-filled gradient,
  // log_softmax's backward and the cast back (4 + 16 + 4 + 2) backward.
  const double logits = s.seq * static_cast<double>(m.vocab);
  EXPECT_DOUBLE_EQ(fused_head.fwd_bytes, 4 * logits);
  EXPECT_DOUBLE_EQ(fused_head.bwd_bytes, 8 * logits);
  EXPECT_DOUBLE_EQ(eager_head.fwd_bytes, 22 * logits);
  EXPECT_DOUBLE_EQ(eager_head.bwd_bytes, 26 * logits);
  EXPECT_NEAR(eager_head.fwd_s - fused_head.fwd_s, 18 * logits / rate + 2 * launch, 1e-12);
  EXPECT_NEAR(eager_head.bwd_s - fused_head.bwd_s, 18 * logits / rate + 2 * launch, 1e-12);
  // Megatron's loss with fused chains (Plan::cross_entropy): --cross-entropy-loss-fusion's three
  // jit-fused kernels forward (cast and maximum 2 + 4, exponent and sum 8, division 8) and one
  // backward (4 + 2); without it a pass per step (cast 6, maximum 4, subtraction 8, exponent 8,
  // sum 4, division 8; backward the scaling 8 and the cast back 6).
  p.cross_entropy = CrossEntropy::kJitFused;
  const HeadCosts jit_head = head_costs(m, d, p, s);
  p.cross_entropy = CrossEntropy::kUnfused;
  const HeadCosts unfused_head = head_costs(m, d, p, s);
  EXPECT_DOUBLE_EQ(jit_head.fwd_bytes, 22 * logits);
  EXPECT_DOUBLE_EQ(jit_head.bwd_bytes, 6 * logits);
  EXPECT_DOUBLE_EQ(unfused_head.fwd_bytes, 38 * logits);
  EXPECT_DOUBLE_EQ(unfused_head.bwd_bytes, 14 * logits);
  EXPECT_NEAR(unfused_head.fwd_s - fused_head.fwd_s, 34 * logits / rate + 5 * launch, 1e-12);
  EXPECT_NEAR(unfused_head.bwd_s - fused_head.bwd_s, 6 * logits / rate + 1 * launch, 1e-12);
  EXPECT_NEAR(jit_head.fwd_s - fused_head.fwd_s, 18 * logits / rate + 2 * launch, 1e-12);
  // Eager PyTorch runs its own, whatever the field says.
  p.kernel_fusion = false;
  EXPECT_DOUBLE_EQ(head_costs(m, d, p, s).fwd_bytes, eager_head.fwd_bytes);
}

TEST(Fusion, CudaGraphsCutEachKernelsLaunch) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  const DeviceSpec d = testing::preset_cluster("dgx-h100-ndr", 8).node.accelerator();
  Plan p = testing::make_plan(1, 1, 8, 1, 8);
  const LayerShape s = plan_layer_shape(m, p);
  const LayerKernels plain = layer_kernels(m, d, p, s, false);
  p.cuda_graphs = true;
  const LayerKernels graphed = layer_kernels(m, d, p, s, false);
  const double saved = d.kernel_overhead_s - d.graph_kernel_overhead_s;
  EXPECT_GT(saved, 0);
  ASSERT_TRUE(m.rope);  // RoPE's rotation: one more kernel inside the QKV op, each way
  EXPECT_NEAR(plain.fwd_seconds() - graphed.fwd_seconds(), (plain.count + 1) * saved, 1e-12);
  // Backward, two kernels per op but one for each of the two residual adds (the branches' gradient
  // sum; llama has no dropout).
  ASSERT_FALSE(m.dropout);
  EXPECT_NEAR(plain.bwd_seconds() - graphed.bwd_seconds(), (2 * plain.count + 1 - 2) * saved, 1e-12);
}

// Launches and memory passes weigh on a small model with short kernels and hardly on a large one;
// the simulator, running the same kernel list, sees the same change.
TEST(Fusion, MattersForSmallKernelsInBothExecutors) {
  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 8);
  auto gain = [](const ModelSpec& m, const ClusterSpec& on, Plan p) {
    p.kernel_fusion = false;
    const double eager = AnalyticModel(m, on).evaluate(p).step_time_s;
    p.kernel_fusion = true;
    p.cuda_graphs = true;
    const double tuned = AnalyticModel(m, on).evaluate(p).step_time_s;
    return eager / tuned;
  };
  ModelSpec small = testing::preset_model("llama3-8b");
  small.layers = 8;
  small.hidden = 1024;
  small.heads = small.kv_heads = 8;
  small.ffn_hidden = 2816;
  small.seq_len = 1024;
  Plan p = testing::make_plan(1, 1, 8, 1, 64);
  const double small_gain = gain(small, c, p);
  // GPT-3 175B with sequence parallelism: long GEMMs, norms split over the TP ranks.
  Plan big = testing::make_plan(8, 8, 1, 1, 64);
  big.sequence_parallel = true;
  big.recompute = Recompute::kFull;
  const double large_gain =
      gain(testing::preset_model("gpt3-175b"), testing::preset_cluster("dgx-h100-ndr", 64), big);
  EXPECT_GT(small_gain, 1.15);
  EXPECT_LT(large_gain, 1.08);
  EXPECT_GT(large_gain, 1.0);
  Plan q = p;
  q.kernel_fusion = false;
  testing::expect_engines_agree(small, c, q, 0.03);
}

TEST(Fusion, PlanJsonAndDeviceField) {
  Plan p = testing::make_plan(1, 1, 8, 1, 8);
  p.kernel_fusion = false;
  p.cuda_graphs = true;
  auto back = plan_from_json(plan_to_json(p), "x.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, p);
  // The loss's kernels: written when not the default, read back; a bad name says the field.
  p.cross_entropy = CrossEntropy::kUnfused;
  nlohmann::json pj = plan_to_json(p);
  EXPECT_EQ(pj["cross_entropy"], "unfused");
  back = plan_from_json(pj, "x.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->cross_entropy, CrossEntropy::kUnfused);
  pj["cross_entropy"] = "fast";
  back = plan_from_json(pj, "x.json");
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.error().message().find("cross_entropy"), std::string::npos) << back.error().message();
  const DeviceSpec d = testing::preset_cluster("dgx-h100-ndr", 8).node.accelerator();
  nlohmann::json j = device_to_json(d);
  j["efficiency"]["graph_kernel_overhead"] = "2us";
  auto d2 = device_from_json(j, "dev.json");
  ASSERT_TRUE(d2.ok()) << d2.error().message();
  EXPECT_DOUBLE_EQ(d2->graph_kernel_overhead_s, 2e-6);
  j["efficiency"]["graph_kernel_overhead"] = "2 parsecs";
  auto bad = device_from_json(j, "dev.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("graph_kernel_overhead"), std::string::npos) << bad.error().message();
}

// Plan::repeat_kv (torchtitan's Llama before 2026: repeat_kv before SDPA): K and V copied to
// every query head and their gradients summed back, a kernel per tensor each way inside the QKV
// op; the attention keeps the heads-wide copies without recompute; context parallelism exchanges
// them (heads/kv_heads = 4 times the bytes for Llama 3 8B). No effect on a model without GQA.
TEST(Fusion, RepeatedKvHeads) {
  const ModelSpec m = testing::preset_model("llama3-8b");  // 32 heads, 8 KV heads of 128
  const DeviceSpec d = testing::preset_cluster("dgx-h100-ndr", 8).node.accelerator();
  Plan p = testing::make_plan(1, 1, 8, 1, 8);
  const LayerShape plain = plan_layer_shape(m, p);
  p.repeat_kv = true;
  const LayerShape rep = plan_layer_shape(m, p);
  ASSERT_TRUE(rep.repeat_kv);
  EXPECT_DOUBLE_EQ(attention_kv_dim(m, rep), 4096.0);
  EXPECT_DOUBLE_EQ(attention_kv_dim(m, plain), 1024.0);
  const double rate = d.memory_bandwidth * d.memory_efficiency, launch = d.kernel_overhead_s;
  // The copies: read 2 x 1024, write 2 x 4096 bf16 elements a token (backward the reverse).
  const double bytes = plain.seq * 2.0 * (4096 + 1024) * 2.0;
  const LayerKernels k0 = layer_kernels(m, d, testing::make_plan(1, 1, 8, 1, 8), plain, false),
                     k1 = layer_kernels(m, d, p, rep, false);
  const KernelCost &q0 = testing::find_kernel(k0, KernelName::kQkv),
                   &q1 = testing::find_kernel(k1, KernelName::kQkv);
  EXPECT_NEAR(q1.bytes - q0.bytes, bytes, 1e-3);
  EXPECT_NEAR(q1.fwd_s - q0.fwd_s, bytes / rate + 2 * launch, 1e-12);
  EXPECT_NEAR(q1.bwd_s - q0.bwd_s, bytes / rate + 2 * launch, 1e-12);
  // Kept for the backward without recompute: K and V heads-wide, 2 x 3072 more bf16 a token.
  const double more = layer_activation_bytes(m, rep, RecomputeMask{0}, true, false) -
                      layer_activation_bytes(m, plain, RecomputeMask{0}, true, false);
  EXPECT_DOUBLE_EQ(more, plain.seq * 2.0 * 3072 * 2.0);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, rep, recompute_module::kFull, true, false),
                   layer_activation_bytes(m, plain, recompute_module::kFull, true, false));
  // Context parallelism's K/V: four times the bytes, and a context-parallel step across nodes slower.
  Plan cp = testing::make_plan(8, 1, 1, 1, 1);
  cp.cp = 2;
  cp.tp = 8;
  cp.cp_comm = CpComm::kAllGather;
  const ClusterSpec two = testing::preset_cluster("dgx-h100-ndr", 16);
  Plan cp_rep = cp;
  cp_rep.repeat_kv = true;
  EXPECT_DOUBLE_EQ(cp_kv_bytes(m, plan_layer_shape(m, cp_rep)), 4 * cp_kv_bytes(m, plan_layer_shape(m, cp)));
  const AnalyticModel am(m, two);
  EXPECT_GT(am.evaluate(cp_rep).time.cp_comm, 3 * am.evaluate(cp).time.cp_comm);
  testing::expect_engines_agree(m, two, cp_rep, 0.05, "repeat_kv with cp 2 across nodes");
  // Multi-head attention: nothing to repeat.
  ModelSpec mha = m;
  mha.kv_heads = mha.heads;
  EXPECT_FALSE(plan_layer_shape(mha, p).repeat_kv);
  // The plan file carries it.
  auto back = plan_from_json(plan_to_json(p), "p.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_TRUE(back->repeat_kv);
  EXPECT_FALSE(plan_to_json(Plan{}).contains("repeat_kv"));
}

// Squared ReLU (Nemotron): relu then pow, two kernels and four passes over the ffn-wide tensor,
// fused or not -- Megatron-Core's bias-activation fusion covers GeLU and SwiGLU only.
TEST(Fusion, SquaredReluIsTwoKernels) {
  ModelSpec m = testing::preset_model("gpt3-175b");
  const DeviceSpec d = testing::preset_cluster("dgx-h100-ndr", 8).node.accelerator();
  const Plan p = testing::make_plan(8, 1, 1, 1, 1);
  const LayerShape s = plan_layer_shape(m, p);
  const double tf = s.seq * m.ffn_hidden / 8.0 * 2.0;  // one pass over this rank's bf16 slice
  const double gelu = testing::find_kernel(layer_kernels(m, d, p, s, false), KernelName::kActivation).bytes;
  EXPECT_DOUBLE_EQ(gelu, 2 * tf);
  m.mlp = MlpKind::kSquaredRelu;
  for (bool fusion : {true, false}) {
    Plan q = p;
    q.kernel_fusion = fusion;
    const LayerKernels k = layer_kernels(m, d, q, s, false);
    EXPECT_DOUBLE_EQ(testing::find_kernel(k, KernelName::kActivation).bytes, 4 * tf) << fusion;
    const double rate = d.memory_bandwidth * d.memory_efficiency;
    EXPECT_NEAR(testing::find_kernel(k, KernelName::kActivation).fwd_s,
                4 * tf / rate + 2 * d.kernel_overhead_s, 1e-12);
  }
}

}  // namespace
}  // namespace foresight
