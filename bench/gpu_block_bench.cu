// gpu_block_bench: times one training step (forward + backward, weight gradients included) of a
// GPT-2 XL transformer block on one GPU and reports model FLOP/s and MFU as JSON.
//
//   gpu_block_bench --out block.json [--peak-flops 989e12] [--iters 20] [--warmup 3]
//                   [--batch 8] [--seq 1024]
//
// The block (pre-LayerNorm, as GPT-2): x -> LN1 -> QKV linear -> causal attention -> proj linear
// -> + x -> LN2 -> fc linear -> GeLU -> proj linear -> + residual. Hidden 1600, 25 heads of 64,
// FFN 6400 (GPT-2 XL, Radford et al. 2019). Activations and weights are bf16, weight and bias
// gradients fp32. The four linears run as cuBLAS GEMMs (cublasGemmEx, bf16 inputs, fp32
// accumulation); everything else runs the kernels of kernels/cuda_kernels.h, attention being the
// unfused fp32 kernels (bf16 <-> fp32 conversions around it), so this measures those kernels as
// they are, not a FlashAttention-class block.
//
// Step time: CUDA events around each step, median of --iters steps after --warmup steps.
// A breakdown by phase (GEMMs, attention, the rest) comes from separately instrumented steps.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/cuda_kernels.h"

namespace {

namespace fk = foresight::kernels;
using bf16 = __nv_bfloat16;

// --- options -----------------------------------------------------------------------------------------
struct Options {
  int batch = 8, seq = 1024;
  int hidden = 1600, heads = 25, ffn = 6400;  // GPT-2 XL
  int warmup = 3, iters = 20;
  // Dense bf16 peak of an H100 / H200 SXM: 989.4 TFLOP/s (NVIDIA H100 Tensor Core GPU datasheet,
  // "BF16 Tensor Core 1,979 TFLOPS" with 2:4 sparsity, half that dense; the H200 datasheet gives
  // the same figure). Pass the peak of another device with --peak-flops.
  double peak_flops = 989e12;
  std::string out;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    auto positive = [&](const std::string& v) {
      const int n = std::stoi(v);
      if (n <= 0) throw std::invalid_argument(a + " must be positive, got " + v);
      return n;
    };
    if (a == "--out") {
      o.out = value();
    } else if (a == "--peak-flops") {
      o.peak_flops = std::stod(value());
      if (!(o.peak_flops > 0)) throw std::invalid_argument("--peak-flops must be positive");
    } else if (a == "--iters") {
      o.iters = positive(value());
    } else if (a == "--warmup") {
      o.warmup = std::stoi(value());
    } else if (a == "--batch") {
      o.batch = positive(value());
    } else if (a == "--seq") {
      o.seq = positive(value());
    } else if (a == "--help" || a == "-h") {
      std::cout
          << "usage: gpu_block_bench [--out FILE] [--peak-flops FLOP/s] [--iters N] [--warmup N] [--batch B] "
             "[--seq S]\n";
      std::exit(0);
    } else {
      throw std::invalid_argument("unknown argument " + a);
    }
  }
  return o;
}

// --- device memory -------------------------------------------------------------------------------------
// Owns every allocation of the run; freed at exit.
class Arena {
 public:
  ~Arena() {
    for (void* p : blocks_) static_cast<void>(cudaFree(p));
  }
  template <typename T>
  T* alloc(std::size_t n) {
    void* p = nullptr;
    FS_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
    blocks_.push_back(p);
    bytes_ += n * sizeof(T);
    return static_cast<T*>(p);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  std::vector<void*> blocks_;
  std::size_t bytes_ = 0;
};

// Uniform in [-scale, scale] from a counter hash (splitmix64): reproducible, no curand needed.
__global__ void fill_uniform_kernel(bf16* p, std::size_t n, std::uint64_t seed, float scale) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::uint64_t z = seed + i * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) / static_cast<float>(1ull << 24);  // [0, 1)
    p[i] = __float2bfloat16_rn((2.0f * u - 1.0f) * scale);
  }
}

void fill_uniform(bf16* p, std::size_t n, std::uint64_t seed, float scale, cudaStream_t stream) {
  fill_uniform_kernel<<<1024, 256, 0, stream>>>(p, n, seed, scale);
  FS_CUDA_CHECK_LAUNCH();
}

// --- phases, for the breakdown -----------------------------------------------------------------------------
enum Phase { kGemm = 0, kAttention = 1, kOther = 2, kPhases = 3 };
const char* const kPhaseNames[kPhases] = {"gemm", "attention", "other"};

// When enabled, brackets each op with a pair of events and sums their times per phase.
class PhaseTimer {
 public:
  explicit PhaseTimer(cudaStream_t stream) : stream_(stream) {}
  ~PhaseTimer() {
    for (auto& e : events_) {
      static_cast<void>(cudaEventDestroy(e.start));
      static_cast<void>(cudaEventDestroy(e.stop));
    }
  }
  void enable(bool on) {
    on_ = on;
    used_ = 0;
  }
  template <typename F>
  void run(Phase phase, F&& op) {
    if (!on_) {
      op();
      return;
    }
    if (used_ == events_.size()) {
      Pair pair{phase, nullptr, nullptr};
      FS_CUDA_CHECK(cudaEventCreate(&pair.start));
      FS_CUDA_CHECK(cudaEventCreate(&pair.stop));
      events_.push_back(pair);
    }
    Pair& pair = events_[used_++];
    pair.phase = phase;
    FS_CUDA_CHECK(cudaEventRecord(pair.start, stream_));
    op();
    FS_CUDA_CHECK(cudaEventRecord(pair.stop, stream_));
  }
  // Milliseconds per phase of the ops run since enable(true).
  std::vector<double> collect() {
    FS_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::vector<double> ms(kPhases, 0.0);
    for (std::size_t i = 0; i < used_; ++i) {
      float t = 0;
      FS_CUDA_CHECK(cudaEventElapsedTime(&t, events_[i].start, events_[i].stop));
      ms[events_[i].phase] += t;
    }
    return ms;
  }

 private:
  struct Pair {
    Phase phase;
    cudaEvent_t start, stop;
  };
  cudaStream_t stream_;
  bool on_ = false;
  std::size_t used_ = 0;
  std::vector<Pair> events_;
};

// --- linear layers (PyTorch convention: weight [out, in], row-major) --------------------------------------
struct Linear {
  int in, out;
  bf16 *w, *b;
  float *dw, *db;
};

Linear make_linear(Arena& arena, int in, int out, std::uint64_t seed, cudaStream_t stream) {
  Linear l{in,
           out,
           arena.alloc<bf16>(static_cast<std::size_t>(in) * out),
           arena.alloc<bf16>(out),
           arena.alloc<float>(static_cast<std::size_t>(in) * out),
           arena.alloc<float>(out)};
  fill_uniform(l.w, static_cast<std::size_t>(in) * out, seed, 0.02f * 1.7320508f,
               stream);  // std 0.02, as GPT-2
  fill_uniform(l.b, out, seed + 1, 0.02f, stream);
  return l;
}

// Row-major Y[rows, out] = X[rows, in] W^T, in cuBLAS's column-major terms Y^T = W X^T (as llm.c).
void gemm_forward(cublasHandle_t h, bf16* y, const bf16* x, const Linear& l, int rows) {
  const float one = 1.0f, zero = 0.0f;
  FS_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, l.out, rows, l.in, &one, l.w, CUDA_R_16BF, l.in,
                               x, CUDA_R_16BF, l.in, &zero, y, CUDA_R_16BF, l.out, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
}

// dX[rows, in] = dY[rows, out] W; dW[out, in] += dY^T X (fp32 accumulation buffer, beta = 1).
void gemm_backward(cublasHandle_t h, bf16* dx, const bf16* dy, const bf16* x, const Linear& l, int rows) {
  const float one = 1.0f, zero = 0.0f;
  FS_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, l.in, rows, l.out, &one, l.w, CUDA_R_16BF, l.in,
                               dy, CUDA_R_16BF, l.out, &zero, dx, CUDA_R_16BF, l.in, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
  FS_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, l.in, l.out, rows, &one, x, CUDA_R_16BF, l.in, dy,
                               CUDA_R_16BF, l.out, &one, l.dw, CUDA_R_32F, l.in, CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
}

// --- the block ---------------------------------------------------------------------------------------
struct Norm {
  bf16 *w, *b;
  float *dw, *db;
};

struct Block {
  int tokens, c, c3, f;
  fk::AttentionShape shape;
  Norm ln1, ln2;
  Linear qkv, proj, fc, fcproj;
  // activations (bf16 unless noted)
  bf16 *x, *ln1_out, *qkv_out, *att, *proj_out, *res2, *ln2_out, *fc_pre, *fc_act, *fcproj_out, *y;
  float *mean1, *rstd1, *mean2, *rstd2, *qkv_f32, *att_f32, *probs;
  // gradients
  bf16 *dy, *dfc_act, *dfc_pre, *dln2, *dres2_ln, *dres2, *datt, *dqkv, *dln1, *dx_ln, *dx;
  float *datt_f32, *dqkv_f32, *scratch_a, *scratch_b;
  std::vector<std::pair<float*, std::size_t>> grads;  // zeroed at the start of every step
};

Norm make_norm(Arena& arena, int c, cudaStream_t stream) {
  Norm n{arena.alloc<bf16>(c), arena.alloc<bf16>(c), arena.alloc<float>(c), arena.alloc<float>(c)};
  std::vector<bf16> ones(c, __float2bfloat16_rn(1.0f)), zeros(c, __float2bfloat16_rn(0.0f));
  FS_CUDA_CHECK(cudaMemcpyAsync(n.w, ones.data(), c * sizeof(bf16), cudaMemcpyHostToDevice, stream));
  FS_CUDA_CHECK(cudaMemcpyAsync(n.b, zeros.data(), c * sizeof(bf16), cudaMemcpyHostToDevice, stream));
  FS_CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vectors die here
  return n;
}

Block make_block(Arena& arena, const Options& o, cudaStream_t stream) {
  Block b;
  b.tokens = o.batch * o.seq;
  b.c = o.hidden;
  b.c3 = 3 * o.hidden;
  b.f = o.ffn;
  b.shape.batch = o.batch;
  b.shape.seq = o.seq;
  b.shape.q_heads = o.heads;
  b.shape.kv_heads = o.heads;
  b.shape.head_dim = o.hidden / o.heads;
  const std::size_t t = b.tokens, c = b.c, scores = b.shape.score_elems();
  b.ln1 = make_norm(arena, b.c, stream);
  b.ln2 = make_norm(arena, b.c, stream);
  b.qkv = make_linear(arena, b.c, b.c3, 1000, stream);
  b.proj = make_linear(arena, b.c, b.c, 2000, stream);
  b.fc = make_linear(arena, b.c, b.f, 3000, stream);
  b.fcproj = make_linear(arena, b.f, b.c, 4000, stream);
  for (const Norm* n : {&b.ln1, &b.ln2}) {
    b.grads.push_back({n->dw, c});
    b.grads.push_back({n->db, c});
  }
  for (const Linear* l : {&b.qkv, &b.proj, &b.fc, &b.fcproj}) {
    b.grads.push_back({l->dw, static_cast<std::size_t>(l->in) * l->out});
    b.grads.push_back({l->db, static_cast<std::size_t>(l->out)});
  }
  b.x = arena.alloc<bf16>(t * c);
  b.ln1_out = arena.alloc<bf16>(t * c);
  b.qkv_out = arena.alloc<bf16>(t * b.c3);
  b.att = arena.alloc<bf16>(t * c);
  b.proj_out = arena.alloc<bf16>(t * c);
  b.res2 = arena.alloc<bf16>(t * c);
  b.ln2_out = arena.alloc<bf16>(t * c);
  b.fc_pre = arena.alloc<bf16>(t * b.f);
  b.fc_act = arena.alloc<bf16>(t * b.f);
  b.fcproj_out = arena.alloc<bf16>(t * c);
  b.y = arena.alloc<bf16>(t * c);
  b.mean1 = arena.alloc<float>(t);
  b.rstd1 = arena.alloc<float>(t);
  b.mean2 = arena.alloc<float>(t);
  b.rstd2 = arena.alloc<float>(t);
  b.qkv_f32 = arena.alloc<float>(t * b.c3);
  b.att_f32 = arena.alloc<float>(t * c);
  b.probs = arena.alloc<float>(scores);
  b.dy = arena.alloc<bf16>(t * c);
  b.dfc_act = arena.alloc<bf16>(t * b.f);
  b.dfc_pre = arena.alloc<bf16>(t * b.f);
  b.dln2 = arena.alloc<bf16>(t * c);
  b.dres2_ln = arena.alloc<bf16>(t * c);
  b.dres2 = arena.alloc<bf16>(t * c);
  b.datt = arena.alloc<bf16>(t * c);
  b.dqkv = arena.alloc<bf16>(t * b.c3);
  b.dln1 = arena.alloc<bf16>(t * c);
  b.dx_ln = arena.alloc<bf16>(t * c);
  b.dx = arena.alloc<bf16>(t * c);
  b.datt_f32 = arena.alloc<float>(t * c);
  b.dqkv_f32 = arena.alloc<float>(t * b.c3);
  b.scratch_a = arena.alloc<float>(scores);
  b.scratch_b = arena.alloc<float>(scores);
  fill_uniform(b.x, t * c, 7, 1.0f, stream);
  fill_uniform(b.dy, t * c, 8, 1e-2f, stream);
  return b;
}

// One training step of the block. Every op goes through `timer` so that a timed run can attribute it.
void train_step(const Block& b, cublasHandle_t h, cudaStream_t s, PhaseTimer& timer) {
  const int t = b.tokens, c = b.c;
  const float eps = 1e-5f;  // GPT-2's LayerNorm epsilon
  const std::size_t tc = static_cast<std::size_t>(t) * c, t3c = static_cast<std::size_t>(t) * b.c3;
  timer.run(kOther, [&] {
    for (const auto& g : b.grads) FS_CUDA_CHECK(cudaMemsetAsync(g.first, 0, g.second * sizeof(float), s));
  });

  // Forward.
  timer.run(kOther,
            [&] { fk::layernorm_forward(b.ln1_out, b.mean1, b.rstd1, b.x, b.ln1.w, b.ln1.b, t, c, eps, s); });
  timer.run(kGemm, [&] { gemm_forward(h, b.qkv_out, b.ln1_out, b.qkv, t); });
  timer.run(kOther, [&] { fk::bias_forward(b.qkv_out, b.qkv_out, b.qkv.b, t, b.c3, s); });
  timer.run(kAttention, [&] {
    fk::convert(b.qkv_f32, b.qkv_out, t3c, s);
    fk::attention_forward(b.att_f32, b.probs, b.qkv_f32, b.shape, s);
    fk::convert(b.att, b.att_f32, tc, s);
  });
  timer.run(kGemm, [&] { gemm_forward(h, b.proj_out, b.att, b.proj, t); });
  timer.run(kOther, [&] {
    fk::bias_forward(b.proj_out, b.proj_out, b.proj.b, t, c, s);
    fk::residual_forward(b.res2, b.x, b.proj_out, tc, s);
    fk::layernorm_forward(b.ln2_out, b.mean2, b.rstd2, b.res2, b.ln2.w, b.ln2.b, t, c, eps, s);
  });
  timer.run(kGemm, [&] { gemm_forward(h, b.fc_pre, b.ln2_out, b.fc, t); });  // fc bias: fused into the GeLU
  timer.run(kOther, [&] { fk::bias_gelu_forward(b.fc_act, b.fc_pre, b.fc.b, t, b.f, s); });
  timer.run(kGemm, [&] { gemm_forward(h, b.fcproj_out, b.fc_act, b.fcproj, t); });
  timer.run(kOther, [&] {
    fk::bias_forward(b.fcproj_out, b.fcproj_out, b.fcproj.b, t, c, s);
    fk::residual_forward(b.y, b.res2, b.fcproj_out, tc, s);
  });

  // Backward from dy = dL/dy.
  timer.run(kOther, [&] { fk::bias_backward(b.fcproj.db, b.dy, t, c, s); });
  timer.run(kGemm, [&] { gemm_backward(h, b.dfc_act, b.dy, b.fc_act, b.fcproj, t); });
  timer.run(kOther,
            [&] { fk::bias_gelu_backward(b.dfc_pre, b.fc.db, b.fc_pre, b.fc.b, b.dfc_act, t, b.f, s); });
  timer.run(kGemm, [&] { gemm_backward(h, b.dln2, b.dfc_pre, b.ln2_out, b.fc, t); });
  timer.run(kOther, [&] {
    fk::layernorm_backward(b.dres2_ln, b.ln2.dw, b.ln2.db, b.dln2, b.res2, b.ln2.w, b.mean2, b.rstd2, t, c,
                           s);
    fk::residual_forward(b.dres2, b.dy, b.dres2_ln, tc, s);  // the residual path adds dy
    fk::bias_backward(b.proj.db, b.dres2, t, c, s);
  });
  timer.run(kGemm, [&] { gemm_backward(h, b.datt, b.dres2, b.att, b.proj, t); });
  timer.run(kAttention, [&] {
    fk::convert(b.datt_f32, b.datt, tc, s);
    fk::attention_backward(b.dqkv_f32, b.scratch_a, b.scratch_b, b.datt_f32, b.probs, b.qkv_f32, b.shape, s);
    fk::convert(b.dqkv, b.dqkv_f32, t3c, s);
  });
  timer.run(kOther, [&] { fk::bias_backward(b.qkv.db, b.dqkv, t, b.c3, s); });
  timer.run(kGemm, [&] { gemm_backward(h, b.dln1, b.dqkv, b.ln1_out, b.qkv, t); });
  timer.run(kOther, [&] {
    fk::layernorm_backward(b.dx_ln, b.ln1.dw, b.ln1.db, b.dln1, b.x, b.ln1.w, b.mean1, b.rstd1, t, c, s);
    fk::residual_forward(b.dx, b.dres2, b.dx_ln, tc, s);
  });
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string json_escape(const std::string& s) {
  std::string r;
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') r += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) r += ch;
  }
  return r;
}

// The step time of `iters` timed steps, each between two events on the stream (ms).
std::vector<double> time_steps(const Block& b, cublasHandle_t handle, cudaStream_t stream, PhaseTimer& timer,
                               int iters) {
  cudaEvent_t start = nullptr, stop = nullptr;
  FS_CUDA_CHECK(cudaEventCreate(&start));
  FS_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> step_ms;
  for (int i = 0; i < iters; ++i) {
    FS_CUDA_CHECK(cudaEventRecord(start, stream));
    train_step(b, handle, stream, timer);
    FS_CUDA_CHECK(cudaEventRecord(stop, stream));
    FS_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    FS_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    step_ms.push_back(ms);
  }
  FS_CUDA_CHECK(cudaEventDestroy(start));
  FS_CUDA_CHECK(cudaEventDestroy(stop));
  return step_ms;
}

// Breakdown: the median per phase over 3 instrumented steps (events between ops add a little).
std::vector<double> phase_breakdown_ms(const Block& b, cublasHandle_t handle, cudaStream_t stream,
                                       PhaseTimer& timer) {
  std::vector<std::vector<double>> phase_ms(kPhases);
  for (int i = 0; i < 3; ++i) {
    timer.enable(true);
    train_step(b, handle, stream, timer);
    const auto ms = timer.collect();
    for (int p = 0; p < kPhases; ++p) phase_ms[p].push_back(ms[p]);
  }
  timer.enable(false);
  std::vector<double> medians;
  for (int p = 0; p < kPhases; ++p) medians.push_back(median(phase_ms[p]));
  return medians;
}

// Model FLOPs per step, the PaLM convention (Chowdhery et al. 2022, appendix B: 6N + 12 L H Q T
// per token): the GEMMs do 2 FLOPs per weight per token forward and 4 backward (dX and dW), so
// 6 * P * tokens with P = 12 * hidden^2 here (qkv 3h^2, proj h^2, fc and fc-proj 4h^2 each at
// ffn = 4h; in general (4 h + 2 ffn) * h); attention's Q K^T and P V add 2 * 2 * seq * hidden
// per token forward, times 3 with the backward: 12 * batch * seq^2 * hidden, counted over the
// full square (no halving for the causal mask) as PaLM counts it. Norms, softmax, GeLU, biases
// and residuals are not model FLOPs.
struct ModelFlops {
  double gemm = 0, attention = 0;
  double total() const { return gemm + attention; }
};

ModelFlops model_flops(const Options& o) {
  const double tokens = static_cast<double>(o.batch) * o.seq, h = o.hidden;
  const double gemm_params = (4.0 * h + 2.0 * o.ffn) * h;
  return {6.0 * gemm_params * tokens, 12.0 * o.batch * static_cast<double>(o.seq) * o.seq * h};
}

// The benchmark's JSON: the device, the block, the step time and its breakdown, FLOPs and MFU.
std::string result_json(const Options& o, const cudaDeviceProp& prop, const std::vector<double>& step_ms,
                        const std::vector<double>& phase_ms, std::size_t allocated_bytes) {
  const ModelFlops flops = model_flops(o);
  const double ms = median(step_ms);
  const double achieved = flops.total() / (ms * 1e-3);
  std::ostringstream js;
  js.precision(6);
  js << "{\n"
     << "  \"benchmark\": \"gpu_block_bench\",\n"
     << "  \"device\": \"" << json_escape(prop.name) << "\",\n"
     << "  \"compute_capability\": \"" << prop.major << "." << prop.minor << "\",\n"
     << "  \"multiprocessors\": " << prop.multiProcessorCount << ",\n"
     << "  \"block\": {\"batch\": " << o.batch << ", \"seq\": " << o.seq << ", \"hidden\": " << o.hidden
     << ", \"heads\": " << o.heads << ", \"head_dim\": " << o.hidden / o.heads << ", \"ffn\": " << o.ffn
     << ", \"norm\": \"layernorm\", \"activation\": \"gelu_tanh\"},\n"
     << "  \"precision\": \"bf16 activations and weights, fp32 weight gradients; GEMMs cublasGemmEx bf16 "
        "with fp32 "
        "accumulation; attention unfused fp32 kernels\",\n"
     << "  \"warmup_steps\": " << o.warmup << ",\n"
     << "  \"timed_steps\": " << o.iters << ",\n"
     << "  \"step_ms\": " << ms << ",\n"
     << "  \"step_ms_min\": " << *std::min_element(step_ms.begin(), step_ms.end()) << ",\n"
     << "  \"step_ms_max\": " << *std::max_element(step_ms.begin(), step_ms.end()) << ",\n"
     << "  \"breakdown_ms\": {";
  for (int p = 0; p < kPhases; ++p) js << (p ? ", " : "") << "\"" << kPhaseNames[p] << "\": " << phase_ms[p];
  js << "},\n"
     << "  \"flops_formula\": \"6 * (4*hidden + 2*ffn) * hidden * batch * seq + 12 * batch * seq^2 * "
        "hidden\",\n"
     << "  \"gemm_flops_per_step\": " << flops.gemm << ",\n"
     << "  \"attention_flops_per_step\": " << flops.attention << ",\n"
     << "  \"model_flops_per_step\": " << flops.total() << ",\n"
     << "  \"achieved_tflops\": " << achieved / 1e12 << ",\n"
     << "  \"peak_flops\": " << o.peak_flops << ",\n"
     << "  \"mfu\": " << achieved / o.peak_flops << ",\n"
     << "  \"device_memory_allocated_bytes\": " << allocated_bytes << "\n"
     << "}\n";
  return js.str();
}

// Warm-up, the timed steps, the instrumented ones, then the JSON to stdout (and --out).
int run(const Options& o) {
  if (o.hidden % o.heads != 0) throw std::invalid_argument("hidden must be a multiple of heads");
  int device = 0;
  FS_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  FS_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  cudaStream_t stream = nullptr;
  FS_CUDA_CHECK(cudaStreamCreate(&stream));
  cublasHandle_t handle = nullptr;
  FS_CUBLAS_CHECK(cublasCreate(&handle));
  FS_CUBLAS_CHECK(cublasSetStream(handle, stream));

  Arena arena;
  const Block b = make_block(arena, o, stream);
  PhaseTimer timer(stream);
  for (int i = 0; i < o.warmup; ++i) train_step(b, handle, stream, timer);
  FS_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<double> step_ms = time_steps(b, handle, stream, timer, o.iters);
  const std::vector<double> phase_ms = phase_breakdown_ms(b, handle, stream, timer);
  const std::string js = result_json(o, prop, step_ms, phase_ms, arena.bytes());
  std::cout << js;
  FS_CUBLAS_CHECK(cublasDestroy(handle));
  FS_CUDA_CHECK(cudaStreamDestroy(stream));
  if (!o.out.empty()) {
    std::ofstream f(o.out);
    f << js;
    if (!f) {
      std::cerr << "gpu_block_bench: cannot write " << o.out << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "gpu_block_bench: " << e.what() << "\n";
    return 1;
  }
}
