// The backends: a backend with memory of its own runs bit-identically to the host one, choosing
// a backend by name (and the CUDA plugin's absence), the CPU backend's fast paths and RoPE table
// against the reference kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <boost/range/iterator_range.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/reference.h"
#include "runtime/backends/cpu_fast.h"
#include "tests/runtime/runtime_test_util.h"

namespace foresight::runtime {
namespace {

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
  const auto dir = test_temp_path("foresight-separate-ckpt");
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
  const std::string out = test_temp_path("foresight-plugin.txt").string();
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

// Values in [-0.5, 0.5) from a fixed LCG (Numerical Recipes' constants): the same on every platform.
struct Uniform {
  unsigned state = 12345;
  float operator()() {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) / (1 << 24) - 0.5f;
  }
};

// The fast paths' checks below: fp32 with different summation orders (GEMM blocking vs loops),
// 1e-5 of the magnitude unless said otherwise.

void check_attention(Uniform& rnd) {
  const kernels::AttentionShape s{2, 7, 4, 2, 8};
  std::vector<float> qkv(s.tokens() * s.qkv_width()), dout(s.tokens() * s.q_heads * s.head_dim);
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
}

// The vocabulary-parallel cross-entropy's statistics: Eigen against the CUDA kernels' oracle.
void check_softmax_row_stats(Uniform& rnd) {
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

// GEMMs: Eigen against the reference contract the cuBLAS GEMMs are tested on.
void check_gemms(Uniform& rnd) {
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

// a and b equal within 1e-5 of (1 + |a|), element by element.
void expect_close(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], 1e-5f * (1 + std::fabs(a[i]))) << what << " " << i;
}

// RMSNorm, fused and eager (unfused passes: same values, other rounding).
void check_rmsnorm(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& dy,
                   int rows, int cols) {
  std::vector<float> o1(x.size()), o2(x.size()), r1(rows), r2(rows), dx1(x.size()), dx2(x.size()),
      dw1(cols, 1), dw2(cols, 1);
  kernels::rmsnorm_forward_cpu(o1.data(), r1.data(), x.data(), w.data(), rows, cols, 1e-5f);
  rmsnorm_forward_fast(o2.data(), r2.data(), x.data(), w.data(), rows, cols, 1e-5f);
  ASSERT_NO_FATAL_FAILURE(expect_close(o1, o2, "forward"));
  kernels::rmsnorm_backward_cpu(dx1.data(), dw1.data(), dy.data(), x.data(), w.data(), r1.data(), rows, cols);
  rmsnorm_backward_fast(dx2.data(), dw2.data(), dy.data(), x.data(), w.data(), r1.data(), rows, cols);
  ASSERT_NO_FATAL_FAILURE(expect_close(dx1, dx2, "dx"));
  ASSERT_NO_FATAL_FAILURE(expect_close(dw1, dw2, "dw"));
  std::vector<float> o3(x.size()), r3(rows), dx3(x.size()), dw3(cols, 1);
  rmsnorm_forward_eager(o3.data(), r3.data(), x.data(), w.data(), rows, cols, 1e-5f);
  ASSERT_NO_FATAL_FAILURE(expect_close(o1, o3, "eager forward"));
  for (int i = 0; i < rows; ++i) ASSERT_NEAR(r1[i], r3[i], 1e-5f * r1[i]) << "eager " << i;
  rmsnorm_backward_eager(dx3.data(), dw3.data(), dy.data(), x.data(), w.data(), r1.data(), rows, cols);
  ASSERT_NO_FATAL_FAILURE(expect_close(dx1, dx3, "eager dx"));
  ASSERT_NO_FATAL_FAILURE(expect_close(dw1, dw3, "eager dw"));
}

// SwiGLU (fused and eager) and GeLU.
void check_activations(const std::vector<float>& x, const std::vector<float>& gu,
                       const std::vector<float>& dy, int rows, int cols) {
  std::vector<float> a1(x.size()), a2(x.size()), g1(gu.size()), g2(gu.size());
  kernels::swiglu_forward_cpu(a1.data(), gu.data(), rows, cols);
  swiglu_forward_fast(a2.data(), gu.data(), rows, cols);
  ASSERT_NO_FATAL_FAILURE(expect_close(a1, a2, "swiglu"));
  swiglu_forward_eager(a2.data(), gu.data(), rows, cols);
  ASSERT_NO_FATAL_FAILURE(expect_close(a1, a2, "eager swiglu"));
  kernels::swiglu_backward_cpu(g1.data(), gu.data(), dy.data(), rows, cols);
  swiglu_backward_fast(g2.data(), gu.data(), dy.data(), rows, cols);
  ASSERT_NO_FATAL_FAILURE(expect_close(g1, g2, "swiglu backward"));
  swiglu_backward_eager(g2.data(), gu.data(), dy.data(), rows, cols);
  ASSERT_NO_FATAL_FAILURE(expect_close(g1, g2, "eager swiglu backward"));
  kernels::bias_gelu_forward_cpu(a1.data(), x.data(), nullptr, rows, cols);
  gelu_forward_fast(a2.data(), x.data(), x.size());
  ASSERT_NO_FATAL_FAILURE(expect_close(a1, a2, "gelu"));
  std::vector<float> dx1(x.size()), dx2(x.size());
  kernels::bias_gelu_backward_cpu(dx1.data(), nullptr, x.data(), nullptr, dy.data(), rows, cols);
  gelu_backward_fast(dx2.data(), x.data(), dy.data(), x.size());
  ASSERT_NO_FATAL_FAILURE(expect_close(dx1, dx2, "gelu backward"));
}

// AdamW in blocks: the reference's values over a length that ends inside a block, two steps.
void check_adamw(Uniform& rnd) {
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

// The fused cross-entropy: the losses, their total and the logits' gradient in one pass.
void check_crossentropy(Uniform& rnd) {
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

TEST(Runtime, FastPathsMatchTheReferenceKernels) {
  Uniform rnd;
  ASSERT_NO_FATAL_FAILURE(check_attention(rnd));
  ASSERT_NO_FATAL_FAILURE(check_softmax_row_stats(rnd));
  ASSERT_NO_FATAL_FAILURE(check_gemms(rnd));
  {  // norms and activations on the same inputs
    const int rows = 6, cols = 40;
    std::vector<float> x(rows * cols), w(cols), dy(rows * cols), gu(rows * 2 * cols);
    for (float& v : x) v = 3 * rnd();
    for (float& v : w) v = 1 + rnd();
    for (float& v : dy) v = rnd();
    for (float& v : gu) v = 6 * rnd();
    ASSERT_NO_FATAL_FAILURE(check_rmsnorm(x, w, dy, rows, cols));
    ASSERT_NO_FATAL_FAILURE(check_activations(x, gu, dy, rows, cols));
  }
  ASSERT_NO_FATAL_FAILURE(check_adamw(rnd));
  check_crossentropy(rnd);
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

}  // namespace
}  // namespace foresight::runtime
