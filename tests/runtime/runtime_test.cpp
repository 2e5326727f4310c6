// Runtime tests. In-process (one rank): the backward against finite differences of the loss, the
// loss falling, fp16 loss scaling, checkpoint round trips, gradient compression's error feedback
// and int8 blocks. Under mpirun (localhost, up to 4 ranks oversubscribed): every layout and
// schedule against the serial run, compressed data parallelism (loss, bytes, replicas), resumed
// runs continuing bit-identically, a dying rank ending the job.
#include <gtest/gtest.h>

#include <algorithm>
#include <boost/range/iterator_range.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/backends/cpu_fast.h"
#include "runtime/calibration/calibrate.h"
#include "runtime/communication/comm.h"
#include "runtime/communication/grad_compression.h"
#include "runtime/training/hash.h"
#include "runtime/training/trainer.h"
#include "sim/spec/presets.h"
#include "tests/test_util.h"

namespace foresight::runtime {
namespace {

const std::string kTiny4 = std::string(FORESIGHT_TEST_DATA) + "/runtime/tiny4.json";

struct Serial {
  Workload w;
  Comm self;
  std::unique_ptr<Trainer> t;
};

ModelSpec tiny4() {
  auto m = load_model_file(kTiny4);
  EXPECT_TRUE(m) << m.error().message();
  return m ? *m : ModelSpec{};
}

std::unique_ptr<Serial> serial(const ModelSpec& m, Plan p, RunOptions o = {},
                               std::unique_ptr<Backend> be = nullptr) {
  auto c = load_cluster("cpu-local");
  EXPECT_TRUE(c);
  EXPECT_TRUE(resize_cluster(*c, 1, "gpus"));
  auto s = std::make_unique<Serial>();
  auto w = lower(m, *c, p);
  EXPECT_TRUE(w) << w.error().message();
  s->w = std::move(w).value();
  auto t = Trainer::create(s->w, s->self, o, std::move(be));
  EXPECT_TRUE(t) << t.error().message();
  s->t = std::move(t).value();
  return s;
}

// The plan the CLI builds from "--gpus 1 --gb 4 --recompute full --precision fp32".
Plan plan_from_defaults() {
  Plan p;
  p.global_batch = 4;
  p.recompute = Recompute::kFull;
  p.precision = Precision::kFp32;
  return p;
}

Plan plan(long long gb) {
  Plan p;
  p.global_batch = gb;
  p.precision = Precision::kFp32;
  return p;
}

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

TEST(Runtime, CheckpointResumeIsBitIdenticalAndCorruptionIsCaught) {
  const auto dir = std::filesystem::temp_directory_path() / "foresight-ckpt-test";
  std::filesystem::remove_all(dir);
  auto straight = serial(tiny4(), plan(2));
  std::vector<double> losses;
  for (int i = 0; i < 5; ++i) losses.push_back(straight->t->step()->loss);

  auto first = serial(tiny4(), plan(2));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(first->t->step());
  ASSERT_TRUE(first->t->save_checkpoint(dir.string()));
  auto resumed = serial(tiny4(), plan(2));
  ASSERT_TRUE(resumed->t->load_checkpoint(dir.string()));
  EXPECT_EQ(resumed->t->steps_done(), 3);
  EXPECT_EQ(resumed->t->step()->loss, losses[3]);
  EXPECT_EQ(resumed->t->step()->loss, losses[4]);
  EXPECT_EQ(resumed->t->params(), straight->t->params());

  // One flipped byte: the manifest's hash must refuse the file, and with no other set, the load.
  const auto file = dir / "step-00000003" / "rank-00000.ckpt";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    char ch = 0;
    f.read(&ch, 1);
    f.seekp(200);
    ch ^= 0x10;
    f.write(&ch, 1);
  }
  auto again = serial(tiny4(), plan(2));
  const auto bad = again->t->load_checkpoint(dir.string());
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("no complete checkpoint set"), std::string::npos)
      << bad.error().message();
  EXPECT_NE(bad.error().message().find("FNV-1a hash"), std::string::npos) << bad.error().message();

  // A checkpoint of another plan is refused by name.
  Plan other = plan(4);
  auto fresh = serial(tiny4(), plan(2));
  ASSERT_TRUE(fresh->t->save_checkpoint(dir.string()));
  auto wrong = serial(tiny4(), other);
  const auto mismatch = wrong->t->load_checkpoint(dir.string());
  ASSERT_FALSE(mismatch);
  EXPECT_NE(mismatch.error().message().find("/plan"), std::string::npos) << mismatch.error().message();
  std::filesystem::remove_all(dir);
}

std::string read_bytes(const std::filesystem::path& f) {
  std::ifstream in(f, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void flip_byte(const std::filesystem::path& f, std::streamoff at) {
  std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(at);
  char ch = 0;
  io.read(&ch, 1);
  io.seekp(at);
  ch ^= 0x10;
  io.write(&ch, 1);
}

TEST(CheckpointSet, TheManifestNamesEveryFileAndIsWrittenOnlyAfterThem) {
  const auto dir = std::filesystem::temp_directory_path() / "foresight-ckpt-manifest";
  std::filesystem::remove_all(dir);
  auto run = serial(tiny4(), plan(2));
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(run->t->step());
  ASSERT_TRUE(run->t->save_checkpoint(dir.string()));
  const auto set2 = dir / "step-00000002";
  const auto m = nlohmann::json::parse(std::ifstream(set2 / "MANIFEST.json"));
  EXPECT_EQ(m["format"], "foresight-checkpoint-set");
  EXPECT_EQ(m["version"], 1);
  EXPECT_EQ(m["step"], 2);
  EXPECT_EQ(m["ranks"], 1);
  EXPECT_EQ(m["model"], run->w.model.name);
  EXPECT_EQ(m["plan"], plan_to_json(run->w.plan));
  ASSERT_EQ(m["files"].size(), 1u);
  const std::string bytes = read_bytes(set2 / "rank-00000.ckpt");
  EXPECT_EQ(m["files"][0]["file"], "rank-00000.ckpt");
  EXPECT_EQ(m["files"][0]["bytes"].get<std::size_t>(), bytes.size());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(bytes)));
  EXPECT_EQ(m["files"][0]["fnv1a"], hex);
  EXPECT_EQ(bytes, run->t->checkpoint_bytes());  // the file is the state, byte for byte

  // A rank's file that cannot be written (a folder stands where it goes): no manifest for that
  // step, the error names the file, and the previous set stays complete and resumable.
  ASSERT_TRUE(run->t->step());
  const auto set3 = dir / "step-00000003";
  std::filesystem::create_directories(set3 / "rank-00000.ckpt");
  const Status failed = run->t->save_checkpoint(dir.string());
  ASSERT_FALSE(failed);
  EXPECT_NE(failed.error().message().find((set3 / "rank-00000.ckpt").string()), std::string::npos)
      << failed.error().message();
  EXPECT_NE(failed.error().message().find("no manifest was written for step 3"), std::string::npos)
      << failed.error().message();
  EXPECT_FALSE(std::filesystem::exists(set3 / "MANIFEST.json"));
  EXPECT_TRUE(std::filesystem::exists(set2 / "MANIFEST.json"));
  auto resumed = serial(tiny4(), plan(2));
  const auto read = resumed->t->load_checkpoint(dir.string());
  ASSERT_TRUE(read) << read.error().message();
  EXPECT_EQ(read->step, 2);
  EXPECT_EQ(resumed->t->steps_done(), 2);
  ASSERT_EQ(read->skipped.size(), 1u);
  EXPECT_NE(read->skipped[0].find("(step 3): incomplete: no MANIFEST.json"), std::string::npos)
      << read->skipped[0];

  // Once the step's set is complete, the older ones go.
  std::filesystem::remove_all(set3);
  ASSERT_TRUE(run->t->save_checkpoint(dir.string()));
  EXPECT_TRUE(std::filesystem::exists(set3 / "MANIFEST.json"));
  EXPECT_FALSE(std::filesystem::exists(set2));
  std::filesystem::remove_all(dir);
}

TEST(CheckpointSet, ADamagedOrMissingFileFallsBackToThePreviousCompleteSet) {
  const auto dir = std::filesystem::temp_directory_path() / "foresight-ckpt-fallback";
  const auto keep = std::filesystem::temp_directory_path() / "foresight-ckpt-fallback-step2";
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(keep);
  auto straight = serial(tiny4(), plan(2));
  std::vector<double> losses;
  for (int i = 0; i < 5; ++i) losses.push_back(straight->t->step()->loss);
  // Two complete sets side by side, as a crash between the new manifest and the removal of the
  // old set leaves them: the set of step 2 is copied aside before step 3's replaces it.
  auto first = serial(tiny4(), plan(2));
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(first->t->step());
  ASSERT_TRUE(first->t->save_checkpoint(dir.string()));
  std::filesystem::copy(dir / "step-00000002", keep);
  ASSERT_TRUE(first->t->step());
  ASSERT_TRUE(first->t->save_checkpoint(dir.string()));
  const auto file3 = dir / "step-00000003" / "rank-00000.ckpt";
  const std::string good3 = read_bytes(file3);
  struct Damage {
    const char* what;
    std::function<void()> apply;
    const char* reason;
  };
  const std::vector<Damage> damages = {
      {"one flipped byte", [&] { flip_byte(file3, 100); }, "FNV-1a hash"},
      {"a missing file", [&] { std::filesystem::remove(file3); }, "missing (the manifest names it)"},
      {"a truncated file", [&] { std::filesystem::resize_file(file3, good3.size() / 2); },
       "bytes, the manifest says"},
      {"a truncated manifest",
       [&] { std::filesystem::resize_file(dir / "step-00000003" / "MANIFEST.json", 40); }, "not JSON"},
  };
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.what);
    ASSERT_TRUE(first->t->save_checkpoint(dir.string()));  // rewrites step 3 (and removes step 2)
    std::filesystem::copy(keep, dir / "step-00000002");
    std::filesystem::create_directories(
        dir / "step-00000001");  // as a crash mid-removal leaves it: older, not reported
    d.apply();
    auto resumed = serial(tiny4(), plan(2));
    const auto read = resumed->t->load_checkpoint(dir.string());
    ASSERT_TRUE(read) << read.error().message();
    EXPECT_EQ(read->step, 2);
    ASSERT_EQ(read->skipped.size(), 1u);
    EXPECT_NE(read->skipped[0].find("(step 3)"), std::string::npos) << read->skipped[0];
    EXPECT_NE(read->skipped[0].find(d.reason), std::string::npos) << read->skipped[0];
    EXPECT_EQ(resumed->t->step()->loss, losses[2]);  // bit-identical doubles
    EXPECT_EQ(resumed->t->step()->loss, losses[3]);
  }
  // Without the damage, the newest set wins.
  ASSERT_TRUE(first->t->save_checkpoint(dir.string()));
  auto resumed = serial(tiny4(), plan(2));
  const auto read = resumed->t->load_checkpoint(dir.string());
  ASSERT_TRUE(read) << read.error().message();
  EXPECT_EQ(read->step, 3);
  EXPECT_TRUE(read->skipped.empty());
  EXPECT_EQ(resumed->t->step()->loss, losses[3]);
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(keep);
}

TEST(CheckpointSet, WhatCannotBeResumedIsAClearError) {
  const auto dir = std::filesystem::temp_directory_path() / "foresight-ckpt-errors";
  std::filesystem::remove_all(dir);
  auto run = serial(tiny4(), plan(2));
  const auto message = [&](const std::filesystem::path& d) {
    auto r = serial(tiny4(), plan(2))->t->load_checkpoint(d.string());
    return r ? std::string("loaded step ") + std::to_string(r->step) : r.error().message();
  };
  // No folder; an empty folder; the previous format.
  EXPECT_NE(message(dir).find(dir.string() + ": no such checkpoint folder"), std::string::npos)
      << message(dir);
  std::filesystem::create_directories(dir);
  EXPECT_NE(message(dir).find("no checkpoint set in the folder"), std::string::npos) << message(dir);
  { std::ofstream(dir / "rank-00000.ckpt") << run->t->checkpoint_bytes(); }
  EXPECT_NE(message(dir).find("of the previous format"), std::string::npos) << message(dir);
  std::filesystem::remove(dir / "rank-00000.ckpt");
  // Only an incomplete set: the error names the folder and the set's reason.
  ASSERT_TRUE(run->t->step());
  ASSERT_TRUE(run->t->save_checkpoint(dir.string()));
  const auto manifest = dir / "step-00000001" / "MANIFEST.json";
  const std::string text = read_bytes(manifest);
  std::filesystem::remove(manifest);
  const std::string none = message(dir);
  EXPECT_NE(none.find(dir.string() + ": no complete checkpoint set to resume from"), std::string::npos)
      << none;
  EXPECT_NE(none.find("(step 1): incomplete: no MANIFEST.json"), std::string::npos) << none;
  // A complete set of another rank count, plan or model: an error naming the manifest and field.
  auto edited = [&](const std::string& field, const nlohmann::json& value) {
    auto m = nlohmann::json::parse(text);
    m[field] = value;
    std::ofstream(manifest) << m.dump();
    return message(dir);
  };
  EXPECT_NE(edited("ranks", 2)
                .find(manifest.string() + ": /ranks: the set was written by 2 ranks, this launch has 1"),
            std::string::npos)
      << edited("ranks", 2);
  EXPECT_NE(edited("model", "other").find(manifest.string() + ": /model"), std::string::npos)
      << edited("model", "other");
  EXPECT_NE(edited("plan", plan_to_json(plan(4))).find(manifest.string() + ": /plan"), std::string::npos);
  EXPECT_EQ(edited("step", 1), "loaded step 1");  // the unedited manifest loads (the edits are what fail)
  std::filesystem::remove_all(dir);
}

// Fields of the wrong type in a checkpoint file's header (with a good hash) or in a manifest are
// errors naming the field, not JSON exceptions: a manifest's damaged "format" used to throw out of
// the scan (the resume failed with "[json.exception.type_error.302]" instead of passing the set
// over), and a header's "rank": "0" threw out of restore_checkpoint (exit 3). fuzz_checkpoint.
TEST(CheckpointSet, FieldsOfTheWrongTypeAreErrorsNotExceptions) {
  auto run = serial(tiny4(), plan(2));
  ASSERT_TRUE(run->t->step());
  const std::string good = run->t->checkpoint_bytes();
  auto with_header = [&](const std::function<void(nlohmann::json&)>& edit) {
    std::uint64_t hl = 0;
    std::memcpy(&hl, good.data() + 8, sizeof hl);
    auto header = nlohmann::json::parse(good.substr(16, hl));
    edit(header);
    const std::string h = header.dump();
    std::string blob = good.substr(0, 8);
    const std::uint64_t len = h.size();
    blob.append(reinterpret_cast<const char*>(&len), sizeof len).append(h);
    blob.append(good, 16 + hl, good.size() - 16 - hl - 8);
    const std::uint64_t hash = fnv1a(blob);
    return blob.append(reinterpret_cast<const char*>(&hash), sizeof hash);
  };
  const auto restore = [&](const std::string& blob) {
    const Status s = run->t->restore_checkpoint(blob, "f.ckpt");
    return s ? std::string("ok") : s.error().message();
  };
  EXPECT_EQ(restore(with_header([](nlohmann::json&) {})), "ok");
  EXPECT_EQ(restore(with_header([](nlohmann::json& h) { h["rank"] = "0"; })),
            "f.ckpt: /rank: not an integer");
  EXPECT_EQ(restore(with_header([](nlohmann::json& h) { h["step"] = 1e300; })),
            "f.ckpt: /step: not an integer");
  EXPECT_EQ(restore(with_header([](nlohmann::json& h) { h["step"] = -3; })), "f.ckpt: /step: out of range");
  EXPECT_EQ(restore(with_header([](nlohmann::json& h) { h["model"] = 7; })), "f.ckpt: /model: not a string");
  EXPECT_EQ(restore(with_header([](nlohmann::json& h) { h["params"] = "many"; })),
            "f.ckpt: /params: not an element count");
  EXPECT_EQ(restore(with_header([](nlohmann::json& h) { h["loss_scale"] = 0; })),
            "f.ckpt: /loss_scale: not a positive finite number");
  EXPECT_EQ(restore(with_header([](nlohmann::json& h) { h = nlohmann::json::array({h}); })),
            "f.ckpt: unreadable header");
  // A header length near 2^64 wrapped the bounds check around.
  std::string huge = good.substr(0, good.size() - 8);
  const std::uint64_t wrap = ~std::uint64_t{0} - 7;
  std::memcpy(huge.data() + 8, &wrap, sizeof wrap);
  const std::uint64_t hash = fnv1a(huge);
  huge.append(reinterpret_cast<const char*>(&hash), sizeof hash);
  EXPECT_EQ(restore(huge), "f.ckpt: header length out of range");

  const CheckpointIdentity id = run->t->checkpoint_identity();
  nlohmann::json m = {
      {"format", "foresight-checkpoint-set"},
      {"version", 1},
      {"step", 1},
      {"ranks", 1},
      {"model", id.model},
      {"plan", nlohmann::json::parse(id.plan_json)},
      {"files", {{{"rank", 0}, {"file", "rank-00000.ckpt"}, {"bytes", 10}, {"fnv1a", "0123456789abcdef"}}}}};
  const auto manifest = [&](const nlohmann::json& doc, bool& other) {
    auto r = parse_checkpoint_manifest(doc.dump(), "M", 1, id, other);
    return r ? std::string("ok") : r.error().message();
  };
  bool other = true;
  EXPECT_EQ(manifest(m, other), "ok");
  EXPECT_FALSE(other);
  auto bad = m;
  bad["format"] = 5;
  EXPECT_EQ(manifest(bad, other), "MANIFEST.json: /format: not \"foresight-checkpoint-set\"");
  EXPECT_FALSE(other);  // damaged: the set is passed over
  bad = m;
  bad["files"][0]["rank"] = "0";
  EXPECT_EQ(manifest(bad, other), "MANIFEST.json: /files: 0: /rank is not 0");
  bad = m;
  bad["files"][0]["rank"] = 1e300;
  EXPECT_EQ(manifest(bad, other), "MANIFEST.json: /files: 0: /rank is not 0");
  bad = m;
  bad["model"] = nlohmann::json::array();
  EXPECT_EQ(manifest(bad, other), "M: /model: the set is of model [], this run is " + id.model);
  EXPECT_TRUE(other);  // sound but of another launch: the resume fails
}

// A backend whose tensors live in memory it manages itself (as a GPU's do) runs the trainer's
// device-memory paths: parameters uploaded, tensors copied and resized by the backend, the loss's
// pieces and checkpoints downloaded. Same kernels, same aligned blocks: the runs must agree bit
// for bit with the host-memory backend, for each kind of layer and option.
TEST(RuntimeBackend, SeparateMemoryRunsBitIdentically) {
  struct Case {
    const char* what;
    Plan plan;
  };
  std::vector<Case> cases;
  cases.push_back({"default", plan(4)});
  Plan full = plan_from_defaults();
  cases.push_back({"full recompute", full});
  Plan unfused = plan(4);
  unfused.flash_attention = false;
  unfused.recompute = Recompute::kSelective;
  cases.push_back({"unfused attention, selective recompute", unfused});
  Plan fp16 = plan(4);
  fp16.precision = Precision::kFp16;
  cases.push_back({"fp16 loss scaling", fp16});
  Plan eager = plan(4);
  eager.kernel_fusion = false;
  cases.push_back({"eager norm and SwiGLU", eager});
  for (const Case& c : cases) {
    auto host = serial(tiny4(), c.plan);
    auto sep = serial(tiny4(), c.plan, {}, make_cpu_backend(true));
    ASSERT_TRUE(host && sep && host->t && sep->t) << c.what;
    EXPECT_FALSE(sep->t->backend().host_memory());
    for (int s = 0; s < 3; ++s) {
      auto a = host->t->step(), b = sep->t->step();
      ASSERT_TRUE(a && b) << c.what;
      EXPECT_EQ(a->loss, b->loss) << c.what << " step " << s + 1;
      EXPECT_EQ(a->loss_scale, b->loss_scale) << c.what;
      EXPECT_EQ(sep->t->timings().size(), host->t->timings().size()) << c.what;
    }
    EXPECT_EQ(host->t->grads(), sep->t->grads()) << c.what;
    EXPECT_EQ(host->t->params(), sep->t->params()) << c.what;
  }
  // A checkpoint written from separate memory resumes in host memory, and the other way round.
  const auto dir = std::filesystem::temp_directory_path() / "foresight-separate-ckpt";
  std::filesystem::remove_all(dir);
  auto sep = serial(tiny4(), plan(4), {}, make_cpu_backend(true));
  ASSERT_TRUE(sep->t->step());
  ASSERT_TRUE(sep->t->save_checkpoint(dir.string()));
  auto host = serial(tiny4(), plan(4));
  ASSERT_TRUE(host->t->load_checkpoint(dir.string()));
  EXPECT_EQ(host->t->params(), sep->t->params());
  auto back = serial(tiny4(), plan(4), {}, make_cpu_backend(true));
  ASSERT_TRUE(back->t->load_checkpoint(dir.string()));
  EXPECT_EQ(back->t->params(), sep->t->params());
  auto a = back->t->step(), b = sep->t->step();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->loss, b->loss);
  std::filesystem::remove_all(dir);
}

TEST(RuntimeBackend, ChoosingABackendByName) {
  auto cpu = make_backend("cpu", 0);
  ASSERT_TRUE(cpu);
  EXPECT_EQ((*cpu)->name(), "cpu");
  auto bad = make_backend("tpu", 0);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("unknown backend 'tpu'"), std::string::npos) << bad.error().message();
  // auto: CUDA only where this build has it and a device is visible; the CPU otherwise.
  auto any = make_backend("auto", 0);
  ASSERT_TRUE(any);
  auto cuda = make_backend("cuda", 0);
  if (!cuda) {
    EXPECT_EQ((*any)->name(), "cpu");
    EXPECT_TRUE(cuda.error().message().find("no CUDA backend") != std::string::npos ||
                cuda.error().message().find("no CUDA device") != std::string::npos)
        << cuda.error().message();
  } else {
    EXPECT_EQ((*any)->name(), "cuda");
  }
}

#if FORESIGHT_RUNTIME_CUDA
// The CUDA backend is a plugin loaded on first use: where it cannot be loaded, --backend cuda is a
// clear error naming the file and the way to point at it, and --backend auto runs on the CPU.
TEST(RuntimeBackend, AMissingCudaPluginIsAClearErrorAndAutoFallsBack) {
  const std::string out = (std::filesystem::temp_directory_path() / "foresight-plugin.txt").string();
  const std::string env = "FORESIGHT_CUDA_BACKEND=/nonexistent/libforesight_cuda_backend.so ";
  const std::string run = env + FORESIGHT_BINARY + " run --model tiny --steps 1 --backend ";
  auto read_file = [](const std::string& path) {
    std::ifstream f(path);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  EXPECT_NE(std::system((run + "cuda > " + out + " 2>&1").c_str()), 0);
  std::string text = read_file(out);
  EXPECT_NE(text.find("the CUDA backend could not be loaded (/nonexistent/libforesight_cuda_backend.so"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("FORESIGHT_CUDA_BACKEND"), std::string::npos) << text;
  ASSERT_EQ(std::system((run + "auto > " + out + " 2>&1").c_str()), 0);
  text = read_file(out);
  EXPECT_NE(text.find("backend cpu"), std::string::npos) << text;
  std::filesystem::remove(out);
}
#endif

TEST(Runtime, FastPathsMatchTheReferenceKernels) {
  // fp32 with different summation orders (GEMM blocking vs loops): 1e-5 of the magnitude.
  const kernels::AttentionShape s{2, 7, 4, 2, 8};
  std::vector<float> qkv(s.tokens() * s.qkv_width()), dout(s.tokens() * s.q_heads * s.head_dim);
  unsigned state = 12345;
  auto rnd = [&] {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) / (1 << 24) - 0.5f;
  };
  for (float& v : qkv) v = 2 * rnd();
  for (float& v : dout) v = rnd();
  std::vector<float> out_a(dout.size()), out_b(dout.size()), p_a(s.score_elems()), p_b(s.score_elems());
  kernels::attention_forward_cpu(out_a.data(), p_a.data(), qkv.data(), s);
  attention_forward_fast(out_b.data(), p_b.data(), qkv.data(), s);
  for (std::size_t i = 0; i < out_a.size(); ++i) ASSERT_NEAR(out_a[i], out_b[i], 1e-5) << i;
  for (std::size_t i = 0; i < p_a.size(); ++i) ASSERT_NEAR(p_a[i], p_b[i], 1e-6) << i;
  std::vector<float> d_a(qkv.size(), 7.0f), d_b(qkv.size(), 7.0f), s1(s.score_elems()), s2(s.score_elems());
  kernels::attention_backward_cpu(d_a.data(), s1.data(), s2.data(), dout.data(), p_a.data(), qkv.data(), s);
  attention_backward_fast(d_b.data(), s1.data(), dout.data(), p_a.data(), qkv.data(), s);
  for (std::size_t i = 0; i < d_a.size(); ++i) ASSERT_NEAR(d_a[i], d_b[i], 1e-5) << i;

  {  // the vocabulary-parallel cross-entropy's statistics: Eigen against the CUDA kernels' oracle
    const int rows = 5, cols = 37;
    std::vector<float> logits(rows * cols), scale(rows);
    for (float& v : logits) v = 8 * rnd();
    for (float& v : scale) v = 1 + rnd();
    std::vector<float> m_a(rows), m_b(rows), s_a(rows), s_b(rows), e_a(logits.size()), e_b(logits.size());
    kernels::softmax_row_stats_cpu(m_a.data(), s_a.data(), e_a.data(), logits.data(), rows, cols);
    softmax_row_stats(m_b.data(), s_b.data(), e_b.data(), logits.data(), rows, cols);
    for (int r = 0; r < rows; ++r) {
      EXPECT_EQ(m_a[r], m_b[r]) << r;
      EXPECT_NEAR(s_a[r], s_b[r], 1e-5 * s_a[r]) << r;
    }
    for (std::size_t i = 0; i < e_a.size(); ++i) ASSERT_NEAR(e_a[i], e_b[i], 1e-6) << i;
    kernels::scale_rows_cpu(e_a.data(), scale.data(), rows, cols);
    scale_rows(e_b.data(), scale.data(), rows, cols);
    for (std::size_t i = 0; i < e_a.size(); ++i) ASSERT_NEAR(e_a[i], e_b[i], 1e-6) << i;
  }
  {  // GEMMs: Eigen against the reference contract the cuBLAS GEMMs are tested on
    const int rows = 9, k = 13, n = 11;
    std::vector<float> in(rows * k), w(k * n), dy(rows * n);
    for (float& v : in) v = rnd();
    for (float& v : w) v = rnd();
    for (float& v : dy) v = rnd();
    std::vector<float> o1(rows * n), o2(rows * n), di1(in.size()), di2(in.size()), dw1(w.size(), 0.5f),
        dw2(w.size(), 0.5f);
    kernels::matmul_forward_cpu(o1.data(), in.data(), w.data(), rows, k, n);
    gemm_forward(o2.data(), in.data(), w.data(), rows, k, n);
    for (std::size_t i = 0; i < o1.size(); ++i) ASSERT_NEAR(o1[i], o2[i], 1e-5f) << i;
    kernels::matmul_backward_cpu(di1.data(), dw1.data(), dy.data(), in.data(), w.data(), rows, k, n);
    gemm_backward(di2.data(), dw2.data(), dy.data(), in.data(), w.data(), rows, k, n);
    for (std::size_t i = 0; i < di1.size(); ++i) ASSERT_NEAR(di1[i], di2[i], 1e-5f) << i;
    for (std::size_t i = 0; i < dw1.size(); ++i) ASSERT_NEAR(dw1[i], dw2[i], 1e-5f) << i;
  }
  {  // norms and activations
    const int rows = 6, cols = 40;
    std::vector<float> x(rows * cols), w(cols), dy(rows * cols), gu(rows * 2 * cols);
    for (float& v : x) v = 3 * rnd();
    for (float& v : w) v = 1 + rnd();
    for (float& v : dy) v = rnd();
    for (float& v : gu) v = 6 * rnd();
    std::vector<float> o1(x.size()), o2(x.size()), r1(rows), r2(rows), dx1(x.size()), dx2(x.size()),
        dw1(cols, 1), dw2(cols, 1);
    kernels::rmsnorm_forward_cpu(o1.data(), r1.data(), x.data(), w.data(), rows, cols, 1e-5f);
    rmsnorm_forward_fast(o2.data(), r2.data(), x.data(), w.data(), rows, cols, 1e-5f);
    for (std::size_t i = 0; i < o1.size(); ++i)
      ASSERT_NEAR(o1[i], o2[i], 1e-5f * (1 + std::fabs(o1[i]))) << i;
    kernels::rmsnorm_backward_cpu(dx1.data(), dw1.data(), dy.data(), x.data(), w.data(), r1.data(), rows,
                                  cols);
    rmsnorm_backward_fast(dx2.data(), dw2.data(), dy.data(), x.data(), w.data(), r1.data(), rows, cols);
    for (std::size_t i = 0; i < dx1.size(); ++i)
      ASSERT_NEAR(dx1[i], dx2[i], 1e-5f * (1 + std::fabs(dx1[i]))) << i;
    for (int i = 0; i < cols; ++i) ASSERT_NEAR(dw1[i], dw2[i], 1e-5f * (1 + std::fabs(dw1[i]))) << i;
    // Eager (unfused) passes: same values, other rounding.
    std::vector<float> o3(x.size()), r3(rows), dx3(x.size()), dw3(cols, 1);
    rmsnorm_forward_eager(o3.data(), r3.data(), x.data(), w.data(), rows, cols, 1e-5f);
    for (std::size_t i = 0; i < o1.size(); ++i)
      ASSERT_NEAR(o1[i], o3[i], 1e-5f * (1 + std::fabs(o1[i]))) << "eager " << i;
    for (int i = 0; i < rows; ++i) ASSERT_NEAR(r1[i], r3[i], 1e-5f * r1[i]) << "eager " << i;
    rmsnorm_backward_eager(dx3.data(), dw3.data(), dy.data(), x.data(), w.data(), r1.data(), rows, cols);
    for (std::size_t i = 0; i < dx1.size(); ++i)
      ASSERT_NEAR(dx1[i], dx3[i], 1e-5f * (1 + std::fabs(dx1[i]))) << "eager " << i;
    for (int i = 0; i < cols; ++i)
      ASSERT_NEAR(dw1[i], dw3[i], 1e-5f * (1 + std::fabs(dw1[i]))) << "eager " << i;
    std::vector<float> a1(x.size()), a2(x.size()), g1(gu.size()), g2(gu.size());
    kernels::swiglu_forward_cpu(a1.data(), gu.data(), rows, cols);
    swiglu_forward_fast(a2.data(), gu.data(), rows, cols);
    for (std::size_t i = 0; i < a1.size(); ++i)
      ASSERT_NEAR(a1[i], a2[i], 1e-5f * (1 + std::fabs(a1[i]))) << i;
    swiglu_forward_eager(a2.data(), gu.data(), rows, cols);
    for (std::size_t i = 0; i < a1.size(); ++i)
      ASSERT_NEAR(a1[i], a2[i], 1e-5f * (1 + std::fabs(a1[i]))) << "eager " << i;
    kernels::swiglu_backward_cpu(g1.data(), gu.data(), dy.data(), rows, cols);
    swiglu_backward_fast(g2.data(), gu.data(), dy.data(), rows, cols);
    for (std::size_t i = 0; i < g1.size(); ++i)
      ASSERT_NEAR(g1[i], g2[i], 1e-5f * (1 + std::fabs(g1[i]))) << i;
    swiglu_backward_eager(g2.data(), gu.data(), dy.data(), rows, cols);
    for (std::size_t i = 0; i < g1.size(); ++i)
      ASSERT_NEAR(g1[i], g2[i], 1e-5f * (1 + std::fabs(g1[i]))) << "eager " << i;
    kernels::bias_gelu_forward_cpu(a1.data(), x.data(), nullptr, rows, cols);
    gelu_forward_fast(a2.data(), x.data(), x.size());
    for (std::size_t i = 0; i < a1.size(); ++i)
      ASSERT_NEAR(a1[i], a2[i], 1e-5f * (1 + std::fabs(a1[i]))) << i;
    kernels::bias_gelu_backward_cpu(dx1.data(), nullptr, x.data(), nullptr, dy.data(), rows, cols);
    gelu_backward_fast(dx2.data(), x.data(), dy.data(), x.size());
    for (std::size_t i = 0; i < dx1.size(); ++i)
      ASSERT_NEAR(dx1[i], dx2[i], 1e-5f * (1 + std::fabs(dx1[i]))) << i;
  }

  {  // AdamW in blocks: the reference's values over a length that ends inside a block, two steps
    const std::size_t n = 5000;
    std::vector<float> g(n), p1(n), m1(n), v1(n);
    for (float& x : g) x = rnd();
    for (float& x : p1) x = rnd();
    std::vector<float> p2 = p1, m2 = m1, v2 = v1;
    const kernels::AdamWConfig c{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
    for (int step = 1; step <= 2; ++step) {
      kernels::adamw_cpu(p1.data(), m1.data(), v1.data(), g.data(), n, c, step, 0.5f);
      adamw_fast(p2.data(), m2.data(), v2.data(), g.data(), n, c, step, 0.5f);
    }
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(p1[i], p2[i], 1e-6f) << i;
      ASSERT_NEAR(m1[i], m2[i], 1e-6f) << i;
      ASSERT_NEAR(v1[i], v2[i], 1e-6f) << i;
    }
  }

  const int rows = 5, vocab = 33;
  std::vector<float> logits(rows * vocab), l_a(rows), l_b(rows), g_a(logits.size()), g_b(logits.size());
  for (float& v : logits) v = 8 * rnd();
  const std::vector<int> targets{0, 32, 5, 5, 17};
  kernels::crossentropy_forward_cpu(l_a.data(), logits.data(), targets.data(), rows, vocab);
  kernels::crossentropy_backward_cpu(g_a.data(), logits.data(), targets.data(), 0.25f, rows, vocab);
  const double total =
      crossentropy_fused(l_b.data(), g_b.data(), logits.data(), targets.data(), 0.25f, rows, vocab);
  double sum = 0;
  for (int r = 0; r < rows; ++r) {
    EXPECT_NEAR(l_a[r], l_b[r], 1e-5);
    sum += l_a[r];
  }
  EXPECT_NEAR(total, sum, 1e-4);
  for (std::size_t i = 0; i < g_a.size(); ++i) ASSERT_NEAR(g_a[i], g_b[i], 1e-6) << i;
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
  p.schedule = Schedule::kZeroBubble;
  EXPECT_NE(check_runtime_plan(m, p, "plan.json").error().message().find("/schedule"), std::string::npos);
  p = plan(8);
  p.tp = 4;  // 2 kv heads
  EXPECT_NE(check_runtime_plan(m, p, "plan.json").error().message().find("kv_heads"), std::string::npos);
}

// --- gradient compression -----------------------------------------------------------------------

// Values in [-1, 1) from a fixed LCG (Numerical Recipes' constants): the same on every platform.
struct Lcg {
  unsigned state = 12345;
  float operator()() {
    state = state * 1664525u + 1013904223u;
    return 2.0f * (static_cast<float>(state >> 8) / (1 << 24)) - 1.0f;
  }
};

TEST(RuntimeCompression, TopKErrorFeedbackTransmitsEveryGradientEventually) {
  // Two tensors of 100 and 37 elements and 3 of padding; f = 0.1 keeps ceil(10) = 10 and
  // ceil(3.7) = 4 entries a step. acc = g + residual splits exactly into what is sent and the new
  // residual, so after T steps sum(sent) + residual = sum(g) up to the rounding of the T additions
  // g + residual: at most T x 2^-24 x max|acc| per element, under 1e-5 here (|acc| < 10).
  const std::vector<Segment> segments{{0, 100}, {100, 37}};
  const std::size_t padded = 140;
  RegionCompressor c(GradCompression::kTopK, 0.1, segments, 1, padded);
  EXPECT_EQ(c.kept(), 14u);
  EXPECT_EQ(c.wire_bytes(), 14u * 8);  // a 4-byte index and a 4-byte value each, one rank
  Comm self;
  Lcg rnd;
  std::vector<float> residual(padded, 0.0f), g(padded, 0.0f), sent(padded), acc(padded);
  std::vector<double> sum_g(padded, 0.0), sum_sent(padded, 0.0);
  const int steps = 8;
  for (int step = 0; step < steps; ++step) {
    for (std::size_t i = 0; i < 137; ++i) g[i] = rnd();
    for (std::size_t i = 0; i < padded; ++i) {
      sum_g[i] += g[i];
      acc[i] = g[i] + residual[i];
    }
    c.compress(g.data(), residual.data());
    c.exchange(self);
    c.decompress(sent.data());
    for (std::size_t s = 0; s < segments.size(); ++s) {
      const Segment& seg = segments[s];
      const std::size_t k = s == 0 ? 10 : 4;
      std::size_t n_sent = 0;
      float smallest_sent = 1e30f, largest_kept = 0;
      for (std::size_t i = seg.begin; i < seg.begin + seg.size; ++i) {
        ASSERT_EQ(sent[i] + residual[i], acc[i]) << "step " << step << " element " << i;  // one of them is 0
        if (sent[i] != 0) {
          ++n_sent;
          smallest_sent = std::min(smallest_sent, std::fabs(sent[i]));
        } else {
          largest_kept = std::max(largest_kept, std::fabs(residual[i]));
        }
      }
      EXPECT_EQ(n_sent, k) << "step " << step << " tensor " << s;
      EXPECT_GE(smallest_sent, largest_kept)
          << "step " << step << " tensor " << s << ": not the largest |acc|";
    }
    for (std::size_t i = 0; i < padded; ++i) sum_sent[i] += sent[i];
  }
  double held_back = 0;
  for (std::size_t i = 0; i < padded; ++i) {
    EXPECT_NEAR(sum_sent[i] + residual[i], sum_g[i], 1e-5) << i;
    held_back += std::fabs(residual[i]);
  }
  EXPECT_GT(held_back, 1.0);  // most of the gradient is still waiting: the identity is not trivial
}

TEST(RuntimeCompression, Int8BlocksStayInsideTheirTensor) {
  // Gradients of ~1e-6 beside gradients of ~1: a block spanning both would round the small ones
  // to 0 (1e-6 / (1 / 127) << 0.5). Inside its own blocks, one rank's compressed all-reduce (two
  // roundings, the second of already-rounded values) errs by at most half a step, absmax / 254,
  // plus the second scale's last bit.
  const std::vector<Segment> segments{{0, 300}, {300, 200}};
  const std::size_t padded = 500;
  RegionCompressor c(GradCompression::kInt8, 0, segments, 1, padded);
  EXPECT_EQ(c.wire_bytes(),
            500u + 4 * 3);  // 500 int8s; scales: 2 blocks of the first tensor, 1 of the second
  Comm self;
  Lcg rnd;
  std::vector<float> g(padded), out(padded);
  for (std::size_t i = 0; i < 300; ++i) g[i] = rnd();
  for (std::size_t i = 300; i < padded; ++i) g[i] = 1e-6f * rnd();
  c.compress(g.data(), nullptr);
  c.exchange(self);
  c.decompress(out.data());
  const std::size_t blocks[][2] = {{0, 256}, {256, 300}, {300, 500}};
  for (const auto& b : blocks) {
    float amax = 0;
    for (std::size_t i = b[0]; i < b[1]; ++i) amax = std::max(amax, std::fabs(g[i]));
    for (std::size_t i = b[0]; i < b[1]; ++i) ASSERT_NEAR(out[i], g[i], 0.5001f * amax / 127) << i;
  }
}

TEST(RuntimeCompression, RefusesWhatItDoesNotExecuteWithTheField) {
  const ModelSpec m = tiny4();
  for (GradCompression c : {GradCompression::kPowerSgd, GradCompression::kFourStage}) {
    Plan p = plan(8);
    p.grad_compression = c;
    const Status s = check_runtime_plan(m, p, "plan.json");
    ASSERT_FALSE(s) << to_string(c);
    EXPECT_NE(s.error().message().find("plan.json: /grad_compression: " + to_string(c)), std::string::npos)
        << s.error().message();
  }
  Plan p = plan(8);
  p.grad_compression = GradCompression::kTopK;
  p.precision = Precision::kFp16;
  Status s = check_runtime_plan(m, p, "plan.json");
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("plan.json: /grad_compression: topk gradient compression with fp16"),
            std::string::npos)
      << s.error().message();
  p = plan(8);
  p.grad_compression = GradCompression::kInt8;
  p.zero_stage = 2;
  s = check_runtime_plan(m, p, "plan.json");
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message().find("plan.json: /zero_stage"), std::string::npos) << s.error().message();
  for (GradCompression c : {GradCompression::kInt8, GradCompression::kTopK})
    for (int zero : {0, 1}) {
      p = plan(8);
      p.grad_compression = c;
      p.zero_stage = zero;
      EXPECT_TRUE(check_runtime_plan(m, p, "plan.json")) << to_string(c) << " ZeRO-" << zero;
    }
}

TEST(RuntimeCompression, TopKCheckpointResumeIsBitIdentical) {
  // One rank: the graph still compresses, so the update is the sparse one and the residual is
  // training state that a resumed run must get back.
  const auto dir = std::filesystem::temp_directory_path() / "foresight-ckpt-topk-test";
  std::filesystem::remove_all(dir);
  Plan p = plan(2);
  p.grad_compression = GradCompression::kTopK;
  p.compression_topk = 0.1;
  auto straight = serial(tiny4(), p);
  std::vector<double> losses;
  for (int i = 0; i < 5; ++i) losses.push_back(straight->t->step()->loss);

  auto first = serial(tiny4(), p);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(first->t->step());
  const Buffer residual = first->t->error_feedback();
  ASSERT_EQ(residual.size(), first->t->params().size());
  EXPECT_TRUE(std::any_of(residual.begin(), residual.end(), [](float x) { return x != 0; }));
  ASSERT_TRUE(first->t->step(false));  // a dry step leaves the error feedback as it was
  EXPECT_EQ(first->t->error_feedback(), residual);
  ASSERT_TRUE(first->t->save_checkpoint(dir.string()));

  auto resumed = serial(tiny4(), p);
  ASSERT_TRUE(resumed->t->load_checkpoint(dir.string()));
  EXPECT_EQ(resumed->t->error_feedback(), residual);
  EXPECT_EQ(resumed->t->step()->loss, losses[3]);  // bit-identical doubles
  EXPECT_EQ(resumed->t->step()->loss, losses[4]);
  EXPECT_EQ(resumed->t->params(), straight->t->params());
  EXPECT_EQ(resumed->t->error_feedback(), straight->t->error_feedback());

  // The content hash covers the residual: it is the last tensor, just before the 8-byte hash.
  const auto file = dir / "step-00000003" / "rank-00000.ckpt";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(0, std::ios::end);
    const std::streamoff at = static_cast<std::streamoff>(f.tellg()) - 8 - 4 * 10;
    f.seekg(at);
    char ch = 0;
    f.read(&ch, 1);
    f.seekp(at);
    ch ^= 0x10;
    f.write(&ch, 1);
  }
  auto again = serial(tiny4(), p);
  const auto bad = again->t->load_checkpoint(dir.string());
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("FNV-1a hash"), std::string::npos) << bad.error().message();
  // The file's own content hash refuses it too, when handed over without the manifest's check.
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const Status own = again->t->restore_checkpoint(bytes, file.string());
  ASSERT_FALSE(own);
  EXPECT_NE(own.error().message().find("content hash mismatch"), std::string::npos) << own.error().message();
  std::filesystem::remove_all(dir);
}

TEST(Runtime, PredictedAndMeasuredTracesAlignOpByOp) {
  // One graph, two executors: the simulator's trace and the runtime's trace of the same plan
  // carry the same op ids, every one of them.
  const auto dir = std::filesystem::temp_directory_path();
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
  const auto dir = std::filesystem::temp_directory_path();
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

#ifdef FORESIGHT_MPIEXEC
// Under AddressSanitizer, LeakSanitizer reports Open MPI's own allocations (MCA components it
// never frees) at every rank's exit; the ranks run with leak detection off. Our code's leaks are
// still checked by the in-process tests above, which run the same executor on one rank.
std::string mpirun(int ranks) {
  return "ASAN_OPTIONS=detect_leaks=0 " + std::string(FORESIGHT_MPIEXEC) +
         " --allow-run-as-root --oversubscribe -np " + std::to_string(ranks) + " ";
}

int run_shell(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

struct Layout {
  const char* args;
  int ranks;
};

class ParallelMatchesSerial : public ::testing::TestWithParam<Layout> {};

TEST_P(ParallelMatchesSerial, GradientsLossAndUpdates) {
  const Layout& l = GetParam();
  const std::string cmd = mpirun(l.ranks) + FORESIGHT_PARALLEL_CHECK + " model=" + kTiny4 + " " + l.args;
  EXPECT_EQ(run_shell(cmd + " > /dev/null"), 0) << cmd;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ParallelMatchesSerial,
    ::testing::Values(Layout{"tp=2", 2}, Layout{"pp=2", 2}, Layout{"dp=2", 2}, Layout{"tp=2 pp=2", 4},
                      Layout{"pp=2 dp=2", 4}, Layout{"pp=2 schedule=gpipe", 2},
                      Layout{"pp=2 schedule=1f1b gb=6", 2}, Layout{"pp=2 vp=2 schedule=interleaved-1f1b", 2},
                      Layout{"tp=2 pp=2 vp=2 schedule=interleaved-1f1b", 4}, Layout{"dp=2 zero=1", 2},
                      Layout{"pp=2 dp=2 zero=1 overlap_grad=1", 4}, Layout{"tp=2 recompute=full", 2},
                      Layout{"pp=2 recompute=selective flash=0", 2},
                      Layout{"tp=2 dp=2 mb=2 gb=8 overlap_tp=1", 4}, Layout{"tp=2 precision=fp16", 2},
                      Layout{"tp=2 sp=1", 2}, Layout{"tp=2 sp=1 pp=2 recompute=full", 4},
                      Layout{"tp=2 sp=1 dp=2 zero=1 overlap_grad=1", 4},
                      Layout{"tp=2 sp=1 recompute=full recompute_method=uniform recompute_layers=3", 2},
                      Layout{"pp=2 recompute=full recompute_layers=1", 2},
                      // The trainer's device-memory paths (a backend whose tensors are not Buffers).
                      Layout{"tp=2 sp=1 pp=2 recompute=full memory=separate", 4},
                      Layout{"pp=2 dp=2 zero=1 overlap_grad=1 memory=separate", 4}));

// Issue 6's acceptance, loosened so that a noisy machine cannot fail it: after `calibrate`, the
// simulator's step time is within 25% of the measured one for the tiny and small models under
// the five layouts, and for the small model's two layouts whose collectives are not all-reduces
// (ZeRO-1; tp=2 with sequence parallelism), which take the calibrated collectives' own rates
// (bench/predict_vs_measured.py --collectives prints the exact errors). Each plan runs three
// times (30 steps of the tiny model, 6 of the small one), interleaved with the others, and its
// median run counts. A plan whose three measured
// steps differ by more than 15% ran on an unsteady machine and is reported, not judged; with more
// than three such plans the test skips. Shared VMs also change speed for minutes at a time, so a
// plan out of bounds gets a second chance after a fresh calibration: the model fails only if both
// attempts miss. Timing under the sanitizers is not the machine's, so the test skips there.
TEST(RuntimeMpi, PredictedStepWithinAQuarterOfTheMeasuredAfterCalibration) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "timing under AddressSanitizer is not the machine's";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "timing under AddressSanitizer is not the machine's";
#endif
#endif
  const auto dir = std::filesystem::temp_directory_path() / "foresight-predict-loop";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string profile = (dir / "local.json").string();
  struct Plan {
    const char* model;
    const char* args;
    int ranks;
  };
  const Plan plans[] = {{"tiny", "", 1},
                        {"tiny", "--dp 2", 2},
                        {"tiny", "--tp 2", 2},
                        {"tiny", "--pp 2 --schedule 1f1b", 2},
                        {"tiny", "--pp 2 --schedule gpipe", 2},
                        {"small", "", 1},
                        {"small", "--dp 2", 2},
                        {"small", "--tp 2", 2},
                        {"small", "--pp 2 --schedule 1f1b", 2},
                        {"small", "--pp 2 --schedule gpipe", 2},
                        {"small", "--dp 2 --zero 1", 2},
                        {"small", "--tp 2 --sp true", 2}};
  enum class Verdict { kWithin, kOut, kUnsteady };
  struct Outcome {
    Verdict verdict;
    std::string what;
  };
  // Calibrates, runs the plans `which` three times each, interleaved, and judges each one.
  auto attempt = [&](const std::vector<std::size_t>& which) {
    std::map<std::size_t, Outcome> out;
    if (run_shell(mpirun(2) + FORESIGHT_BINARY + " calibrate --out " + profile + " > /dev/null") != 0) {
      ADD_FAILURE() << "calibrate failed";
      return out;
    }
    {  // the fitted optimizer rate and the collectives' own rates are in the profile, with their sources
      const auto node = nlohmann::json::parse(std::ifstream(profile))["node"];
      const auto& dev = node["devices"][0]["device"];
      EXPECT_TRUE(dev["sources"].contains("efficiency.optimizer")) << dev.dump();
      // under mpirun: rank 0's memory rates alone too, for the serial plans
      EXPECT_EQ(dev["shared_memory"]["shared_by"], 2) << dev.dump();
      EXPECT_TRUE(dev["sources"].contains("shared_memory")) << dev["sources"].dump();
      for (const char* c : {"all_gather", "reduce_scatter", "send_recv"}) {
        EXPECT_TRUE(node["fabric"]["collectives"].contains(c)) << node["fabric"].dump();
        EXPECT_TRUE(node["sources"].contains(std::string("fabric.collectives.") + c))
            << node["sources"].dump();
      }
      // and the measured times, every collective from 1 KiB, for plans of two ranks
      EXPECT_EQ(node["fabric"]["measured"]["ranks"], 2) << node["fabric"].dump();
      for (const char* c : {"all_reduce", "all_gather", "reduce_scatter", "send_recv"})
        EXPECT_EQ(node["fabric"]["measured"][c][0]["size"], "1 KiB") << c;
      EXPECT_TRUE(node["sources"].contains("fabric.measured")) << node["sources"].dump();
    }
    struct Run {
      double error_pct, measured_s;
    };
    std::map<std::size_t, std::vector<Run>> runs;
    for (int repeat = 0; repeat < 3; ++repeat)
      for (std::size_t i : which) {
        const Plan& p = plans[i];
        const std::string summary = (dir / "s.json").string();
        const std::string cmd =
            (p.ranks > 1 ? mpirun(p.ranks) : std::string()) + FORESIGHT_BINARY + " run --model " + p.model +
            " --cluster " + profile + " --gb 8 --steps " +
            // the tiny model's steps take milliseconds: more of them for a steadier median
            (std::string(p.model) == "tiny" ? "30" : "6") + " --predict --summary " + summary + " " + p.args +
            " > /dev/null";
        if (run_shell(cmd) != 0) {
          ADD_FAILURE() << cmd;
          return out;
        }
        const auto c = nlohmann::json::parse(std::ifstream(summary))["comparison"];
        runs[i].push_back({c["step_time_error_pct"].get<double>(), c["measured_step_s"].get<double>()});
      }
    for (auto& [i, r] : runs) {
      std::sort(r.begin(), r.end(), [](const Run& a, const Run& b) { return a.measured_s < b.measured_s; });
      const std::string what = std::string(plans[i].model) + " " + plans[i].args + ": errors " +
                               std::to_string(r[0].error_pct) + "%, " + std::to_string(r[1].error_pct) +
                               "%, " + std::to_string(r[2].error_pct) + "% (fastest run first)";
      const Verdict v = r[2].measured_s > 1.15 * r[0].measured_s ? Verdict::kUnsteady
                        : std::fabs(r[1].error_pct) < 25.0       ? Verdict::kWithin
                                                                 : Verdict::kOut;
      std::printf("%s%s\n",
                  v == Verdict::kUnsteady ? "unsteady, not judged: "
                  : v == Verdict::kOut    ? "out of bounds: "
                                          : "",
                  what.c_str());
      out[i] = {v, what};
    }
    return out;
  };
  std::vector<std::size_t> all(std::size(plans));
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  auto first = attempt(all);
  ASSERT_EQ(first.size(), all.size());
  int unsteady = 0;
  std::vector<std::size_t> again;
  for (const auto& [i, o] : first) {
    unsteady += o.verdict == Verdict::kUnsteady;
    if (o.verdict == Verdict::kOut) again.push_back(i);
  }
  if (unsteady > 3)
    GTEST_SKIP() << unsteady << " of " << all.size()
                 << " plans ran on an unsteady machine (runs more than 15% apart)";
  if (again.empty()) return;
  std::printf("second attempt for %zu plan(s), after a fresh calibration\n", again.size());
  const auto second = attempt(again);
  ASSERT_EQ(second.size(), again.size());
  for (const auto& [i, o] : second)
    EXPECT_NE(o.verdict, Verdict::kOut) << "first: " << first.at(i).what << "; second: " << o.what;
}

TEST(RuntimeMpi, ResumedRunContinuesBitIdentically) {
  const auto dir = std::filesystem::temp_directory_path() / "foresight-mpi-ckpt";
  std::filesystem::remove_all(dir);
  const std::string base = mpirun(2) + FORESIGHT_BINARY + " run --model " + kTiny4 + " --pp 2 --gb 4 ";
  const std::string a = (dir / "a.json").string(), b = (dir / "b.json").string();
  std::filesystem::create_directories(dir);
  ASSERT_EQ(run_shell(base + "--steps 4 --summary " + a + " > /dev/null"), 0);
  ASSERT_EQ(run_shell(base + "--steps 2 --checkpoint-dir " + (dir / "ck").string() + " > /dev/null"), 0);
  ASSERT_EQ(run_shell(base + "--steps 4 --resume --checkpoint-dir " + (dir / "ck").string() + " --summary " +
                      b + " > /dev/null"),
            0);
  auto steps = [](const std::string& f) { return nlohmann::json::parse(std::ifstream(f))["steps"]; };
  const auto sa = steps(a), sb = steps(b);
  ASSERT_EQ(sb.size(), 2u);
  EXPECT_EQ(sb[0]["loss"].get<double>(), sa[2]["loss"].get<double>());  // bit-identical doubles
  EXPECT_EQ(sb[1]["loss"].get<double>(), sa[3]["loss"].get<double>());
  std::filesystem::remove_all(dir);
}

// Compressed data parallelism: the replicas stay bit-identical (DP ranks, and the TP-replicated
// tensors across TP ranks), and int8's reduced gradients match the serial ones within its rounding.
class CompressedReplicas : public ::testing::TestWithParam<Layout> {};

TEST_P(CompressedReplicas, StayBitIdentical) {
  const Layout& l = GetParam();
  const std::string cmd = mpirun(l.ranks) + FORESIGHT_PARALLEL_CHECK + " model=" + kTiny4 + " " + l.args;
  EXPECT_EQ(run_shell(cmd + " > /dev/null"), 0) << cmd;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CompressedReplicas,
    ::testing::Values(Layout{"dp=2 compression=int8 steps=3", 2}, Layout{"dp=2 compression=topk steps=3", 2},
                      Layout{"dp=2 zero=1 compression=int8 steps=3", 2},
                      Layout{"tp=2 dp=2 compression=topk steps=3", 4},
                      Layout{"tp=2 dp=2 sp=1 zero=1 overlap_grad=1 compression=int8 steps=3", 4},
                      Layout{"pp=2 dp=2 overlap_grad=1 compression=topk steps=3", 4}));

// `foresight run` with dp = 2 and a compression scheme for `steps` steps: its summary.
nlohmann::json compressed_run(const std::string& compression, int steps, const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / "foresight-mpi-compression";
  std::filesystem::create_directories(dir);
  const std::string summary = (dir / (name + ".json")).string();
  const std::string cmd = mpirun(2) + FORESIGHT_BINARY + " run --model " + kTiny4 +
                          " --dp 2 --gb 8 --lr 3e-3 --steps " + std::to_string(steps) + " " + compression +
                          " --summary " + summary + " > /dev/null";
  EXPECT_EQ(run_shell(cmd), 0) << cmd;
  std::ifstream f(summary);
  return f ? nlohmann::json::parse(f) : nlohmann::json::object();
}

double loss_at(const nlohmann::json& s, int step) { return s["steps"][step - 1]["loss"].get<double>(); }

TEST(RuntimeMpi, Int8DataParallelTracksTheUncompressedRun) {
  const auto dense = compressed_run("", 30, "dense");
  const auto int8 = compressed_run("--grad-compression int8", 30, "int8");
  ASSERT_EQ(dense["steps"].size(), 30u);
  ASSERT_EQ(int8["steps"].size(), 30u);
  // Step 1 computes on the same parameters: the same loss to the last bit.
  EXPECT_EQ(loss_at(int8, 1), loss_at(dense, 1));
  // int8 rounds each gradient by at most 1/254 of its block's largest. Measured (tiny4, this
  // build): the losses differ by 7e-4 at step 5 and 1.4e-3 at step 30, while the run itself falls
  // 2 nats; the bounds leave about 7x and 14x of that, far below what a lost update costs.
  EXPECT_NEAR(loss_at(int8, 5), loss_at(dense, 5), 0.005);
  EXPECT_NEAR(loss_at(int8, 30), loss_at(dense, 30), 0.02);
  EXPECT_LT(loss_at(int8, 30), loss_at(int8, 1) - 1.0);
  // Bytes of the gradient collectives: the dense all-reduce moves 4 bytes per element, int8 one
  // byte and a 4-byte scale per (at most) 256 elements of a tensor -- a ratio just under 4.
  const double dense_bytes = dense["steps"][0]["dp_grad_bytes"].get<double>();
  const double int8_bytes = int8["steps"][0]["dp_grad_bytes"].get<double>();
  EXPECT_GT(dense_bytes, 0);
  EXPECT_GT(dense_bytes / int8_bytes, 3.8);
  EXPECT_LT(dense_bytes / int8_bytes, 4.0);
}

TEST(RuntimeMpi, TopKDataParallelLossFalls) {
  const auto dense = compressed_run("", 1, "dense1");
  const auto topk = compressed_run("--grad-compression topk --compression-topk 0.1", 30, "topk");
  ASSERT_EQ(topk["steps"].size(), 30u);
  EXPECT_EQ(loss_at(topk, 1), loss_at(dense, 1));
  EXPECT_LT(loss_at(topk, 30), loss_at(topk, 1) - 0.5);
  // Each of 2 ranks sends 10% of the elements (rounded up per tensor) as 4-byte index + 4-byte
  // value, all-gathered: 2 x 0.1 x 8 = 1.6 bytes per element against the dense 4, a ratio of 0.4.
  const double ratio =
      topk["steps"][0]["dp_grad_bytes"].get<double>() / dense["steps"][0]["dp_grad_bytes"].get<double>();
  EXPECT_GT(ratio, 0.4);
  EXPECT_LT(ratio, 0.42);
}

TEST(RuntimeMpi, CompressedTracesAlignOpByOp) {
  // int8 with per-layer (overlapped) reductions: grad_compress, the collective and the deferred
  // grad_decompress of every layer, and the step-end ones, all carry the simulator's op ids.
  const auto dir = std::filesystem::temp_directory_path() / "foresight-mpi-compressed-trace";
  std::filesystem::create_directories(dir);
  const std::string pred = (dir / "pred.json").string(), meas = (dir / "meas.json").string(),
                    cmp = (dir / "cmp.json").string();
  const std::string args = " --model " + kTiny4 +
                           " --cluster cpu-local --gpus 2 --dp 2 --gb 4 --precision fp32" +
                           " --grad-compression int8 --overlap-grad-reduce true";
  const std::string bin = FORESIGHT_BINARY;
  ASSERT_EQ(run_shell(bin + " simulate" + args + " --full --trace " + pred + " > /dev/null"), 0);
  ASSERT_EQ(run_shell(mpirun(2) + bin + " run" + args + " --steps 2 --trace " + meas + " > /dev/null"), 0);
  ASSERT_EQ(run_shell(bin + " compare " + pred + " " + meas + " --out " + cmp + " > /dev/null"), 0);
  const auto report = nlohmann::json::parse(std::ifstream(cmp));
  auto m = load_model_file(kTiny4);
  auto c = load_cluster("cpu-local");
  ASSERT_TRUE(resize_cluster(*c, 2, "gpus"));
  Plan p = plan(4);
  p.dp = 2;
  p.grad_compression = GradCompression::kInt8;
  p.overlap_grad_reduce = true;
  auto w = lower(*m, *c, p);
  ASSERT_TRUE(w) << w.error().message();
  int compress = 0, decompress = 0;
  const OpGraph& g = w->stages[0].graph();
  for (auto v : boost::make_iterator_range(boost::vertices(g))) {
    compress += std::string_view(g[v].name) == "grad_compress";
    decompress += std::string_view(g[v].name) == "grad_decompress";
  }
  EXPECT_EQ(compress, 5);  // four layers and the embedding/head region
  EXPECT_EQ(decompress, 5);
  EXPECT_EQ(report["matched_ops"].get<std::size_t>(), 2 * w->op_count());  // both ranks run stage 0's graph
  std::filesystem::remove_all(dir);
}

TEST(RuntimeMpi, TopKResumedRunContinuesBitIdentically) {
  const auto dir = std::filesystem::temp_directory_path() / "foresight-mpi-ckpt-topk";
  std::filesystem::remove_all(dir);
  const std::string base = mpirun(2) + FORESIGHT_BINARY + " run --model " + kTiny4 +
                           " --dp 2 --gb 4 --grad-compression topk --compression-topk 0.1 ";
  const std::string a = (dir / "a.json").string(), b = (dir / "b.json").string();
  std::filesystem::create_directories(dir);
  ASSERT_EQ(run_shell(base + "--steps 5 --summary " + a + " > /dev/null"), 0);
  ASSERT_EQ(run_shell(base + "--steps 3 --checkpoint-dir " + (dir / "ck").string() + " > /dev/null"), 0);
  ASSERT_EQ(run_shell(base + "--steps 5 --resume --checkpoint-dir " + (dir / "ck").string() + " --summary " +
                      b + " > /dev/null"),
            0);
  auto steps = [](const std::string& f) { return nlohmann::json::parse(std::ifstream(f))["steps"]; };
  const auto sa = steps(a), sb = steps(b);
  ASSERT_EQ(sb.size(), 2u);
  EXPECT_EQ(sb[0]["loss"].get<double>(), sa[3]["loss"].get<double>());  // bit-identical doubles
  EXPECT_EQ(sb[1]["loss"].get<double>(), sa[4]["loss"].get<double>());
  std::filesystem::remove_all(dir);
}

std::string file_text(const std::string& f) {
  std::ifstream in(f);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Two ranks of a pipeline: rank 1's file of the newest set is gone while rank 0's is intact, so
// rank 0 alone could resume from step 3. Both must take step 2 (the newest set every rank can
// load), say why step 3 was passed over, and continue bit-identically.
TEST(RuntimeMpi, RanksAgreeOnTheNewestSetEveryRankCanLoad) {
  const auto dir = std::filesystem::temp_directory_path() / "foresight-mpi-ckpt-agree";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string base = mpirun(2) + FORESIGHT_BINARY + " run --model " + kTiny4 + " --pp 2 --gb 4 ";
  const std::string ck = (dir / "ck").string(), a = (dir / "a.json").string(), b = (dir / "b.json").string();
  const std::string out = (dir / "out.txt").string(), err = (dir / "err.txt").string();
  ASSERT_EQ(run_shell(base + "--steps 4 --summary " + a + " > /dev/null"), 0);
  ASSERT_EQ(run_shell(base + "--steps 2 --checkpoint-dir " + ck + " > /dev/null"), 0);
  std::filesystem::copy(dir / "ck" / "step-00000002", dir / "step2");
  ASSERT_EQ(run_shell(base + "--steps 3 --resume --checkpoint-dir " + ck + " > /dev/null"), 0);
  EXPECT_FALSE(std::filesystem::exists(dir / "ck" / "step-00000002"));  // superseded by step 3's
  std::filesystem::copy(dir / "step2", dir / "ck" / "step-00000002");
  std::filesystem::remove(dir / "ck" / "step-00000003" / "rank-00001.ckpt");
  ASSERT_EQ(run_shell("timeout 120 env " + base + "--steps 4 --resume --checkpoint-dir " + ck +
                      " --summary " + b + " > " + out + " 2> " + err),
            0)
      << file_text(err);
  const std::string text = file_text(out);
  EXPECT_NE(text.find("checkpoint set skipped: " + ck + "/step-00000003 (step 3): incomplete: rank 1: " + ck +
                      "/step-00000003/rank-00001.ckpt: missing"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("resumed from " + ck + "/step-00000002 at step 2"), std::string::npos) << text;
  auto steps = [](const std::string& f) { return nlohmann::json::parse(std::ifstream(f)); };
  const auto sa = steps(a)["steps"], jb = steps(b), sb = jb["steps"];
  EXPECT_EQ(jb["resumed_from_step"], 2);
  ASSERT_EQ(sb.size(), 2u);
  EXPECT_EQ(sb[0]["loss"].get<double>(), sa[2]["loss"].get<double>());  // bit-identical doubles
  EXPECT_EQ(sb[1]["loss"].get<double>(), sa[3]["loss"].get<double>());

  // A rank whose file cannot be written: no rank goes on, no manifest is written for the step,
  // and the previous set stays the one to resume from.
  std::filesystem::remove_all(dir / "ck");
  ASSERT_EQ(run_shell(base + "--steps 1 --checkpoint-dir " + ck + " > /dev/null"), 0);
  std::filesystem::create_directories(dir / "ck" / "step-00000002" /
                                      "rank-00001.ckpt");  // a folder in the way
  const int rc =
      run_shell("timeout 120 env " + base + "--steps 4 --resume --checkpoint-every 1 --checkpoint-dir " + ck +
                " > /dev/null 2> " + err);
  EXPECT_EQ(rc, 1) << file_text(err);
  EXPECT_NE(file_text(err).find("rank 1: " + ck + "/step-00000002/rank-00001.ckpt: is a folder"),
            std::string::npos)
      << file_text(err);
  EXPECT_FALSE(std::filesystem::exists(dir / "ck" / "step-00000002" / "MANIFEST.json"));
  EXPECT_TRUE(std::filesystem::exists(dir / "ck" / "step-00000001" / "MANIFEST.json"));
  std::filesystem::remove_all(dir);
}

TEST(RuntimeMpi, NoCompleteSetOrAnotherLaunchsSetIsAClearErrorNotAHang) {
  const auto dir = std::filesystem::temp_directory_path() / "foresight-mpi-ckpt-errors";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string run = std::string(FORESIGHT_BINARY) + " run --model " + kTiny4 + " --gb 4 ";
  const std::string ck = (dir / "ck").string(), err = (dir / "err.txt").string();
  ASSERT_EQ(run_shell(mpirun(2) + run + "--pp 2 --steps 2 --checkpoint-dir " + ck + " > /dev/null"), 0);
  // Another plan on the same rank count, and another rank count.
  EXPECT_EQ(run_shell("timeout 120 env " + mpirun(2) + run + "--dp 2 --steps 3 --resume --checkpoint-dir " +
                      ck + " > /dev/null 2> " + err),
            2);
  EXPECT_NE(file_text(err).find(
                ck + "/step-00000002/MANIFEST.json: /plan: the set was written under a different plan"),
            std::string::npos)
      << file_text(err);
  EXPECT_EQ(run_shell("timeout 120 " + run + "--steps 3 --resume --checkpoint-dir " + ck +
                      " > /dev/null 2> " + err),
            2);
  EXPECT_NE(
      file_text(err).find(
          ck + "/step-00000002/MANIFEST.json: /ranks: the set was written by 2 ranks, this launch has 1"),
      std::string::npos)
      << file_text(err);
  // The only set incomplete: exit 2 naming the folder, on every rank, without a hang.
  std::filesystem::remove(dir / "ck" / "step-00000002" / "MANIFEST.json");
  EXPECT_EQ(run_shell("timeout 120 env " + mpirun(2) + run + "--pp 2 --steps 3 --resume --checkpoint-dir " +
                      ck + " > /dev/null 2> " + err),
            2);
  EXPECT_NE(file_text(err).find(ck + ": no complete checkpoint set to resume from: " + ck +
                                "/step-00000002 (step 2): incomplete: no MANIFEST.json"),
            std::string::npos)
      << file_text(err);
  std::filesystem::remove_all(dir);
}

// SIGKILL of a random rank at a random moment of a run that checkpoints every step, then
// --resume: the losses after it are bit-identical to an uninterrupted run's (bench/checkpoint_kill.sh,
// which runs this 100 times, with a few tries here; its seed from the clock, printed on failure).
TEST(RuntimeMpi, AKilledRankResumesBitIdentically) {
  const auto seed = std::chrono::steady_clock::now().time_since_epoch().count() % 100000;
  const std::string log = (std::filesystem::temp_directory_path() / "foresight-ckpt-kill.txt").string();
  // Open MPI's own allocations look leaked to LeakSanitizer (as in mpirun() above).
  const std::string cmd =
      "ASAN_OPTIONS=detect_leaks=0 timeout 300 bash " + std::string(FORESIGHT_SOURCE_DIR) +
      "/bench/checkpoint_kill.sh --tries 4 --steps 12 --seed " + std::to_string(seed) + " --foresight " +
      FORESIGHT_BINARY + " --mpirun " + FORESIGHT_MPIEXEC + " --model " + kTiny4 + " > " + log + " 2>&1";
  const int rc = run_shell(cmd);
  const std::string text = file_text(log);
  EXPECT_EQ(rc, 0) << cmd << "\n" << text;
  EXPECT_NE(text.find("4 passed, 0 failed"), std::string::npos) << text;
  EXPECT_NE(text.find("killed rank"), std::string::npos) << "no try killed a rank:\n" << text;
}

TEST(RuntimeMpi, ADyingRankEndsTheJobQuickly) {
  // Rank 1 is killed when step 3 begins; rank 0 then waits on it in a pipeline receive. mpirun
  // must notice and end the job: well within the 60 s limit `timeout` puts on it.
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = run_shell("FORESIGHT_FAULT_INJECT=1:3 timeout 60 env " + mpirun(2) + FORESIGHT_BINARY +
                           " run --model " + kTiny4 + " --pp 2 --gb 4 --steps 1000 > /dev/null 2>&1");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(rc, 0);
  EXPECT_NE(rc, 124) << "the job hung until timeout killed it";
  EXPECT_LT(s, 30.0);
}

TEST(RuntimeMpi, WrongRankCountIsAClearError) {
  const std::string out = (std::filesystem::temp_directory_path() / "foresight-ranks.txt").string();
  const int rc = run_shell(mpirun(2) + FORESIGHT_BINARY + " run --model " + kTiny4 +
                           " --tp 2 --pp 2 --steps 1 2> " + out);
  EXPECT_EQ(rc, 2);
  std::ifstream f(out);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("were launched"), std::string::npos) << text;
}
#endif

// All-reduce times with a protocol switch (2 ranks: t = 2 alpha + S/B): the fit finds the switch,
// both latencies and the bandwidth; a plain line stays one line, and a slow spell at the two
// largest sizes is not taken for a protocol.
std::vector<Measurement> all_reduce_points(double alpha_small, double alpha, double below,
                                           double slow_from = 1e30) {
  std::vector<Measurement> pts;
  for (double S = 1024; S <= 16 * 1048576.0; S *= 2) {
    double t = 2 * (S < below ? alpha_small : alpha) + S / 9e9;
    if (S >= slow_from) t *= 6;
    pts.push_back({"all_reduce", "", S, t, 0});
  }
  return pts;
}

// GEMM times with weight passes (as Eigen's: the forward packs the weight, the backward also reads
// and writes its gradient): the fit recovers the four terms exactly; without weight passes it
// drops the two terms instead of inventing them.
TEST(Calibration, GemmFitFindsTheWeightPasses) {
  auto points = [](double fwd_s_per_byte, double bwd_s_per_byte) {
    std::vector<Measurement> pts;
    for (int rows : {32, 128, 512})
      for (auto [k, n] : std::vector<std::pair<int, int>>{{64, 128}, {256, 512}, {256, 2048}, {1024, 256}}) {
        const double flops = 2.0 * rows * k * n, w = 4.0 * k * n;
        pts.push_back({"gemm", "", flops, 1e-6 + flops / 120e9 + w * fwd_s_per_byte});
        pts.back().weight_bytes = w;
        pts.push_back({"gemm", "", 2 * flops, 2e-6 + 2 * flops / 120e9 + w * bwd_s_per_byte});
        pts.back().weight_bytes = w;
        pts.back().backward = true;
      }
    return pts;
  };
  auto pts = points(0.04e-9, 0.2e-9);
  const LineFit f = fit_gemm(pts, "gemm");
  EXPECT_NEAR(f.intercept_s, 1e-6, 1e-12);
  EXPECT_NEAR(1 / f.slope, 120e9, 1e3);
  EXPECT_NEAR(f.weight_fwd_s_per_byte, 0.04e-9, 1e-15);
  EXPECT_NEAR(f.weight_bwd_s_per_byte, 0.2e-9, 1e-15);
  EXPECT_LT(f.rms_rel_error, 1e-9);
  for (const auto& p : pts) EXPECT_NEAR(p.fitted_s, p.seconds, 1e-9 * p.seconds);
  auto plain = points(0, 0);
  const LineFit g = fit_gemm(plain, "gemm");
  EXPECT_NEAR(g.weight_fwd_s_per_byte, 0, 1e-16);
  EXPECT_NEAR(g.weight_bwd_s_per_byte, 0, 1e-16);
  EXPECT_NEAR(1 / g.slope, 120e9, 1e3);
}

// Attention pairs with a score term (work per score element that does not scale with the head
// width): the fit recovers the three terms; without one it drops the term instead of inventing it.
TEST(Calibration, AttentionFitFindsTheScoreTerm) {
  auto points = [](double score_s) {
    std::vector<Measurement> pts;
    for (int seq : {16, 32, 64, 128})
      for (auto [q, d] : std::vector<std::pair<int, int>>{{4, 16}, {8, 32}}) {
        const double flops = 3.5 * 0.5 * 2.0 * seq * seq * 2.0 * q * d, scores = 0.5 * q * seq * seq;
        pts.push_back({"attention", "", flops, 3e-6 + scores * score_s + flops / 30e9});
        pts.back().elements = scores;
      }
    return pts;
  };
  auto pts = points(2e-9);
  const LineFit f = fit_with_elements(pts, "attention");
  EXPECT_NEAR(f.intercept_s, 3e-6, 1e-12);
  EXPECT_NEAR(f.element_s, 2e-9, 1e-15);
  EXPECT_NEAR(1 / f.slope, 30e9, 1e3);
  EXPECT_LT(f.rms_rel_error, 1e-9);
  for (const auto& p : pts) EXPECT_NEAR(p.fitted_s, p.seconds, 1e-9 * p.seconds);
  auto plain = points(0);
  const LineFit g = fit_with_elements(plain, "attention");
  EXPECT_NEAR(g.element_s, 0, 1e-16);
  EXPECT_NEAR(1 / g.slope, 30e9, 1e3);
}

// Attention with a fixed cost per (sequence, head) besides the score and FLOP terms (the CPU
// backend's per-head GEMMs): fit_attention recovers all four; the three-term line cannot.
TEST(Calibration, AttentionFitFindsThePerHeadTerm) {
  std::vector<Measurement> pts;
  for (int seq : {16, 32, 64, 128})
    for (auto [q, d] : std::vector<std::pair<int, int>>{{2, 16}, {4, 16}, {8, 32}}) {
      const double flops = 3.5 * 0.5 * 2.0 * seq * seq * 2.0 * q * d, scores = 0.5 * q * seq * seq;
      pts.push_back({"attention", "", flops, 3e-6 + q * 1.2e-6 + scores * 2e-9 + flops / 30e9});
      pts.back().elements = scores;
      pts.back().heads = q;
    }
  const LineFit f = fit_attention(pts, "attention");
  EXPECT_NEAR(f.intercept_s, 3e-6, 1e-12);
  EXPECT_NEAR(f.head_s, 1.2e-6, 1e-12);
  EXPECT_NEAR(f.element_s, 2e-9, 1e-15);
  EXPECT_NEAR(1 / f.slope, 30e9, 1e3);
  EXPECT_LT(f.rms_rel_error, 1e-9);
  EXPECT_GT(fit_with_elements(pts, "attention").rms_rel_error, 1e-3);
}

// Streaming kernels with an exponential per element for some (SwiGLU's): the same fit recovers the
// bandwidth and the cost per exponential, which one bytes line could not.
TEST(Calibration, StreamFitFindsTheExponentials) {
  std::vector<Measurement> pts;
  for (double n : {2048.0, 8192.0, 32768.0, 131072.0}) {
    pts.push_back({"stream", "residual", 12 * n, 0.2e-6 + 12 * n / 40e9});
    pts.push_back({"stream", "swiglu", 6 * n, 0.2e-6 + 6 * n / 40e9 + 0.5 * n * 0.3e-9});
    pts.back().elements = 0.5 * n;
  }
  const LineFit f = fit_with_elements(pts, "stream");
  EXPECT_NEAR(1 / f.slope, 40e9, 1e3);
  EXPECT_NEAR(f.element_s, 0.3e-9, 1e-15);
  EXPECT_LT(f.rms_rel_error, 1e-9);
}

// The CPU backend's RoPE keeps its rotation table: the same values as the reference, bit for bit,
// forward and inverse, and after a change of shape.
TEST(CpuFast, RopeTableMatchesTheReference) {
  RopeTable table;
  using kernels::AttentionShape;
  for (const AttentionShape& s :
       {AttentionShape{2, 16, 4, 2, 8}, AttentionShape{1, 32, 4, 2, 16}, AttentionShape{2, 16, 4, 2, 8}})
    for (bool inverse : {false, true}) {
      std::vector<float> a(static_cast<std::size_t>(s.tokens()) * s.qkv_width());
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37f * static_cast<float>(i)) * 2;
      std::vector<float> b = a;
      kernels::rope_cpu(a.data(), s, 10000.0f, inverse);
      table.apply(b.data(), s, 10000.0f, inverse);
      ASSERT_EQ(a, b) << s.seq << " " << inverse;
    }
}

TEST(Calibration, ThePeakIsNoSlowerThanTheSweepsGemms) {
  // The VM once ran the peak GEMM at 71 GFLOP/s and the sweep's at 130-140: a profile with the
  // measured peak capped every GEMM at 71 and predicted a plan 43% long.
  std::vector<Measurement> pts;
  for (double flops : {1e6, 1e7, 1e8}) pts.push_back({"gemm", "", flops, 2e-6 + flops / 130e9});
  pts.push_back({"stream", "", 1e9, 1e-3});  // not a GEMM: 1 TB/s must not become FLOP/s
  const LineFit gemm = fit_gemm(pts, "gemm");
  LineFit cache;
  cache.slope = 1 / 140e9;
  EXPECT_NEAR(gemm_peak(71e9, pts, {&gemm, &cache}), 140e9, 1e3);
  cache.slope = 0;  // no cache fit: the line's rate
  EXPECT_NEAR(gemm_peak(71e9, pts, {&gemm, &cache}), 130e9, 1e3);
  EXPECT_DOUBLE_EQ(gemm_peak(150e9, pts, {&gemm, &cache}), 150e9);  // a measured peak above them stands
  // A cache level's GEMM points count too, whatever the level's name.
  pts.push_back({"gemm-l2", "", 1e6, 1e6 / 145e9});
  EXPECT_NEAR(gemm_peak(71e9, pts, {&gemm}), 145e9, 1e3);
}

// Host<->device copies: a backend with its own memory gets uploads and downloads at each size and a
// fitted link, which the profile writes as the node's host_link with its source; a backend whose
// tensors are in host memory gets none.
TEST(Calibration, HostCopiesBecomeTheHostLink) {
  const std::vector<std::size_t> sizes = {64u << 10, 256u << 10, 1u << 20};
  std::vector<Measurement> none;
  const LineFit host = measure_host_copies(*make_cpu_backend(false), sizes, none);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(host.slope, 0);
  Calibration c;
  c.backend = "cpu";
  const LineFit copies = measure_host_copies(*make_cpu_backend(true), sizes, c.points);
  ASSERT_EQ(c.points.size(), 2 * sizes.size());  // an upload and a download per size
  for (const Measurement& m : c.points) {
    EXPECT_EQ(m.kind, "host_copy");
    EXPECT_GT(m.seconds, 0);
  }
  ASSERT_GT(copies.slope, 0);
  // The profile: the fitted line as the node's host link, with its source; it reads back.
  c.host_copy.slope = 1 / 25e9;  // as if measured: 25 GB/s and 10 us
  c.host_copy.intercept_s = 10e-6;
  const ClusterSpec base = testing::preset_cluster("cpu-local", 2);
  c.device = base.node.accelerator();
  const nlohmann::json j = calibrated_cluster_json(c, base, "test", "a test");
  ASSERT_TRUE(j["node"].contains("host_link")) << j["node"].dump();
  EXPECT_NE(j["node"]["sources"]["host_link"].get<std::string>().find("64 KiB-1 MiB"), std::string::npos)
      << j["node"]["sources"].dump();
  auto back = cluster_from_json(j, "profile.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_NEAR(back->node.host_link.bandwidth, 25e9, 1e3);
  EXPECT_NEAR(back->node.host_link.latency_s, 10e-6, 1e-12);
  // Without copies measured, the base's host link stands.
  c.host_copy = {};
  const nlohmann::json plain = calibrated_cluster_json(c, base, "test", "a test");
  EXPECT_EQ(plain["node"].contains("host_link"), base.node.host_link.bandwidth > 0);
}

// The kernels measured while the machine's speed moved past kSpeedDriftWarnPct are measured again
// while retries are left; when they are spent, the steadiest attempt stands, the last one only if
// it is the steadiest.
TEST(Calibration, TheSteadiestAttemptStands) {
  const double over = kSpeedDriftWarnPct + 5;
  EXPECT_EQ(after_attempt(kSpeedDriftWarnPct - 1, 0, 2, -1), AfterAttempt::kKeep);
  EXPECT_EQ(after_attempt(kSpeedDriftWarnPct - 1, 2, 2, over), AfterAttempt::kKeep);  // steady at last
  EXPECT_EQ(after_attempt(over, 0, 2, -1), AfterAttempt::kRetry);
  EXPECT_EQ(after_attempt(over, 1, 2, over + 3), AfterAttempt::kRetry);
  EXPECT_EQ(after_attempt(over + 8, 2, 2, over), AfterAttempt::kSteadiest);  // an earlier one moved less
  EXPECT_EQ(after_attempt(over, 2, 2, over + 8), AfterAttempt::kKeep);       // this one moved least
  EXPECT_EQ(after_attempt(over, 0, 0, -1), AfterAttempt::kKeep);             // no retries: nothing to compare
}

// Calibrated under mpirun, the memory rates are each rank's with all of them at once and rank 0's
// alone: the profile writes both, the alone ones as the device's shared_memory with their source,
// and reads them back; with one rank there are none.
TEST(Calibration, TheAloneMemoryRatesBecomeTheSharedMemory) {
  const ClusterSpec base = testing::preset_cluster("cpu-local", 2);
  Calibration c;
  c.ranks = 2;
  c.device = base.node.accelerator();
  c.device.shared_memory.shared_by = 2;
  c.device.shared_memory.alone.gemm_efficiency = 0.9;
  c.device.shared_memory.alone.memory_bandwidth = 51e9;
  c.device.shared_memory.alone.optimizer_bandwidth = 72e9;
  c.alone_stream.rms_rel_error = 0.24;
  const nlohmann::json j = calibrated_cluster_json(c, base, "test", "a test");
  const auto& dev = j["node"]["devices"][0]["device"];
  ASSERT_TRUE(dev.contains("shared_memory")) << dev.dump();
  EXPECT_NE(dev["sources"]["shared_memory"].get<std::string>().find("rank 0 while the other ranks waited"),
            std::string::npos)
      << dev["sources"].dump();
  EXPECT_NE(dev["sources"]["shared_memory"].get<std::string>().find("streaming 24.0%"), std::string::npos);
  auto back = cluster_from_json(j, "profile.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->node.accelerator().shared_memory.shared_by, 2);
  EXPECT_NEAR(back->node.accelerator().shared_memory.alone.memory_bandwidth, 51e9, 1e3);
  EXPECT_NEAR(back->node.accelerator().shared_memory.alone.optimizer_bandwidth, 72e9, 1e3);
  c.device.shared_memory = {};
  const nlohmann::json one = calibrated_cluster_json(c, base, "test", "a test");
  EXPECT_FALSE(one["node"]["devices"][0]["device"].contains("shared_memory"));
  EXPECT_FALSE(one["node"]["devices"][0]["device"]["sources"].contains("shared_memory"));
}

// A backend that computes everything in fp32 (the CPU) gives every dtype the fp32 peak; one with
// tensor-core precisions (the CUDA backend) gives bf16 its bf16 GEMM's rate and fp16 and tf32 the
// fp16 plans' TF32 rate, so that a bf16 plan is not predicted at the fp32 rate.
TEST(Calibration, EachGemmPrecisionGetsItsOwnPeak) {
  DeviceSpec cpu = testing::preset_cluster("cpu-local", 1).node.accelerator();
  set_precision_peaks(cpu, 150e9, {});
  EXPECT_EQ(cpu.peak(DType::kFp32), 150e9);
  for (DType t : {DType::kTf32, DType::kBf16, DType::kFp16})
    EXPECT_TRUE(cpu.peak(t) == 0 || cpu.peak(t) == 150e9);
  DeviceSpec gpu = testing::preset_cluster("dgx-h100-ndr", 8).node.accelerator();
  ASSERT_GT(gpu.peak(DType::kBf16), 0);
  set_precision_peaks(gpu, 50e12, {{Precision::kBf16, 700e12}, {Precision::kFp16, 380e12}});
  EXPECT_EQ(gpu.peak(DType::kFp32), 50e12);
  EXPECT_EQ(gpu.peak(DType::kBf16), 700e12);
  EXPECT_EQ(gpu.peak(DType::kFp16), 380e12);
  EXPECT_EQ(gpu.peak(DType::kTf32), 380e12);
  // Before: the fp32 rate for all of them.
  set_precision_peaks(gpu, 50e12, {});
  EXPECT_EQ(gpu.peak(DType::kBf16), 50e12);
  // The CPU backend has no other precisions to measure; the CUDA backend's are bf16 and fp16.
  EXPECT_TRUE(make_cpu_backend()->gemm_precisions().empty());
}

TEST(Calibration, AllReduceSplitsWhereTheProtocolChanges) {
  auto pts = all_reduce_points(0.3e-6, 2.5e-6, 8192);
  const LineFit f = fit_protocols(pts, "all_reduce");
  EXPECT_DOUBLE_EQ(f.small_below, 8192);
  EXPECT_NEAR(f.small_intercept_s, 0.6e-6, 1e-12);
  EXPECT_NEAR(f.intercept_s, 5e-6, 1e-12);
  EXPECT_NEAR(1 / f.slope, 9e9, 1e3);
  EXPECT_LT(f.rms_rel_error, 1e-9);
  for (const auto& p : pts) EXPECT_NEAR(p.fitted_s, p.seconds, 1e-9 * p.seconds);

  auto line = all_reduce_points(2.5e-6, 2.5e-6, 0);
  EXPECT_EQ(fit_protocols(line, "all_reduce").small_below, 0.0);
  auto slow = all_reduce_points(2.5e-6, 2.5e-6, 0, 8 * 1048576.0);
  EXPECT_EQ(fit_protocols(slow, "all_reduce").small_below, 0.0);
}

// Each other collective gets its own rates from its own points, read as the model counts them (an
// all-gather over 4 ranks: (n-1)/n S/B and 2 latency steps; a send/recv: S/B and one), split where
// the link's protocols split; the profile writes them under the fabric with their sources, and
// they read back.
// `run --predict` on a profile that `calibrate` wrote times the calibration's peak GEMM before and
// after the run and reports it against the calibration's (notes.peak_gemm); other cluster
// arguments (a preset, a file without the note or with a broken one) get no such line.
TEST(Calibration, RunComparesTheMachinesSpeedWithTheCalibrations) {
  const auto dir = std::filesystem::temp_directory_path() / "foresight-speed-check";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  nlohmann::json cluster = cluster_to_json(testing::preset_cluster("cpu-local", 1));
  const std::string plain = (dir / "plain.json").string(), noted = (dir / "noted.json").string(),
                    broken = (dir / "broken.json").string();
  std::ofstream(plain) << cluster.dump();
  cluster["notes"]["peak_gemm"] = {{"n", 64},
                                   {"backend", "cpu"},
                                   {"flops_per_s", 1e9},
                                   {"small", {{"shape", {32, 64, 128}}, {"seconds", 2e-6}}}};
  std::ofstream(noted) << cluster.dump();
  cluster["notes"]["peak_gemm"]["n"] = "64";
  std::ofstream(broken) << cluster.dump();
  EXPECT_FALSE(calibrated_peak("cpu-local"));
  EXPECT_FALSE(calibrated_peak(plain));
  EXPECT_FALSE(calibrated_peak(broken));
  const auto peak = calibrated_peak(noted);
  ASSERT_TRUE(peak);
  EXPECT_EQ(peak->n, 64);
  EXPECT_EQ(peak->backend, "cpu");
  EXPECT_EQ(peak->flops_per_s, 1e9);
  EXPECT_EQ(peak->small, (std::array<int, 3>{32, 64, 128}));
  EXPECT_EQ(peak->small_s, 2e-6);
  EXPECT_GT(peak_gemm_seconds(*make_cpu_backend(), 64), 0);
  EXPECT_GT(small_gemm_seconds(*make_cpu_backend(), {32, 64, 128}), 0);
  {  // a small GEMM note that is not one is left out, the peak kept
    nlohmann::json odd = cluster;
    odd["notes"]["peak_gemm"]["n"] = 64;
    odd["notes"]["peak_gemm"]["small"]["shape"] = {32, -1, 128};
    const std::string odd_path = (dir / "odd.json").string();
    std::ofstream(odd_path) << odd.dump();
    const auto p2 = calibrated_peak(odd_path);
    ASSERT_TRUE(p2);
    EXPECT_EQ(p2->small_s, 0);
  }
  const std::string summary = (dir / "s.json").string();
  for (const std::string& profile : {plain, noted}) {
    ASSERT_EQ(run_shell(std::string(FORESIGHT_BINARY) + " run --model tiny --steps 2 --predict --cluster " +
                        profile + " --summary " + summary + " > /dev/null"),
              0);
    const auto c = nlohmann::json::parse(std::ifstream(summary))["comparison"];
    ASSERT_TRUE(c.is_object());
    if (profile == plain) {
      EXPECT_FALSE(c.contains("gemm_speed_vs_calibration_pct"));
      EXPECT_FALSE(c.contains("small_gemm_speed_vs_calibration_pct"));
      continue;
    }
    ASSERT_TRUE(c.contains("gemm_speed_vs_calibration_pct")) << c.dump();
    const auto pct = c["gemm_speed_vs_calibration_pct"];
    ASSERT_EQ(pct.size(), 2u);
    for (const auto& v : pct) EXPECT_GT(v.get<double>(), -100.0);  // a rate was measured
    ASSERT_TRUE(c.contains("small_gemm_speed_vs_calibration_pct")) << c.dump();
    EXPECT_EQ(c["small_gemm_speed_vs_calibration_pct"].size(), 2u);
    EXPECT_EQ(c["speed_adjusted"], false);
  }
  // --speed-adjust: the prediction at the speed measured before the run. This note says 10
  // MFLOP/s, far below any machine's 64^3 GEMM (sanitizers included), so the adjusted step is
  // several times shorter. A profile without the note is an input error.
  const std::string slow = (dir / "slow.json").string();
  cluster["notes"]["peak_gemm"] = {{"n", 64}, {"backend", "cpu"}, {"flops_per_s", 1e7}};
  std::ofstream(slow) << cluster.dump();
  const auto predicted = [&](const std::string& extra) {
    EXPECT_EQ(run_shell(std::string(FORESIGHT_BINARY) + " run --model tiny --steps 2 --predict --cluster " +
                        slow + " --summary " + summary + " " + extra + " > /dev/null"),
              0);
    return nlohmann::json::parse(std::ifstream(summary));
  };
  const auto as_profiled = predicted(""), adjusted = predicted("--speed-adjust");
  EXPECT_EQ(adjusted["comparison"]["speed_adjusted"], true);
  EXPECT_LT(adjusted["predicted_step_s"].get<double>(), 0.2 * as_profiled["predicted_step_s"].get<double>());
  EXPECT_EQ(run_shell(std::string(FORESIGHT_BINARY) +
                      " run --model tiny --steps 2 --predict --speed-adjust --cluster " + plain +
                      " > /dev/null 2>&1"),
            2);
}

TEST(Calibration, CollectivesGetTheirOwnRates) {
  Calibration c;
  c.backend = "cpu";
  c.ranks = 4;
  for (double S = 1024; S <= 16 * 1048576.0; S *= 2) {
    c.points.push_back({"all_gather", "", S, 2 * (S < 8192 ? 0.4e-6 : 1.5e-6) + 0.75 * S / 20e9, 0});
    c.points.push_back({"send_recv", "", S, 3e-6 + S / 8e9, 0});
  }
  c.points.push_back({"reduce_scatter", "", 1024, 1e-6, 0});  // too few points: no rates
  LineFit ag_line, sr_line, rs_line;
  const CollectiveRates ag =
      fit_collective_rates(c.points, "all_gather", CollectiveOp::kAllGather, 4, 8192, ag_line);
  EXPECT_NEAR(ag.bandwidth, 20e9, 1e3);
  EXPECT_NEAR(ag.latency_s, 1.5e-6, 1e-12);
  EXPECT_NEAR(ag.small_message_latency_s, 0.4e-6, 1e-12);
  EXPECT_LT(ag_line.rms_rel_error, 1e-9);
  const CollectiveRates sr =
      fit_collective_rates(c.points, "send_recv", CollectiveOp::kSendRecv, 2, 0, sr_line);
  EXPECT_NEAR(sr.bandwidth, 8e9, 1e3);
  EXPECT_NEAR(sr.latency_s, 3e-6, 1e-12);
  EXPECT_EQ(sr.small_message_latency_s, 0);  // no split on the link: the one latency
  // A send/recv whose protocol changes at 4 KiB on a link split at 8 KiB: its own split.
  std::vector<Measurement> p2p;
  for (double S = 1024; S <= 16 * 1048576.0; S *= 2)
    p2p.push_back({"p2p", "", S, (S < 4096 ? 0.7e-6 : 2.5e-6) + S / 9e9, 0});
  LineFit p2p_line;
  const CollectiveRates own = fit_collective_rates(p2p, "p2p", CollectiveOp::kSendRecv, 2, 8192, p2p_line);
  EXPECT_EQ(own.small_message_bytes, 4096);
  EXPECT_NEAR(own.small_message_latency_s, 0.7e-6, 1e-12);
  EXPECT_NEAR(own.latency_s, 2.5e-6, 1e-12);
  EXPECT_NEAR(own.bandwidth, 9e9, 1e3);
  for (const Measurement& m : c.points) {
    if (m.kind == "reduce_scatter") continue;
    EXPECT_NEAR(m.fitted_s, m.seconds, 1e-9 * m.seconds) << m.kind << " " << m.work;
  }
  EXPECT_TRUE(
      fit_collective_rates(c.points, "reduce_scatter", CollectiveOp::kReduceScatter, 4, 0, rs_line).empty());
  // The profile.
  const ClusterSpec base = testing::preset_cluster("cpu-local", 2);
  c.device = base.node.accelerator();
  c.fabric = base.node.fabric;
  c.fabric_measured = true;
  c.fabric.bandwidth = 6e9;
  c.fabric.latency_s = 2e-6;
  c.fabric.small_message_bytes = 8192;
  c.fabric.small_message_latency_s = 0.5e-6;
  c.fabric.all_gather = ag;
  c.all_gather = ag_line;
  c.fabric.reduce_scatter.bandwidth = 2e9;
  c.fabric.reduce_scatter.cold_bandwidth = 0.8e9;
  const nlohmann::json j = calibrated_cluster_json(c, base, "test", "a test");
  const nlohmann::json& sources = j["node"]["sources"];
  EXPECT_TRUE(sources.contains("fabric.collectives.all_gather")) << sources.dump();
  EXPECT_TRUE(sources.contains("fabric.collectives.reduce_scatter.cold_bandwidth")) << sources.dump();
  EXPECT_FALSE(j["node"]["fabric"]["collectives"].contains("send_recv"));
  auto back = cluster_from_json(j, "profile.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  const LinkSpec& f = back->node.fabric;
  EXPECT_NEAR(f.all_gather.bandwidth, 20e9, 20e9 * 1e-5);
  EXPECT_NEAR(f.all_gather.small_message_latency_s, 0.4e-6, 1e-11);
  EXPECT_NEAR(f.reduce_scatter.cold_bandwidth, 0.8e9, 1e3);
  EXPECT_TRUE(f.send_recv.empty());
  EXPECT_TRUE(f.measured.empty());  // none measured here
}

// The measured times (LinkSpec::measured): each collective's sizes in order, the faster of a size
// measured twice, none from the cold points or with one size; written into the profile with
// their source, read back as they were.
TEST(Calibration, CollectivesKeepTheirMeasuredTimes) {
  std::vector<Measurement> pts;
  for (double S : {4096.0, 1024.0, 2048.0}) pts.push_back({"all_reduce", "", S, S * 1e-9, 0});
  pts.push_back({"all_reduce", "", 2048, 3e-6, 0});  // measured again, slower: the first stands
  pts.push_back({"all_reduce_cold", "", 8192, 1e-3, 0});
  pts.push_back({"reduce_scatter", "", 1024, 1e-6, 0});      // one size: none
  pts.push_back({"all_reduce_in_step", "", 4096, 5e-6, 0});  // as a step calls it: that time, slower or not
  for (double S = 1024; S <= 65536; S *= 4) pts.push_back({"send_recv", "", S, 1e-6 + S / 1e10, 0});
  const MeasuredTimes m = measured_collective_times(pts, 2);
  EXPECT_EQ(m.ranks, 2);
  ASSERT_EQ(m.all_reduce.size(), 3u);
  EXPECT_EQ(m.all_reduce[0].bytes, 1024);
  EXPECT_DOUBLE_EQ(m.all_reduce[1].seconds, 2048e-9);
  EXPECT_EQ(m.all_reduce[2].bytes, 4096);
  EXPECT_DOUBLE_EQ(m.all_reduce[2].seconds, 5e-6);
  EXPECT_TRUE(m.reduce_scatter.empty());
  EXPECT_TRUE(m.all_gather.empty());
  EXPECT_EQ(m.send_recv.size(), 4u);
  // Interpolation: exact for a power law, off by the middle point's own deviation otherwise.
  EXPECT_NEAR(interpolation_rms_error({{1024, 1e-6}, {2048, 2e-6}, {4096, 4e-6}}), 0.0, 1e-12);
  EXPECT_NEAR(interpolation_rms_error({{1024, 1e-6}, {2048, 4e-6}, {4096, 4e-6}}), 0.5, 1e-12);
  EXPECT_EQ(interpolation_rms_error({{1024, 1e-6}, {2048, 4e-6}}), 0.0);
  const std::string summary = measured_times_summary(m);
  EXPECT_EQ(summary.rfind("all_reduce 1 KiB-4 KiB (", 0), 0u) << summary;
  EXPECT_NE(summary.find("%), send_recv 1 KiB-64 KiB ("), std::string::npos) << summary;

  Calibration c;
  const ClusterSpec base = testing::preset_cluster("cpu-local", 2);
  c.device = base.node.accelerator();
  c.fabric = base.node.fabric;
  c.fabric_measured = true;
  c.ranks = 2;
  c.fabric.bandwidth = 6e9;
  c.fabric.latency_s = 2e-6;
  c.fabric.measured = m;
  const nlohmann::json j = calibrated_cluster_json(c, base, "test", "a test");
  EXPECT_TRUE(j["node"]["sources"].contains("fabric.measured")) << j["node"]["sources"].dump();
  auto back = cluster_from_json(j, "profile.json");
  ASSERT_TRUE(back.ok()) << back.error().message();
  const MeasuredTimes& b = back->node.fabric.measured;
  ASSERT_EQ(b.all_reduce.size(), 3u);
  ASSERT_EQ(b.send_recv.size(), 4u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(b.all_reduce[i].bytes, m.all_reduce[i].bytes);
    EXPECT_NEAR(b.all_reduce[i].seconds, m.all_reduce[i].seconds, 1e-5 * m.all_reduce[i].seconds);
  }
  // A calibration on one rank measures no fabric: the base's times, if any, stay as they were.
  c.fabric_measured = false;
  EXPECT_FALSE(calibrated_cluster_json(c, base, "test", "a test")["node"]["fabric"].contains("measured"));
}

}  // namespace
}  // namespace foresight::runtime
