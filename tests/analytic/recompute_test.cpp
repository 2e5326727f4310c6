// Activation recompute per layer: the modules' bytes from the per-tensor accounting, the knapsack
// against brute force, the optimal choice against the fixed policies, the uniform method's closed
// forms, both engines on the same choice, and the plan file's fields.
#include "sim/analytic/recompute.h"

#include <gtest/gtest.h>

#include <boost/range/iterator_range.hpp>
#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/analytic/analytic_model.h"
#include "sim/analytic/capacity.h"
#include "sim/des/simulator.h"
#include "sim/workload/workload.h"
#include "tests/engines.h"
#include "tests/test_util.h"

namespace foresight {
namespace {

namespace rm = recompute_module;

// Korthikanti et al. 2022, Sec. 4.1 (16-bit activations, 1-byte dropout masks, GPT MLP of 4h):
// attention keeps 11sbh + 5as^2b (QKV input 2, Q and K 4, V 2, projection input 2, dropout mask
// 1), the MLP 19sbh (first linear input 2, GeLU input 8, second linear input 8, dropout mask 1),
// the two norms' inputs 4sbh. The modules drop: core_attn 5as^2b, layernorm the two norm outputs
// (2 + 2 sbh), act the second linear's input (8sbh), mlp the GeLU's input and output (16sbh).
TEST(RecomputeModules, BytesFollowKorthikantisTensors) {
  const ModelSpec m = testing::gpt3_shape();
  const double s = 2048, b = 1, h = 12288, a = 96;
  const double sbh = s * b * h, scores = 5 * a * s * s * b;
  LayerShape x;
  x.batch = b;
  x.seq = s;
  x.kv_seq = s;
  auto kept = [&](RecomputeMask k) {
    return layer_activation_bytes(m, x, k, /*flash=*/false, /*moe=*/false);
  };
  const double none = kept(0);
  EXPECT_DOUBLE_EQ(none, 34 * sbh + scores);
  EXPECT_DOUBLE_EQ(none - kept(rm::kCoreAttn), scores);
  EXPECT_DOUBLE_EQ(none - kept(rm::kLayernorm), 4 * sbh);
  EXPECT_DOUBLE_EQ(none - kept(rm::kAct), 8 * sbh);
  EXPECT_DOUBLE_EQ(none - kept(rm::kMlp), 16 * sbh);
  EXPECT_DOUBLE_EQ(kept(rm::kMlp | rm::kAct), kept(rm::kMlp));
  EXPECT_DOUBLE_EQ(kept(rm::kCoreAttn | rm::kLayernorm | rm::kMlp), 14 * sbh);
  EXPECT_DOUBLE_EQ(kept(rm::kFull), 2 * sbh);
  // The plan's fixed policies are these sets.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, x, Recompute::kSelective, false, false), kept(rm::kCoreAttn));
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, x, Recompute::kFull, false, false), kept(rm::kFull));
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, x, Recompute::kNone, false, false), none);
  // Flash attention stores no scores: core_attn has nothing to drop.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, x, rm::kCoreAttn, true, false),
                   layer_activation_bytes(m, x, RecomputeMask{0}, true, false));
  EXPECT_EQ(recompute_mask_string(rm::kCoreAttn | rm::kLayernorm | rm::kMlp), "core_attn+layernorm+mlp");
}

// Each module re-runs the forward kernels that rebuild what it dropped, and no other.
TEST(RecomputeModules, KernelsReRun) {
  const ModelSpec m = testing::gpt3_shape();
  const ClusterSpec c = testing::preset_cluster("dgx-a100-hdr", 8);
  Plan p = testing::make_plan(8, 1, 1, 1, 8);
  p.flash_attention = false;
  const LayerKernels k = layer_kernels(m, c.node.accelerator(), p, plan_layer_shape(m, p), false);
  auto seconds = [&](std::initializer_list<KernelName> names) {
    double t = 0;
    for (int i = 0; i < k.count; ++i)
      for (KernelName n : names)
        if (k.fwd[i].name == n) t += k.fwd[i].fwd_s;
    return t;
  };
  EXPECT_DOUBLE_EQ(k.recompute_seconds(rm::kLayernorm), seconds({KernelName::kNorm1, KernelName::kNorm2}));
  EXPECT_DOUBLE_EQ(k.recompute_seconds(rm::kAct), seconds({KernelName::kActivation}));
  EXPECT_DOUBLE_EQ(k.recompute_seconds(rm::kMlp), seconds({KernelName::kMlpUp, KernelName::kActivation}));
  EXPECT_DOUBLE_EQ(k.recompute_seconds(rm::kCoreAttn),
                   seconds({KernelName::kScores, KernelName::kSoftmax, KernelName::kAttnV}));
  EXPECT_DOUBLE_EQ(k.recompute_seconds(rm::kFull), k.fwd_seconds());
  EXPECT_DOUBLE_EQ(k.recompute_flops(rm::kFull), k.fwd_flops());
  EXPECT_DOUBLE_EQ(k.recompute_seconds(0), 0.0);
}

// torchtitan's op-level policy on Llama 3 8B (GQA, SwiGLU, flash attention): it keeps the block
// input, Q, V, the attention output and its row statistics, w1's and w2's outputs, and re-runs the
// wk, wo and w3 matmuls (every second matmul in call order) and the elementwise kernels.
TEST(RecomputeModules, OpPolicyKeepsEveryOtherMatmul) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 8);
  Plan p = testing::make_plan(1, 1, 8, 1, 16);
  p.flash_attention = true;
  const LayerShape x = plan_layer_shape(m, p);
  const double sb = x.seq * x.batch, h = m.hidden, kv = m.kv_dim(), ffn = m.ffn_hidden, e = 2;
  const double kept = layer_activation_bytes(m, x, rm::kOpPolicy, true, false);
  EXPECT_DOUBLE_EQ(kept, e * sb * (h + h + kv + h + ffn + h) + 4.0 * sb * m.heads);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, x, Recompute::kSelectiveOp, true, false), kept);
  EXPECT_LT(kept, layer_activation_bytes(m, x, RecomputeMask{0}, true, false));
  EXPECT_GT(kept, layer_activation_bytes(m, x, rm::kFull, true, false));
  EXPECT_EQ(recompute_mask(Recompute::kSelectiveOp), rm::kOpPolicy);
  EXPECT_EQ(recompute_mask_string(rm::kOpPolicy), "op_policy");

  const LayerKernels k = layer_kernels(m, c.node.accelerator(), p, x, false);
  const double tokens = sb;
  const double wk = 2 * tokens * h * kv, wo = 2 * tokens * h * h, w3 = 2 * tokens * h * ffn;
  EXPECT_NEAR(k.recompute_flops(rm::kOpPolicy), wk + wo + w3, 1e-9 * (wk + wo + w3));
  double elementwise = 0, shares = 0;
  for (int i = 0; i < k.count; ++i) {
    const KernelName n = k.fwd[i].name;
    if (k.fwd[i].cls == KernelClass::kElementwise) {
      EXPECT_EQ(k.rerun_share(rm::kOpPolicy, i), 1.0) << kernel_name(n);
      elementwise += k.fwd[i].fwd_s;
    }
    if (n == KernelName::kQkv) {
      EXPECT_DOUBLE_EQ(k.rerun_share(rm::kOpPolicy, i), kv / (h + 2 * kv));
    }
    if (n == KernelName::kMlpUp) {
      EXPECT_DOUBLE_EQ(k.rerun_share(rm::kOpPolicy, i), 0.5);
    }
    if (n == KernelName::kAttention || n == KernelName::kMlpDown) {
      EXPECT_EQ(k.rerun_share(rm::kOpPolicy, i), 0.0);
    }
    shares += k.rerun_share(rm::kOpPolicy, i) * k.fwd[i].fwd_s;
  }
  EXPECT_GT(elementwise, 0);
  EXPECT_DOUBLE_EQ(k.recompute_seconds(rm::kOpPolicy), shares);
  // More than Megatron's selective (nothing, with flash attention), less than full.
  EXPECT_GT(k.recompute_seconds(rm::kOpPolicy), k.recompute_seconds(rm::kCoreAttn));
  EXPECT_LT(k.recompute_seconds(rm::kOpPolicy), 0.5 * k.recompute_seconds(rm::kFull));
}

// The simulator re-runs the same parts of the same kernels: the step agrees with the analytic
// model's, each recompute pass holds the elementwise kernels and the partial GEMMs, and the
// plan's policy round-trips through its name.
TEST(RecomputePlan, OpPolicyEnginesAgree) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 8);
  Plan p = testing::make_plan(1, 1, 8, 1, 16);
  p.flash_attention = true;
  p.zero_stage = 3;
  p.recompute = Recompute::kSelectiveOp;
  ASSERT_TRUE(validate_plan_on(p, m, c, "plan").ok());
  auto w = lower(m, c, p);
  ASSERT_TRUE(w.ok()) << w.error().message();
  const OpGraph& g = w->stages[0].graph();
  std::map<std::string, double> flops;
  std::map<std::string, int> ops;
  for (auto v : boost::make_iterator_range(boost::vertices(g)))
    if (g[v].phase == Phase::kRecompute) {
      flops[g[v].name] += g[v].flops;
      ++ops[g[v].name];
    }
  const LayerKernels k = layer_kernels(m, c.node.accelerator(), p, plan_layer_shape(m, p), false);
  const double runs = static_cast<double>(m.layers) * p.micro_batches();
  for (int i = 0; i < k.count; ++i) {
    const std::string name(kernel_name(k.fwd[i].name));
    EXPECT_NEAR(flops[name], runs * k.rerun_share(rm::kOpPolicy, i) * k.fwd[i].flops,
                1e-9 * (1 + runs * k.fwd[i].flops))
        << name;
  }
  EXPECT_EQ(ops.count("attention"), 0u);
  EXPECT_EQ(ops["qkv"], runs);  // wk, a share of the fused QKV GEMM
  testing::expect_engines_agree(m, c, p, 0.03, "selective-op");
  const AnalyticModel am(m, c);
  Plan none = p, sel = p;
  none.recompute = Recompute::kNone;
  sel.recompute = Recompute::kSelective;
  const Prediction op = am.evaluate(p), keep = am.evaluate(none);
  EXPECT_GT(op.step_time_s, keep.step_time_s);
  EXPECT_LT(op.memory.activations, keep.memory.activations);
  EXPECT_GT(op.hardware_flops, am.evaluate(sel).hardware_flops);
  auto back = plan_from_json(plan_to_json(p), "p.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->recompute, Recompute::kSelectiveOp);
  EXPECT_EQ(to_string(Recompute::kSelectiveOp), "selective-op");
}

// PyTorch's checkpoint with early stop (Plan::recompute_early_stop): a dense layer's full
// re-run ends with the MLP's activation -- no down projection, no row-parallel collective after
// it, no residual -- in both engines; an MoE layer's combine keeps its experts' outputs, so it
// re-runs whole; the flag round-trips and is refused with the uniform method.
TEST(RecomputePlan, EarlyStopEndsTheReRunWithTheActivation) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 8);
  Plan p = testing::make_plan(2, 1, 4, 1, 16);
  p.sequence_parallel = true;
  p.recompute = Recompute::kFull;
  Plan stop = p;
  stop.recompute_early_stop = true;
  const LayerShape x = plan_layer_shape(m, p);
  const LayerKernels whole = layer_kernels(m, c.node.accelerator(), p, x, false);
  const LayerKernels early = layer_kernels(m, c.node.accelerator(), stop, x, false);
  double skipped = 0, skipped_flops = 0;
  bool past_activation = false;
  for (int i = 0; i < early.count; ++i) {
    EXPECT_EQ(whole.rerun_share(rm::kFull, i), 1.0);
    EXPECT_EQ(early.rerun_share(rm::kFull, i), past_activation ? 0.0 : 1.0) << kernel_name(early.fwd[i].name);
    if (past_activation) {
      skipped += early.fwd[i].fwd_s;
      skipped_flops += early.fwd[i].flops;
    }
    past_activation = past_activation || early.fwd[i].name == KernelName::kActivation;
  }
  ASSERT_TRUE(past_activation);
  const double down = 2 * x.seq * x.batch * m.hidden * m.ffn_hidden / p.tp;
  EXPECT_NEAR(skipped_flops, down, 1e-9 * down);  // the down projection, the only GEMM after it
  EXPECT_GT(skipped, 0);
  EXPECT_NEAR(early.recompute_seconds(rm::kFull), whole.recompute_seconds(rm::kFull) - skipped,
              1e-12 * whole.recompute_seconds(rm::kFull));

  // The simulator's re-run: the same kernels, and the MLP's reduce-scatter not repeated.
  auto recompute_ops = [&](const Plan& q) {
    auto w = lower(m, c, q);
    EXPECT_TRUE(w.ok()) << w.error().message();
    std::map<std::string, int> ops;
    for (auto v : boost::make_iterator_range(boost::vertices(w->stages[0].graph())))
      if (w->stages[0].graph()[v].phase == Phase::kRecompute) ++ops[w->stages[0].graph()[v].name];
    return ops;
  };
  const auto all = recompute_ops(p), some = recompute_ops(stop);
  const int runs = m.layers * static_cast<int>(p.micro_batches());
  EXPECT_EQ(all.at("mlp_down"), runs);
  EXPECT_EQ(some.count("mlp_down"), 0u);
  EXPECT_EQ(some.at("mlp_up"), runs);
  EXPECT_EQ(some.at("activation"), runs);
  int all_tp = 0, some_tp = 0;
  for (const auto& [name, n] : all)
    if (name.find("tp_") != std::string::npos) all_tp += n;
  for (const auto& [name, n] : some)
    if (name.find("tp_") != std::string::npos) some_tp += n;
  EXPECT_EQ(all_tp - some_tp, runs) << "one row-parallel collective per layer and micro-batch fewer";
  const AnalyticModel am(m, c);
  const Prediction a = am.evaluate(p), b = am.evaluate(stop);
  EXPECT_LT(b.step_time_s, a.step_time_s);
  EXPECT_LT(b.hardware_flops, a.hardware_flops);
  EXPECT_DOUBLE_EQ(b.memory.activations, a.memory.activations);
  testing::expect_engines_agree(m, c, stop, 0.03, "full early-stop");

  // MoE layers re-run whole.
  const ModelSpec moe = testing::preset_model("mixtral-8x7b");
  const LayerShape y = plan_layer_shape(moe, p);
  const LayerKernels moe_whole = layer_kernels(moe, c.node.accelerator(), p, y, true);
  const LayerKernels moe_early = layer_kernels(moe, c.node.accelerator(), stop, y, true);
  EXPECT_DOUBLE_EQ(moe_early.recompute_seconds(rm::kFull), moe_whole.recompute_seconds(rm::kFull));

  auto back = plan_from_json(plan_to_json(stop), "p.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_TRUE(back->recompute_early_stop);
  EXPECT_EQ(recompute_string(stop), "full early-stop");
  Plan uniform = stop;
  uniform.recompute_method = RecomputeMethod::kUniform;
  uniform.recompute_layers = 4;
  const Status s = validate_plan(uniform, m, 0, "p.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("/recompute_early_stop: applies to layers checkpointed one by one"),
            std::string::npos)
      << s.error().message();
}

// Megatron-Core's --recompute-modules as DeepSeek-V3 uses them (layernorm, mla_up_proj, moe_act):
// MLA's core attention keeps q and k at every head's full width and v; mla_up_proj drops them
// (the compressed q and kv stay) and re-runs the up-projections' share of the QKV GEMM; moe_act
// drops the experts' activation output in MoE layers only. Both engines re-run the same kernels.
TEST(RecomputePlan, ModulesAsMegatronCoreNamesThem) {
  ModelSpec m = testing::preset_model("deepseek-v3");
  m.layers = 4;  // DeepSeek-V3's layers, fewer of them and of its experts, to fit 16 GPUs
  m.moe.experts = 16;
  m.moe.dense_layers = 1;
  ASSERT_TRUE(m.mla.enabled());
  LayerShape x;
  x.batch = 1;
  x.seq = 4096;
  x.kv_seq = 4096;
  const double sb = x.seq * x.batch, e = x.bytes_per_element;
  const double qk = m.heads * (m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim);
  auto kept = [&](RecomputeMask k, bool moe) { return layer_activation_bytes(m, x, k, true, moe); };
  EXPECT_DOUBLE_EQ(kept(0, false) - kept(rm::kMlaUpProj, false), e * sb * (2 * qk + m.v_dim()));
  const double expert_act = e * sb * m.moe.expert_ffn_hidden * (m.moe.top_k + m.moe.shared_experts);
  EXPECT_DOUBLE_EQ(kept(0, true) - kept(rm::kMoeAct, true), expert_act);
  EXPECT_DOUBLE_EQ(kept(rm::kMoeAct, false), kept(0, false));  // dense layers keep theirs
  EXPECT_EQ(recompute_mask_string(rm::kLayernorm | rm::kMlaUpProj | rm::kMoeAct),
            "layernorm+moe_act+mla_up_proj");

  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 16);
  Plan p = testing::make_plan(1, 2, 8, 1, 16);
  p.ep = 8;
  p.precision = Precision::kBf16;
  p.recompute = Recompute::kSelective;
  p.recompute_modules = {"layernorm", "mla_up_proj", "moe_act"};
  EXPECT_EQ(recompute_mask(p), rm::kLayernorm | rm::kMlaUpProj | rm::kMoeAct);
  const LayerKernels k = layer_kernels(m, c.node.accelerator(), p, plan_layer_shape(m, p), true);
  int qkv = -1;
  for (int i = 0; i < k.count; ++i)
    if (k.fwd[i].name == KernelName::kQkv) qkv = i;
  ASSERT_GE(qkv, 0);
  // DeepSeek-V3: q up 1536 x 128*192, kv up 512 x 128*256 against q down 7168 x 1536 and kv down
  // 7168 x 576.
  const double up = 1536.0 * 128 * 192 + 512.0 * 128 * 256, down = 7168.0 * 1536 + 7168.0 * 576;
  EXPECT_NEAR(k.rerun_share(rm::kMlaUpProj, qkv), up / (up + down), 1e-12);
  EXPECT_EQ(k.rerun_share(rm::kCoreAttn | rm::kLayernorm, qkv), 0.0);

  // The plan: checked, round-tripped, cheaper in memory than core_attn alone and dearer in time.
  ASSERT_TRUE(validate_plan_on(p, m, c, "plan").ok()) << validate_plan_on(p, m, c, "plan").error().message();
  auto back = plan_from_json(plan_to_json(p), "p.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->recompute_modules, p.recompute_modules);
  const AnalyticModel am(m, c);
  Plan plain = p;
  plain.recompute_modules.clear();
  const Prediction with = am.evaluate(p), without = am.evaluate(plain);
  EXPECT_LT(with.memory.activations, 0.8 * without.memory.activations);
  EXPECT_GT(with.time.recompute, without.time.recompute);
  testing::expect_engines_agree(m, c, p, 0.05, "recompute modules");

  Plan wrong = p;
  wrong.recompute = Recompute::kFull;
  auto err = validate_plan_on(wrong, m, c, "plan");
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.error().message().find("/recompute_modules: needs recompute selective"), std::string::npos);
  wrong = p;
  wrong.recompute_modules = {"moe"};
  err = validate_plan_on(wrong, m, c, "plan");
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.error().message().find("unknown module \"moe\""), std::string::npos);
  wrong.recompute_modules = {"mla_up_proj"};
  wrong.ep = 1;
  err = validate_plan_on(wrong, testing::preset_model("llama3-8b"), c, "plan");
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.error().message().find("multi-head latent attention"), std::string::npos)
      << err.error().message();
}

// A deterministic pseudo-random sequence (Knuth's MMIX LCG) for the knapsack instances.
struct Lcg {
  std::uint64_t s;
  double next() {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(s >> 11) / 9007199254740992.0;
  }
};

// The best of every combination: the least seconds whose bytes sum within `budget`.
double brute_force(const std::vector<std::vector<RecomputeOption>>& items, double budget) {
  double best = INFINITY;
  std::vector<std::size_t> idx(items.size(), 0);
  while (true) {
    double bytes = 0, secs = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      bytes += items[i][idx[i]].bytes;
      secs += items[i][idx[i]].seconds;
    }
    if (bytes <= budget) best = std::min(best, secs);
    std::size_t i = 0;
    while (i < items.size() && ++idx[i] == items[i].size()) idx[i++] = 0;
    if (i == items.size()) break;
  }
  return best;
}

TEST(RecomputeKnapsack, MatchesBruteForce) {
  Lcg rng{42};
  for (int trial = 0; trial < 200; ++trial) {
    // 5 layers, 4 options each. Integer sizes with bins == budget: no rounding, exact optimum.
    std::vector<std::vector<RecomputeOption>> items(5);
    for (auto& opts : items)
      for (int j = 0; j < 4; ++j)
        opts.push_back({static_cast<RecomputeMask>(j), std::floor(1 + 40 * rng.next()), 10 * rng.next()});
    const int budget = 20 + static_cast<int>(120 * rng.next());
    const double exact = brute_force(items, budget);
    const auto pick = choose_recompute(items, budget, budget);
    if (!std::isfinite(exact)) {
      EXPECT_FALSE(pick.has_value()) << trial;
      continue;
    }
    ASSERT_TRUE(pick.has_value()) << trial;
    double bytes = 0, secs = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      bytes += items[i][(*pick)[i]].bytes;
      secs += items[i][(*pick)[i]].seconds;
    }
    EXPECT_LE(bytes, budget) << trial;
    EXPECT_NEAR(secs, exact, 1e-12) << trial;
  }
}

// Real-valued sizes: the rounded-up programme always fits, is never better than the true optimum,
// and never worse than the optimum in the budget less the rounding (n layers x budget / bins).
TEST(RecomputeKnapsack, RoundingFitsAndLosesAtMostTheGranularity) {
  Lcg rng{7};
  const int bins = 256, n = 6;
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<std::vector<RecomputeOption>> items(n);
    for (auto& opts : items)
      for (int j = 0; j < 3; ++j)
        opts.push_back({static_cast<RecomputeMask>(j), 1e9 * (0.1 + rng.next()), rng.next()});
    const double budget = 1e9 * (1 + 4 * rng.next());
    const auto pick = choose_recompute(items, budget, bins);
    const double lower = brute_force(items, budget),
                 upper = brute_force(items, budget * (1 - 1.0 * n / bins));
    if (!pick) {
      EXPECT_FALSE(std::isfinite(upper)) << trial;
      continue;
    }
    double bytes = 0, secs = 0;
    for (int i = 0; i < n; ++i) {
      bytes += items[i][(*pick)[i]].bytes;
      secs += items[i][(*pick)[i]].seconds;
    }
    EXPECT_LE(bytes, budget) << trial;
    EXPECT_GE(secs, lower - 1e-12) << trial;
    EXPECT_LE(secs, upper + 1e-12) << trial;
  }
}

TEST(RecomputeKnapsack, DominatedOptionsGo) {
  const std::vector<RecomputeOption> o = {{0, 10, 0}, {1, 10, 1}, {2, 6, 2},
                                          {4, 6, 3},  {8, 2, 5},  {16, 2, 5}};
  const std::vector<RecomputeOption> kept = undominated(o);
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0].mask, 0);
  EXPECT_EQ(kept[1].mask, 2);
  EXPECT_EQ(kept[2].mask, 8);  // equal options: the first stays
}

// Llama 3 70B on 64 H100s (the README's 000 Sec. 3.1 case; with flash attention, micro-batches of
// 4 so that no recompute does not fit either): the optimal per-layer choice fits and is never
// slower than none, selective, full, block auto or uniform groups where those fit.
Plan seventy_b(bool flash) {
  Plan p = testing::make_plan(8, 4, 2, flash ? 4 : 1, 128);
  p.zero_stage = 1;
  p.sequence_parallel = true;
  p.flash_attention = flash;
  return p;
}

TEST(RecomputeOptimal, FitsAndBeatsTheFixedPolicies) {
  const ModelSpec m = testing::preset_model("llama3-70b");
  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 64);
  const AnalyticModel am(m, c);
  for (bool flash : {false, true}) {
    Plan opt = seventy_b(flash);
    opt.recompute = Recompute::kOptimal;
    ASSERT_TRUE(validate_plan_on(opt, m, c, "plan").ok());
    const Prediction best = am.evaluate(opt);
    EXPECT_TRUE(best.memory.fits()) << flash;
    EXPECT_GT(best.hardware_flops, best.model_flops) << flash;  // some layers recompute
    std::vector<Plan> others;
    for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      Plan q = seventy_b(flash);
      q.recompute = r;
      others.push_back(q);
    }
    Plan block = seventy_b(flash);
    block.recompute = Recompute::kFull;
    block.recompute_layers = fewest_recompute_layers(am, block);
    ASSERT_GT(block.recompute_layers, 0);
    others.push_back(block);
    for (int k : {2, 5, 10}) {
      Plan u = seventy_b(flash);
      u.recompute = Recompute::kFull;
      u.recompute_method = RecomputeMethod::kUniform;
      u.recompute_layers = k;
      others.push_back(u);
    }
    int fitting = 0;
    for (const Plan& q : others) {
      const Prediction r = am.evaluate(q);
      if (!r.memory.fits()) continue;
      ++fitting;
      EXPECT_LE(best.step_time_s, r.step_time_s * (1 + 1e-12)) << recompute_string(q) << " flash " << flash;
    }
    EXPECT_GE(fitting, 3) << flash;
    Plan none = seventy_b(flash);
    EXPECT_FALSE(am.memory(none).fits());
  }
}

// With a headroom the choice solves to capacity less that share: it leaves it free, at the cost
// of more recompute; the plan file keeps it, so the simulator and a later predict choose the same.
TEST(RecomputeOptimal, LeavesThePlansHeadroomFree) {
  const ModelSpec m = testing::preset_model("llama3-70b");
  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 64);
  const AnalyticModel am(m, c);
  Plan opt = seventy_b(true);
  opt.recompute = Recompute::kOptimal;
  const Prediction tight = am.evaluate(opt);
  ASSERT_TRUE(tight.memory.fits());
  ASSERT_LT(tight.memory.capacity - tight.memory.total, 0.10 * tight.memory.capacity);
  opt.recompute_headroom = 0.10;
  const Prediction loose = am.evaluate(opt);
  EXPECT_GE(loose.memory.capacity - loose.memory.total, 0.10 * loose.memory.capacity);
  EXPECT_GT(loose.hardware_flops, tight.hardware_flops);
  EXPECT_GE(loose.step_time_s, tight.step_time_s);
  auto back = plan_from_json(plan_to_json(opt), "plan.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_DOUBLE_EQ(back->recompute_headroom, 0.10);
}

TEST(RecomputeOptimal, ChoosesNoneWhenItFitsAndFullWhenNothingElseDoes) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 8);
  Plan p = testing::make_plan(8, 1, 1, 1, 8);
  p.recompute = Recompute::kOptimal;
  const AnalyticModel am(m, c);
  const RecomputeAssignment a = am.recompute_assignment(p);
  EXPECT_TRUE(a.fits);
  for (RecomputeMask k : a.layer_masks) EXPECT_EQ(k, 0);
  Plan none = p;
  none.recompute = Recompute::kNone;
  EXPECT_DOUBLE_EQ(am.evaluate(p).step_time_s, am.evaluate(none).step_time_s);
  EXPECT_DOUBLE_EQ(am.memory(p).total, am.memory(none).total);
  // A 70B on 8 devices does not fit even with full recompute: optimal says so the same way.
  const ModelSpec big = testing::preset_model("llama3-70b");
  Plan q = testing::make_plan(8, 1, 1, 1, 8);
  q.recompute = Recompute::kOptimal;
  const AnalyticModel am70(big, c);
  const RecomputeAssignment b = am70.recompute_assignment(q);
  EXPECT_FALSE(b.fits);
  Plan full = q;
  full.recompute = Recompute::kFull;
  EXPECT_DOUBLE_EQ(am70.memory(q).total, am70.memory(full).total);
  EXPECT_FALSE(am70.memory(q).fits());
}

// Uniform groups of k layers (Megatron's uniform method): every layer recomputes (the time of
// full recompute), each group keeps its input only, and a group's k layers hold their full
// activations while it recomputes. On a middle stage of n layers with i micro-batches in flight:
//   activations = i * ceil(n/k) * input + k * whole_layer      (full recompute: k = 1)
TEST(RecomputeUniform, ClosedForms) {
  const ModelSpec m = testing::preset_model("llama3-70b");
  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 64);
  const AnalyticModel am(m, c);
  Plan full = seventy_b(true);
  full.recompute = Recompute::kFull;
  const LayerShape s = plan_layer_shape(m, full);
  const double input = layer_activation_bytes(m, s, rm::kFull, true, false);
  const double whole = layer_activation_bytes(m, s, RecomputeMask{0}, true, false);
  const int n = m.layers / full.pp;  // 20
  const int stage = 1;
  const double in_flight = activations_in_flight(full, stage);
  EXPECT_DOUBLE_EQ(in_flight, 3);
  EXPECT_NEAR(am.stage_memory(full, stage).activations, in_flight * n * input + whole, 1e-6 * whole);
  for (int k : {1, 3, 5, 10, 20}) {
    Plan u = full;
    u.recompute_method = RecomputeMethod::kUniform;
    u.recompute_layers = k;
    const int groups = (n + k - 1) / k;
    EXPECT_NEAR(am.stage_memory(u, stage).activations, in_flight * groups * input + k * whole, 1e-6 * whole)
        << k;
    EXPECT_DOUBLE_EQ(am.evaluate(u).step_time_s, am.evaluate(full).step_time_s) << k;
    EXPECT_DOUBLE_EQ(am.evaluate(u).time.recompute, am.evaluate(full).time.recompute) << k;
  }
}

// Both engines on the same choice: the simulator re-runs each layer's chosen kernels (counted
// here) and agrees with the analytic model's step.
TEST(RecomputeOptimal, EnginesAgree) {
  const ModelSpec m = testing::preset_model("llama3-70b");
  const ClusterSpec c = testing::preset_cluster("dgx-h100-ndr", 64);
  const AnalyticModel am(m, c);
  Plan opt = seventy_b(false);
  opt.recompute = Recompute::kOptimal;
  const RecomputeAssignment a = am.recompute_assignment(opt);
  std::map<RecomputeMask, int> kinds;
  for (RecomputeMask k : a.layer_masks) ++kinds[k];
  EXPECT_GE(kinds.size(), 1u);
  auto w = lower(m, c, opt);
  ASSERT_TRUE(w.ok()) << w.error().message();
  ASSERT_EQ(w->layer_recompute, a.layer_masks);
  // Stage 1's recomputed norms, activations and up-projections, against the assignment.
  const OpGraph& g = w->stages[1].graph();
  std::map<std::string, int> ops;
  for (auto v : boost::make_iterator_range(boost::vertices(g)))
    if (g[v].phase == Phase::kRecompute) ++ops[g[v].name];
  std::map<std::string, int> want;
  const LayerKernels k = layer_kernels(m, c.node.accelerator(), opt, plan_layer_shape(m, opt), false);
  for (int i = 0; i < k.count; ++i) want[std::string(kernel_name(k.fwd[i].name))] = 0;
  for (int layer : stage_layer_list(opt, m.layers, 1))
    for (int i = 0; i < k.count; ++i)
      if (k.rerun_share(a.layer_masks[layer], i) > 0)
        want[std::string(kernel_name(k.fwd[i].name))] += static_cast<int>(opt.micro_batches());
  for (const auto& [name, count] : want) EXPECT_EQ(ops[name], count) << name;
  testing::expect_engines_agree(m, c, opt, 0.03, "optimal");
  Plan u = seventy_b(true);
  u.recompute = Recompute::kFull;
  u.recompute_method = RecomputeMethod::kUniform;
  u.recompute_layers = 5;
  testing::expect_engines_agree(m, c, u, 0.03, "uniform 5");
}

TEST(RecomputePlan, FieldsRoundTripAndBadValuesNameTheField) {
  const ModelSpec m = testing::preset_model("llama3-8b");
  Plan u = testing::make_plan(1, 4, 2, 1, 64);
  u.recompute = Recompute::kFull;
  u.recompute_method = RecomputeMethod::kUniform;
  u.recompute_layers = 4;
  auto back = plan_from_json(plan_to_json(u), "p.json");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, u);
  EXPECT_EQ(recompute_string(u), "full /4");
  Plan o = u;
  o.recompute = Recompute::kOptimal;
  o.recompute_method = RecomputeMethod::kBlock;
  o.recompute_layers = -1;
  back = plan_from_json(plan_to_json(o), "p.json");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->recompute, Recompute::kOptimal);
  EXPECT_TRUE(validate_plan(o, m, 0, "p.json").ok());

  auto bad = plan_from_json(nlohmann::json{{"global_batch", 8}, {"recompute", "optimum"}}, "p.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(
      bad.error().message().find("/recompute: \"optimum\" is not one of: none, selective, full, optimal"),
      std::string::npos)
      << bad.error().message();
  bad = plan_from_json(nlohmann::json{{"global_batch", 8}, {"recompute_method", "every"}}, "p.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("/recompute_method: \"every\" is not one of: block, uniform"),
            std::string::npos)
      << bad.error().message();
  Plan sel = u;
  sel.recompute = Recompute::kSelective;
  Status s = validate_plan(sel, m, 0, "p.json");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(
      s.error().message(),
      "p.json: /recompute_method: uniform needs recompute full (it checkpoints groups of whole layers)");
  Plan no_group = u;
  no_group.recompute_layers = -1;
  s = validate_plan(no_group, m, 0, "p.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("/recompute_layers:"), std::string::npos);
  Plan both = o;
  both.recompute_layers = 3;
  s = validate_plan(both, m, 0, "p.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("/recompute_layers: cannot be combined with recompute optimal"),
            std::string::npos);
}

}  // namespace
}  // namespace foresight
