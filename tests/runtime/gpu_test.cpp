// The CUDA backend: NCCL communicators bootstrapped through the runtime's MPI groups, and the
// trainer on device tensors against the CPU backend. One process (a one-rank group): NCCL refuses
// two ranks on one GPU, and the GPU machines these tests meet have one, so the multi-rank paths
// wait for a multi-GPU machine. Tests that need a device skip, visibly, without one; the error
// paths run everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "runtime/backends/cuda_backend.h"
#include "runtime/communication/comm.h"
#include "runtime/communication/nccl_comm.h"
#include "runtime/training/trainer.h"
#include "sim/spec/presets.h"

namespace foresight::runtime {
namespace {

bool have_device(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess && count > 0) return true;
  static_cast<void>(cudaGetLastError());
  *why = e != cudaSuccess ? std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"
                          : "cudaGetDeviceCount returned 0";
  return false;
}

TEST(NcclComm, WithoutADeviceCreationIsAClearError) {
  std::string why;
  if (have_device(&why)) GTEST_SKIP() << "a CUDA device is present: the error path is not reachable here";
  const Comm self;
  auto c = NcclComm::create(self);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("no CUDA device"), std::string::npos) << c.error().message();
}

// Over one rank every collective returns its input: the bootstrap (unique id through the group's
// byte all-gather, ncclCommInitRank) and each call's arguments (counts, in-place offsets) run
// for real, and any NCCL error fails the test.
TEST(NcclComm, OneRankGroupCollectives) {
  std::string why;
  if (!have_device(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  const Comm self;
  auto c = NcclComm::create(self);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  cudaStream_t stream = nullptr;
  FS_CUDA_CHECK(cudaStreamCreate(&stream));
  const std::size_t n = 1000;
  std::vector<float> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i) * 0.5f - 7.0f;
  float *a = nullptr, *b = nullptr;
  FS_CUDA_CHECK(cudaMalloc(&a, n * sizeof(float)));
  FS_CUDA_CHECK(cudaMalloc(&b, n * sizeof(float)));
  FS_CUDA_CHECK(cudaMemcpy(a, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  FS_CUDA_CHECK(cudaMemset(b, 0, n * sizeof(float)));
  c->all_reduce(a, n, stream);
  c->all_gather(a, n, stream);
  c->reduce_scatter(a, b, n, stream);
  FS_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> got_a(n), got_b(n);
  FS_CUDA_CHECK(cudaMemcpy(got_a.data(), a, n * sizeof(float), cudaMemcpyDeviceToHost));
  FS_CUDA_CHECK(cudaMemcpy(got_b.data(), b, n * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_EQ(got_a, host);
  EXPECT_EQ(got_b, host);
  static_cast<void>(cudaFree(a));
  static_cast<void>(cudaFree(b));
  static_cast<void>(cudaStreamDestroy(stream));
}

// --- the trainer on the CUDA backend ----------------------------------------------------------------

struct Run {
  Workload w;
  Comm self;
  std::unique_ptr<Trainer> t;
};

// tiny: RMSNorm, SwiGLU, GQA (the presets' path); tiny4: LayerNorm, GeLU.
ModelSpec model(const std::string& name) {
  if (name == "tiny4") {
    auto m = load_model_file(std::string(FORESIGHT_TEST_DATA) + "/runtime/tiny4.json");
    EXPECT_TRUE(m) << m.error().message();
    return m ? *m : ModelSpec{};
  }
  auto src = resolve_spec(PresetKind::kModel, name);
  EXPECT_TRUE(src);
  auto m = model_from_text(src->text, src->file);
  EXPECT_TRUE(m);
  return m ? *m : ModelSpec{};
}

Result<std::unique_ptr<Run>> start(const ModelSpec& m, const Plan& p, std::unique_ptr<Backend> be) {
  auto c = load_cluster("cpu-local");
  if (!c) return c.error();
  FS_RETURN_IF_ERROR(resize_cluster(*c, 1, "gpus"));
  auto r = std::make_unique<Run>();
  auto w = lower(m, *c, p);
  if (!w) return w.error();
  r->w = std::move(w).value();
  auto t = Trainer::create(r->w, r->self, RunOptions{}, std::move(be));
  if (!t) return t.error();
  r->t = std::move(t).value();
  return r;
}

// Each tensor within `rel` of its largest element, plus 1e-7 for tensors that are nearly zero.
// fp32 GEMMs in another summation order (cuBLAS's blocking, atomics in the weight gradients) stay
// within 1e-4; TF32 GEMMs round their inputs to 10-bit mantissas (2^-11 relative each), 5e-3.
// Parameters after AdamW steps also get `flip`: AdamW moves each element by about +-lr whatever its
// gradient's size, so a gradient within rounding of zero can move it the other way, by up to
// 2 lr a step. A few such elements per tensor (at most 1%, or 2) differ by up to `flip`; any
// element beyond it is a mismatch. (Emulating TF32 and bf16 rounding on the CPU backend: gradients
// all within `rel`, parameters after 3 steps up to 182 of 156 k elements moved the other way.)
int mismatches(const Trainer& t, const Buffer& a, const Buffer& b, const std::string& what, float rel,
               float flip = 0) {
  int bad = 0;
  for (const TensorSlot& s : t.layout().tensors()) {
    float scale = 0;
    for (std::size_t i = 0; i < s.size(); ++i) scale = std::max(scale, std::fabs(b[s.offset + i]));
    std::size_t flips = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const float x = a[s.offset + i], y = b[s.offset + i], d = std::fabs(x - y);
      if (d <= rel * scale + 1e-7f) continue;
      if (flip > 0 && d <= flip + 1e-6f) {
        ++flips;
        continue;
      }
      if (bad++ < 5)
        ADD_FAILURE() << what << " " << s.name << " L" << s.layer << "[" << i << "]: cuda " << x << ", cpu "
                      << y;
    }
    if (flips > std::max<std::size_t>(2, s.size() / 100) && bad++ < 5)
      ADD_FAILURE() << what << " " << s.name << " L" << s.layer << ": " << flips << " of " << s.size()
                    << " elements beyond the tolerance (each within " << flip << ")";
  }
  return bad;
}

TEST(CudaTrainer, WithoutADeviceTheBackendIsAClearError) {
  std::string why;
  if (have_device(&why)) GTEST_SKIP() << "a CUDA device is present: the error path is not reachable here";
  auto be = make_backend("cuda", 0);
  ASSERT_FALSE(be);
  EXPECT_NE(be.error().message().find("no CUDA device"), std::string::npos) << be.error().message();
  auto any = make_backend("auto", 0);
  ASSERT_TRUE(any);
  EXPECT_EQ((*any)->name(), "cpu");
}

// The loss, the gradients of the first step and the parameters after three AdamW steps agree
// with the CPU backend, for both kinds of layer and the options that change the executed ops.
TEST(CudaTrainer, MatchesTheCpuBackend) {
  std::string why;
  if (!have_device(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  struct Case {
    const char* model;
    const char* what;
    Plan plan;
  };
  Plan base;
  base.global_batch = 4;
  base.precision = Precision::kFp32;  // full fp32 GEMMs (no TF32) on the GPU
  std::vector<Case> cases;
  for (const char* m : {"tiny", "tiny4"}) {
    cases.push_back({m, "default", base});
    Plan unfused = base;
    unfused.flash_attention = false;
    cases.push_back({m, "unfused attention", unfused});
    Plan full = base;
    full.recompute = Recompute::kFull;
    cases.push_back({m, "full recompute", full});
    Plan fp16 = base;
    fp16.precision = Precision::kFp16;
    cases.push_back({m, "fp16 loss scaling", fp16});
    Plan bf16 = base;
    bf16.precision = Precision::kBf16;
    cases.push_back({m, "bf16 GEMMs", bf16});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.model) + ", " + c.what);
    auto be = make_backend("cuda", 0);
    ASSERT_TRUE(be) << be.error().message();
    auto gpu = start(model(c.model), c.plan, std::move(*be));
    auto cpu = start(model(c.model), c.plan, nullptr);
    ASSERT_TRUE(gpu) << gpu.error().message();
    ASSERT_TRUE(cpu) << cpu.error().message();
    Trainer &g = *(*gpu)->t, &h = *(*cpu)->t;
    EXPECT_EQ(g.backend().name(), "cuda");
    // fp16 plans run fp32 tensors with TF32 GEMMs on the GPU, bf16 plans bf16 GEMM operands
    // (cuda_backend.h): inputs rounded to 10 and 7 stored mantissa bits (2^-11 and 2^-8 relative).
    const bool tf32 = c.plan.precision == Precision::kFp16, bf16 = c.plan.precision == Precision::kBf16;
    const float rel = bf16 ? 3e-2f : tf32 ? 5e-3f : 1e-4f;
    auto lg = g.step(false), lh = h.step(false);
    ASSERT_TRUE(lg) << lg.error().message();
    ASSERT_TRUE(lh);
    EXPECT_NEAR(lg->loss, lh->loss, (bf16 ? 1e-2 : tf32 ? 1e-3 : 1e-5) * lh->loss);
    EXPECT_EQ(mismatches(g, g.grads(), h.grads(), "grad", rel), 0);
    for (int s = 0; s < 3; ++s) {
      auto a = g.step(), b = h.step();
      ASSERT_TRUE(a) << a.error().message();
      ASSERT_TRUE(b);
      EXPECT_NEAR(a->loss, b->loss, (bf16 ? 2e-2 : tf32 ? 2e-3 : 1e-4) * b->loss) << "step " << s + 1;
      EXPECT_EQ(a->skipped, b->skipped);
    }
    EXPECT_EQ(mismatches(g, g.params(), h.params(), "param", rel, 2.0f * RunOptions{}.adam.lr * 3), 0);
    // Per-op times come from CUDA events: one interval per op, each inside the step.
    const auto& ops = g.timings();
    EXPECT_EQ(ops.size(), h.timings().size());
    for (const OpTiming& o : ops) {
      EXPECT_LE(o.start_s, o.end_s);
      EXPECT_GE(o.start_s, 0);
    }
  }
}

TEST(CudaTrainer, CheckpointsMoveBetweenBackends) {
  std::string why;
  if (!have_device(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  Plan p;
  p.global_batch = 4;
  p.precision = Precision::kFp32;
  const auto dir = std::filesystem::temp_directory_path() / "foresight-cuda-ckpt";
  std::filesystem::remove_all(dir);
  auto be = make_backend("cuda", 0);
  ASSERT_TRUE(be) << be.error().message();
  auto gpu = start(model("tiny"), p, std::move(*be));
  ASSERT_TRUE(gpu) << gpu.error().message();
  ASSERT_TRUE((*gpu)->t->step());
  ASSERT_TRUE((*gpu)->t->save_checkpoint(dir.string()));
  auto cpu = start(model("tiny"), p, nullptr);
  ASSERT_TRUE(cpu);
  ASSERT_TRUE((*cpu)->t->load_checkpoint(dir.string()));
  EXPECT_EQ((*cpu)->t->params(), (*gpu)->t->params())
      << "the checkpoint holds the device's parameters exactly";
  auto be2 = make_backend("cuda", 0);
  ASSERT_TRUE(be2);
  auto back = start(model("tiny"), p, std::move(*be2));
  ASSERT_TRUE(back);
  ASSERT_TRUE((*back)->t->load_checkpoint(dir.string()));
  EXPECT_EQ((*back)->t->params(), (*gpu)->t->params());
  std::filesystem::remove_all(dir);
}

TEST(CudaTrainer, RefusesWhatItDoesNotRunWithTheField) {
  std::string why;
  if (!have_device(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  Plan eager;
  eager.global_batch = 4;
  eager.kernel_fusion = false;
  Plan topk;
  topk.global_batch = 4;
  topk.grad_compression = GradCompression::kTopK;
  for (const auto& [plan, field] :
       {std::pair{eager, "/kernel_fusion"}, std::pair{topk, "/grad_compression"}}) {
    auto be = make_backend("cuda", 0);
    ASSERT_TRUE(be);
    auto c = load_cluster("cpu-local");
    ASSERT_TRUE(c);
    ASSERT_TRUE(resize_cluster(*c, plan.gpus(), "gpus"));
    auto w = lower(model("tiny4"), *c, plan);
    ASSERT_TRUE(w) << w.error().message();
    Comm self;
    auto t = Trainer::create(*w, self, RunOptions{}, std::move(*be));
    ASSERT_FALSE(t);
    EXPECT_NE(t.error().message().find(field), std::string::npos) << t.error().message();
  }
}

}  // namespace
}  // namespace foresight::runtime
