// The trainer on one rank (in-process): the backward against finite differences of the loss,
// recompute keeping the gradients, the loss falling, fp16 loss scaling, the articles' algorithmic
// options, unfused kernels, what the runtime refuses, and its traces against the simulator's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/runtime/runtime_test_util.h"

namespace foresight::runtime {
namespace {

TEST(Runtime, BackwardMatchesFiniteDifferencesOfTheLoss) {
  // d loss / d p from the backward vs (L(p + e) - L(p - e)) / 2e, for the largest gradient of
  // every tensor. fp32 loss of ~4.2 carries ~5e-7 of rounding; with e = 1e-3 and gradients of
  // 1e-3..1e-1 the difference quotient is good to a few percent, so 5% + 2e-4 absolute.
  for (bool flash : {true, false}) {
    Plan p = plan(2);
    p.flash_attention = flash;
    auto s = serial(tiny4(), p);
    ASSERT_TRUE(s->t->step(false));
    const Buffer g = s->t->grads();
    for (const TensorSlot& t : s->t->layout().tensors()) {
      std::size_t best = t.offset;
      for (std::size_t i = t.offset; i < t.offset + t.size(); ++i)
        if (std::fabs(g[i]) > std::fabs(g[best])) best = i;
      const float e = 1e-3f, p0 = s->t->params()[best];
      s->t->set_param(best, p0 + e);
      const double up = s->t->step(false)->loss;
      s->t->set_param(best, p0 - e);
      const double down = s->t->step(false)->loss;
      s->t->set_param(best, p0);
      const double fd = (up - down) / (2.0 * e);
      EXPECT_NEAR(g[best], fd, 0.05 * std::fabs(fd) + 2e-4)
          << t.name << " layer " << t.layer << (flash ? " (fused attention)" : " (unfused attention)");
    }
  }
}

// Recompute changes what is kept, never the arithmetic: each module set, a mix of sets per layer,
// uniform groups and the block method give the no-recompute run's loss and gradients (the same
// kernels on the same inputs in fp32: equal to float rounding of the accumulation order, 1e-6 of
// each tensor's largest gradient). A module that dropped a tensor without its kernel re-running
// leaves the backward reading an empty buffer (a crash or garbage).
TEST(Runtime, RecomputeModulesAndUniformGroupsKeepTheGradients) {
  namespace rm = recompute_module;
  const ModelSpec m = tiny4();
  auto c = load_cluster("cpu-local");
  ASSERT_TRUE(c);
  ASSERT_TRUE(resize_cluster(*c, 1, "gpus"));
  for (bool flash : {false, true}) {
    Plan base = plan(4);
    base.flash_attention = flash;
    auto ref = serial(m, base);
    auto ref_step = ref->t->step(false);
    ASSERT_TRUE(ref_step);
    const Buffer g0 = ref->t->grads();
    auto check = [&](const Plan& p, const std::vector<RecomputeMask>& masks, const std::string& what) {
      auto w = masks.empty() ? lower(m, *c, p) : lower(m, *c, p, masks);
      ASSERT_TRUE(w) << w.error().message();
      int recomputed = 0;
      for (auto v : boost::make_iterator_range(boost::vertices(w->stages[0].graph())))
        recomputed += w->stages[0].graph()[v].phase == Phase::kRecompute;
      if (what != "core_attn" || !flash) {
        EXPECT_GT(recomputed, 0) << what;  // flash: core_attn has nothing to re-run
      }
      Comm self;
      auto t = Trainer::create(*w, self, {});
      ASSERT_TRUE(t) << t.error().message();
      auto st = (*t)->step(false);
      ASSERT_TRUE(st) << what;
      EXPECT_NEAR(st->loss, ref_step->loss, 1e-6 * std::fabs(ref_step->loss)) << what << " flash " << flash;
      const Buffer& g = (*t)->grads();
      for (const TensorSlot& ts : (*t)->layout().tensors()) {
        float largest = 0, diff = 0;
        for (std::size_t i = ts.offset; i < ts.offset + ts.size(); ++i) {
          largest = std::max(largest, std::fabs(g0[i]));
          diff = std::max(diff, std::fabs(g[i] - g0[i]));
        }
        EXPECT_LE(diff, 1e-6f * largest + 1e-12f)
            << what << ": " << ts.name << " layer " << ts.layer << " flash " << flash;
      }
    };
    Plan opt = base;
    opt.recompute = Recompute::kOptimal;
    const std::pair<const char*, RecomputeMask> sets[] = {
        {"core_attn", rm::kCoreAttn},
        {"layernorm", rm::kLayernorm},
        {"act", rm::kAct},
        {"mlp", rm::kMlp},
        {"core_attn+layernorm+mlp", rm::kCoreAttn | rm::kLayernorm | rm::kMlp},
        {"full", rm::kFull}};
    for (const auto& [name, k] : sets) check(opt, std::vector<RecomputeMask>(4, k), name);
    check(opt, {rm::kLayernorm | rm::kAct, rm::kFull, 0, rm::kCoreAttn | rm::kMlp}, "mixed");
    for (int group : {2, 3, 4}) {
      Plan u = base;
      u.recompute = Recompute::kFull;
      u.recompute_method = RecomputeMethod::kUniform;
      u.recompute_layers = group;
      check(u, {}, "uniform " + std::to_string(group));
    }
    Plan block = base;
    block.recompute = flash ? Recompute::kFull : Recompute::kSelective;
    block.recompute_layers = 2;
    check(block, {}, "block 2");
  }
}

TEST(Runtime, LossFallsOnSyntheticData) {
  // Uniform prediction over 256 tokens costs log(256) = 5.55 nats; the data follow a fixed rule
  // 90% of the time, so a model that learns anything gets well below that in 50 steps.
  RunOptions o;
  o.adam.lr = 3e-3f;
  auto s = serial(testing::preset_model("tiny"), plan(8), o);
  const double first = s->t->step()->loss;
  EXPECT_NEAR(first, std::log(256.0), 0.3);
  double last = first;
  for (int i = 1; i < 50; ++i) last = s->t->step()->loss;
  EXPECT_LT(last, first - 1.0) << "first " << first << ", after 50 steps " << last;
}

TEST(Runtime, Fp16OverflowSkipsTheStepAndHalvesTheScale) {
  Plan p = plan(2);
  p.precision = Precision::kFp16;
  RunOptions o;
  o.initial_loss_scale = std::ldexp(1.0f, 100);  // every gradient exceeds fp16's 65504
  auto s = serial(tiny4(), p, o);
  const Buffer before = s->t->params();
  auto st = s->t->step();
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->skipped);
  EXPECT_DOUBLE_EQ(st->loss_scale, std::ldexp(1.0, 99));
  EXPECT_EQ(s->t->params(), before) << "a skipped step must not touch the parameters";

  o.initial_loss_scale = 1024;  // gradients ~1e-2 x 1024: in range
  auto ok = serial(tiny4(), p, o);
  auto st2 = ok->t->step();
  EXPECT_FALSE(st2->skipped);
  EXPECT_DOUBLE_EQ(st2->loss_scale, 1024);
  EXPECT_NE(ok->t->params(), before);
}

TEST(Runtime, Fp16UpdateEqualsTheFp32UpdateUnscaled) {
  // Loss scaling multiplies the gradients by S and the optimizer divides by S: with a power of
  // two, every float is scaled exactly, so the update is bit-identical to fp32's.
  Plan p = plan(2);
  auto a = serial(tiny4(), p);
  p.precision = Precision::kFp16;
  RunOptions o;
  o.initial_loss_scale = 256;
  auto b = serial(tiny4(), p, o);
  ASSERT_TRUE(a->t->step());
  ASSERT_TRUE(b->t->step());
  EXPECT_EQ(a->t->params(), b->t->params());
}

// The articles' algorithmic options (runtime/training/algorithms.h): each formula by hand, and each option
// active in a real run (it changes the run) while the loss still falls.
TEST(RuntimeAlgorithms, FormulasByHand) {
  EXPECT_DOUBLE_EQ(loss_variance({}), 0);
  EXPECT_DOUBLE_EQ(loss_variance({1.0, 3.0}), 1.0);
  EXPECT_DOUBLE_EQ(variance_adjusted_scale(1024, 0.5, 1.0), 512);  // 1024 * (1 - 0.5)
  EXPECT_DOUBLE_EQ(variance_adjusted_scale(1024, 10, 1.0), 16);    // clamped at base / 64
  EXPECT_DOUBLE_EQ(variance_adjusted_scale(1024, 0.5, 0.0), 1024);
  float g[2] = {1.0f, 2.0f};
  const float fresh[2] = {3.0f, 4.0f};
  const double correction = decay_accumulate(g, fresh, 2, 0.75, 2);
  EXPECT_FLOAT_EQ(g[0], 0.75f * 1 + 0.25f * 3);
  EXPECT_FLOAT_EQ(g[1], 0.75f * 2 + 0.25f * 4);
  EXPECT_DOUBLE_EQ(correction, 1 / (1 - 0.75 * 0.75));
  // ARAdam: gamma 0 is AdamW; otherwise the step scales by 1 + gamma |theta| per parameter.
  const kernels::AdamWConfig c{1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f};
  float p1[2] = {0.5f, -2.0f}, p2[2] = {0.5f, -2.0f}, m1[2] = {}, m2[2] = {}, v1[2] = {}, v2[2] = {};
  const float grads[2] = {0.3f, -0.1f};
  kernels::adamw_cpu(p1, m1, v1, grads, 2, c, 1, 1.0f);
  aradam_cpu(p2, m2, v2, grads, 2, c, 1, 1.0f, 0.0);
  EXPECT_EQ(p1[0], p2[0]);
  EXPECT_EQ(p1[1], p2[1]);
  float p3[2] = {0.5f, -2.0f}, m3[2] = {}, v3[2] = {};
  aradam_cpu(p3, m3, v3, grads, 2, c, 1, 1.0f, 1.0);
  EXPECT_NEAR((p3[0] - 0.5f) / (p1[0] - 0.5f), 1.5, 1e-4);  // 1 + |0.5|
  EXPECT_NEAR((p3[1] + 2.0f) / (p1[1] + 2.0f), 3.0, 1e-4);  // 1 + |-2|
}

TEST(RuntimeAlgorithms, EachOptionRunsAndTheLossFalls) {
  auto run = [](Precision prec, const AlgorithmOptions& a, std::vector<StepStats>* stats = nullptr) {
    RunOptions o;
    o.adam.lr = 3e-3f;
    o.algorithms = a;
    Plan p = plan(8);
    p.precision = prec;
    auto s = serial(testing::preset_model("tiny"), p, o);
    std::vector<double> losses;
    for (int i = 0; i < 30; ++i) {
      auto st = s->t->step();
      EXPECT_TRUE(st.ok());
      losses.push_back(st->loss);
      if (stats) stats->push_back(*st);
    }
    return losses;
  };
  const std::vector<double> plain = run(Precision::kFp32, {});
  AlgorithmOptions decay;
  decay.grad_decay = 0.5;
  AlgorithmOptions aradam;
  aradam.aradam_gamma = 0.5;
  for (const AlgorithmOptions& a : {decay, aradam}) {
    const std::vector<double> l = run(Precision::kFp32, a);
    EXPECT_EQ(l.front(), plain.front());  // the first forward is the same
    EXPECT_NE(l.back(), plain.back());    // the option changed the updates
    EXPECT_LT(l.back(), l.front() - 0.5);
  }
  // fp16: the applied scale follows base * (1 - alpha * var(the losses so far, up to 20)).
  AlgorithmOptions scaled;
  scaled.loss_scale_alpha = 1.0;
  std::vector<StepStats> st;
  run(Precision::kFp16, scaled, &st);
  std::deque<double> window;
  for (const StepStats& s : st) {
    EXPECT_DOUBLE_EQ(s.applied_loss_scale, variance_adjusted_scale(65536, 1.0, loss_variance(window)));
    window.push_back(s.loss);
    if (window.size() > 20) window.pop_front();
  }
  EXPECT_LT(st.back().applied_loss_scale, 65536);
}

TEST(RuntimeAlgorithms, BadOptionsAreClearErrors) {
  auto c = load_cluster("cpu-local");
  ASSERT_TRUE(resize_cluster(*c, 1, "gpus").ok());
  auto w = lower(testing::preset_model("tiny"), *c, plan(8));
  ASSERT_TRUE(w.ok());
  Comm self;
  RunOptions o;
  o.algorithms.loss_scale_alpha = 0.5;  // the plan is fp32
  auto t = Trainer::create(*w, self, o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message().find("needs precision fp16"), std::string::npos);
  o = RunOptions{};
  o.algorithms.grad_decay = 1.0;
  t = Trainer::create(*w, self, o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message().find("beta must be in [0, 1)"), std::string::npos);
}

// kernel_fusion off: RMSNorm and SwiGLU run as eager chains of passes (cpu_fast.h); the step's
// loss and gradients are the fused run's up to rounding, and the unfused softmax chain is refused.
TEST(Runtime, UnfusedKernelsKeepTheGradients) {
  const ModelSpec m = testing::preset_model("tiny");
  ASSERT_EQ(m.norm, NormKind::kRmsNorm);
  ASSERT_EQ(m.mlp, MlpKind::kSwiglu);
  Plan fused = plan(4);
  auto ref = serial(m, fused);
  auto ref_step = ref->t->step(false);
  ASSERT_TRUE(ref_step);
  Plan eager = fused;
  eager.kernel_fusion = false;
  ASSERT_TRUE(check_runtime_plan(m, eager, "plan.json").ok());
  auto run = serial(m, eager);
  auto st = run->t->step(false);
  ASSERT_TRUE(st);
  EXPECT_NEAR(st->loss, ref_step->loss, 1e-5 * std::fabs(ref_step->loss));
  const Buffer &g0 = ref->t->grads(), &g = run->t->grads();
  for (const TensorSlot& ts : run->t->layout().tensors()) {
    float largest = 0, diff = 0;
    for (std::size_t i = ts.offset; i < ts.offset + ts.size(); ++i) {
      largest = std::max(largest, std::fabs(g0[i]));
      diff = std::max(diff, std::fabs(g[i] - g0[i]));
    }
    EXPECT_LE(diff, 1e-4f * largest + 1e-12f) << ts.name << " layer " << ts.layer;
  }
  eager.flash_attention = false;
  const Status refused = check_runtime_plan(m, eager, "plan.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find("plan.json: /kernel_fusion"), std::string::npos)
      << refused.error().message();
}

TEST(Runtime, RefusesWhatItDoesNotExecuteWithTheField) {
  const ModelSpec m = tiny4();
  Plan p = plan(8);
  p.cp = 2;
  EXPECT_NE(check_runtime_plan(m, p, "plan.json").error().message().find("plan.json: /cp"),
            std::string::npos);
  p = plan(8);
  p.tp = 2;
  p.sequence_parallel = true;
  p.seq_len = 15;  // 15 tokens per micro-batch cannot be split in two
  EXPECT_NE(check_runtime_plan(m, p, "plan.json").error().message().find("sequence parallelism splits"),
            std::string::npos);
  p = plan(8);
  p.zero_stage = 3;
  EXPECT_NE(check_runtime_plan(m, p, "plan.json").error().message().find("/zero_stage"), std::string::npos);
  p = plan(8);
  p.recompute = Recompute::kSelectiveOp;  // torchtitan's op policy: predicted, not executed
  EXPECT_NE(check_runtime_plan(m, p, "plan.json").error().message().find("plan.json: /recompute"),
            std::string::npos);
  p = plan(8);
  p.schedule = Schedule::kZeroBubble;
  EXPECT_NE(check_runtime_plan(m, p, "plan.json").error().message().find("/schedule"), std::string::npos);
  p = plan(8);
  p.tp = 4;  // 2 kv heads
  EXPECT_NE(check_runtime_plan(m, p, "plan.json").error().message().find("kv_heads"), std::string::npos);
}

TEST(Runtime, PredictedAndMeasuredTracesAlignOpByOp) {
  // One graph, two executors: the simulator's trace and the runtime's trace of the same plan
  // carry the same op ids, every one of them.
  const auto dir = test_temp_path("trainer");
  std::filesystem::create_directories(dir);
  const std::string pred = (dir / "fs-align-pred.json").string(),
                    meas = (dir / "fs-align-meas.json").string();
  const std::string bin = FORESIGHT_BINARY;
  const std::string plan =
      " --model " + kTiny4 + " --cluster cpu-local --gpus 1 --gb 4 --recompute full --precision fp32";
  ASSERT_EQ(std::system((bin + " simulate" + plan + " --full --trace " + pred + " > /dev/null").c_str()), 0);
  ASSERT_EQ(std::system((bin + " run" + plan + " --steps 2 --trace " + meas + " > /dev/null").c_str()), 0);
  ASSERT_EQ(std::system((bin + " compare " + pred + " " + meas + " --out " +
                         (dir / "fs-align.json").string() + " > /dev/null")
                            .c_str()),
            0);
  const auto report = nlohmann::json::parse(std::ifstream(dir / "fs-align.json"));
  auto m = load_model_file(kTiny4);
  auto c = load_cluster("cpu-local");
  ASSERT_TRUE(resize_cluster(*c, 1, "gpus"));
  Plan p = plan_from_defaults();
  auto w = lower(*m, *c, p);
  ASSERT_TRUE(w) << w.error().message();
  EXPECT_EQ(report["matched_ops"].get<std::size_t>(), w->op_count());
  EXPECT_GT(report["measured_step_s"].get<double>(), 0);
}

TEST(Runtime, TheMeasuredTraceIsTheMedianSteps) {
  // The measured trace (and so `--predict`'s op-by-op comparison) is of the step whose time is the
  // median one, so that its ops add up to the step time they are compared with.
  const auto dir = test_temp_path("trainer");
  std::filesystem::create_directories(dir);
  const std::string meas = (dir / "fs-median-meas.json").string(),
                    sum = (dir / "fs-median-sum.json").string();
  const std::string plan = " --model " + kTiny4 + " --cluster cpu-local --gpus 1 --gb 4 --precision fp32";
  ASSERT_EQ(std::system((std::string(FORESIGHT_BINARY) + " run" + plan + " --steps 7 --warmup 2 --trace " +
                         meas + " --summary " + sum + " > /dev/null")
                            .c_str()),
            0);
  const auto summary = nlohmann::json::parse(std::ifstream(sum));
  const int traced = summary["metadata"]["traced_step"].get<int>();
  const double median = summary["median_step_s"].get<double>();
  double traced_s = -1;
  for (const auto& st : summary["steps"])
    if (st["step"].get<int>() == traced) traced_s = st["seconds"].get<double>();
  EXPECT_GE(traced, 3) << "a warm-up step was traced";
  EXPECT_NEAR(traced_s, median, 1e-6 * median) << "traced step " << traced;
  EXPECT_NEAR(summary["metadata"]["measured_step_s"].get<double>(), traced_s, 1e-12);
  EXPECT_GT(std::filesystem::file_size(meas), 0u);
}

}  // namespace
}  // namespace foresight::runtime
