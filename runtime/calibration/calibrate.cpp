// Microbenchmarks of a backend's kernels and collectives, and the least-squares fits.
#include "runtime/calibration/calibrate.h"

#include <fmt/core.h>
#include <unistd.h>

#include <Eigen/Dense>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <tuple>
#include <vector>

#include "kernels/reference.h"
#include "runtime/backends/cpu_fast.h"
#include "runtime/calibration/calibrate_internal.h"
#include "runtime/training/trainer.h"
#include "sim/analytic/analytic_model.h"
#include "sim/analytic/collective.h"

namespace foresight::runtime {

namespace {

using Clock = std::chrono::steady_clock;

// Median seconds per call of `f`: calls are timed in batches long enough (>= 0.2 ms) for the
// clock, after a warm-up, for at least `budget_s` or 15 batches. Each batch ends when the backend
// has finished its work (an asynchronous backend's calls return once queued).
template <class F>
double time_call(Backend& be, F&& f, double budget_s = 0.05) {
  f();
  f();
  be.synchronize();
  int batch = 1;
  for (;;) {
    const auto t0 = Clock::now();
    for (int i = 0; i < batch; ++i) f();
    be.synchronize();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s >= 2e-4 || batch >= (1 << 20)) break;
    batch *= 4;
  }
  std::vector<double> samples;
  const auto start = Clock::now();
  while (samples.size() < 15 ||
         (std::chrono::duration<double>(Clock::now() - start).count() < budget_s && samples.size() < 200)) {
    const auto t0 = Clock::now();
    for (int i = 0; i < batch; ++i) f();
    be.synchronize();
    samples.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / batch);
  }
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

// A peak GEMM's best call: see peak_gemm_seconds.
double best_gemm_call_s(Backend& be, float* out, const float* a, const float* b, int n) {
  be.gemm_forward(out, a, b, n, n, n);  // warm-up (a GPU's first call loads its kernels)
  be.synchronize();
  double best = 1e300;
  const auto start = Clock::now();
  for (int i = 0; i < 3 || (i < 20 && std::chrono::duration<double>(Clock::now() - start).count() < 0.25);
       ++i) {
    const auto t0 = Clock::now();
    be.gemm_forward(out, a, b, n, n, n);
    be.synchronize();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

// Measures points again with `measure` (which appends to `pts`), each point already in `pts`
// keeping the faster of its two times (a shared machine's slow spells last seconds: a point
// measured once may land in one).
template <class F>
void keep_faster(std::vector<Measurement>& pts, F&& measure) {
  std::vector<Measurement> kept;
  kept.swap(pts);
  measure();
  std::vector<Measurement> again;
  again.swap(pts);
  pts.swap(kept);
  for (const Measurement& m : again)
    for (Measurement& p : pts)
      if (p.kind == m.kind && p.shape == m.shape) p.seconds = std::min(p.seconds, m.seconds);
}

// The points of one kind that its fit uses.
std::vector<Measurement*> fitted_points(std::vector<Measurement>& pts, const std::string& kind) {
  std::vector<Measurement*> sel;
  for (auto& p : pts)
    if (p.kind == kind && p.in_fit) sel.push_back(&p);
  return sel;
}

// Fills the fit's rms and largest relative error over `sel`, the fit's time of a point being
// `time(point)` (by default the line's at its work).
template <typename Time>
void score(LineFit& f, const std::vector<Measurement*>& sel, Time time) {
  double ss = 0;
  for (const Measurement* m : sel) {
    const double rel = (time(*m) - m->seconds) / m->seconds;
    ss += rel * rel;
    f.max_rel_error = std::max(f.max_rel_error, std::fabs(rel));
  }
  f.rms_rel_error = std::sqrt(ss / static_cast<double>(sel.size()));
}
void score(LineFit& f, const std::vector<Measurement*>& sel) {
  score(f, sel, [&f](const Measurement& m) { return f.at(m.work); });
}

// The slope b of t = a + b * w with the intercept `a` given, relative residuals.
double slope_through(const std::vector<Measurement*>& sel, double a) {
  double num = 0, den = 0;
  for (const Measurement* m : sel) {
    const double w = m->work / m->seconds;
    num += w * (1.0 - a / m->seconds);
    den += w * w;
  }
  return den > 0 ? num / den : 0.0;
}

// Least squares of t = a + b * w over the points of one kind, relative residuals (rows scaled by
// 1/t). A negative intercept (noise on a line through ~0) is refitted as a = 0.
LineFit fit(std::vector<Measurement>& pts, const std::string& kind) {
  const std::vector<Measurement*> sel = fitted_points(pts, kind);
  LineFit f;
  if (sel.size() < 2) return f;
  Eigen::MatrixXd A(sel.size(), 2);
  Eigen::VectorXd y = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(sel.size()));
  for (std::size_t i = 0; i < sel.size(); ++i) {
    A(static_cast<Eigen::Index>(i), 0) = 1.0 / sel[i]->seconds;
    A(static_cast<Eigen::Index>(i), 1) = sel[i]->work / sel[i]->seconds;
  }
  Eigen::Vector2d x = A.colPivHouseholderQr().solve(y);
  if (x(0) < 0) {
    x(0) = 0;
    x(1) = slope_through(sel, 0.0);
  }
  f.intercept_s = x(0);
  f.slope = x(1);
  score(f, sel);
  for (auto* p : sel) p->fitted_s = f.at(p->work);
  return f;
}

// Relative-residual least squares of t = a_small [w < below] + a [w >= below] + b w.
LineFit fit_split(const std::vector<Measurement*>& sel, double below) {
  const auto rows = static_cast<Eigen::Index>(sel.size());
  Eigen::MatrixXd A(rows, 3);
  Eigen::VectorXd y = Eigen::VectorXd::Ones(rows);
  for (Eigen::Index i = 0; i < rows; ++i) {
    const Measurement& m = *sel[static_cast<std::size_t>(i)];
    const bool small = m.work < below;
    A(i, 0) = small ? 1.0 / m.seconds : 0.0;
    A(i, 1) = small ? 0.0 : 1.0 / m.seconds;
    A(i, 2) = m.work / m.seconds;
  }
  const Eigen::Vector3d x = A.colPivHouseholderQr().solve(y);
  LineFit f;
  f.small_below = below;
  f.small_intercept_s = x(0);
  f.intercept_s = x(1);
  f.slope = x(2);
  score(f, sel);
  return f;
}

Buffer random_vector(std::size_t n, unsigned seed) {
  Buffer v(n);
  unsigned s = seed;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / static_cast<float>(1 << 24) - 0.5f;
  }
  return v;
}

// Fills a device tensor by repeating `block` (gigabytes of operands would take longer to make on
// the host than to measure).
void tile(Backend& be, DeviceBuffer& t, const Buffer& block) {
  for (std::size_t at = 0; at < t.size(); at += block.size())
    be.upload(t.data() + at, block.data(), std::min(block.size(), t.size() - at));
}
constexpr std::size_t kTileFloats = 1u << 20;

// A tensor of `n` values in [-0.5, 0.5) in the backend's memory: a host backend's is the random
// vector itself, a device's repeats a block of 1 Mi random values.
DeviceBuffer random_tensor(Backend& be, std::size_t n, unsigned seed) {
  DeviceBuffer t(&be);
  if (be.host_memory()) {
    t.adopt(random_vector(n, seed));
    return t;
  }
  t.resize(n);
  tile(be, t, random_vector(std::min(n, kTileFloats), seed));
  return t;
}

// A tensor of `n` copies of `value` (a host backend's allocated as the executor allocates).
DeviceBuffer filled(Backend& be, std::size_t n, float value = 0.0f) {
  DeviceBuffer t(&be);
  if (be.host_memory()) {
    t.adopt(Buffer(n, value));
    return t;
  }
  t.resize(n);  // zero-filled
  if (value != 0.0f) tile(be, t, Buffer(std::min(n, kTileFloats), value));
  return t;
}

// The outputs of forward kernels as the trainer makes them: each is a new activation, kept for the
// backward, so its buffer is allocated (zero-filled) per call from memory that a step's other data
// has since pushed out of the caches. The pool cycles through `copies` buffers, each freed and
// allocated again when its turn comes (the allocator hands back the block just freed, last touched
// `copies` calls before).
class OutputPool {
 public:
  OutputPool(Backend& be, std::size_t copies, std::size_t n) : n_(n) {
    for (std::size_t i = 0; i < copies; ++i) bufs_.push_back(filled(be, n));
  }
  float* next() { return renew(at_++ % bufs_.size()); }
  // Buffer i freed and allocated again (for a caller that keeps its own cycle), and as it is.
  float* renew(std::size_t i) {
    DeviceBuffer& b = bufs_[i];
    b.release();
    b.resize(n_);
    return b.data();
  }
  float* at(std::size_t i) { return bufs_[i].data(); }

 private:
  std::vector<DeviceBuffer> bufs_;
  std::size_t n_, at_ = 0;
};

// The size of the data cache of `wanted` level on this machine's first CPU in sysfs, 0 where absent.
std::size_t sysfs_cache_bytes(int wanted) {
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level_file(dir + "level"), type_file(dir + "type"), size_file(dir + "size");
    int level = 0;
    std::string type, size;
    if (!(level_file >> level) || !(type_file >> type) || !(size_file >> size)) continue;
    if (level != wanted || type == "Instruction") continue;
    unsigned long long value = 0;
    char unit = 0;
    if (std::sscanf(size.c_str(), "%llu%c", &value, &unit) < 1) return 0;
    return static_cast<std::size_t>(value) * (unit == 'K' ? 1024u : unit == 'M' ? (1u << 20) : 1u);
  }
  return 0;
}

// The size of this machine's data cache of `level` (2: the core's L2, 3: the L3 it shares) as
// Linux reports it (sysfs), else as the C library reads it from the CPU (sysconf, CPUID), 0 where
// neither says. Some VMs have no cache entries in sysfs (`ls /sys/devices/system/cpu/cpu0/cache`
// shows none), and only CPUID tells (`getconf -a | grep CACHE_SIZE`).
std::size_t cache_bytes(int wanted) {
  if (const std::size_t b = sysfs_cache_bytes(wanted); b > 0) return b;
#if defined(_SC_LEVEL2_CACHE_SIZE) && defined(_SC_LEVEL3_CACHE_SIZE)
  if (wanted != 2 && wanted != 3) return 0;
  const long v = sysconf(wanted == 2 ? _SC_LEVEL2_CACHE_SIZE : _SC_LEVEL3_CACHE_SIZE);
  return v > 0 ? static_cast<std::size_t>(v) : 0;
#else
  return 0;
#endif
}

// The sizes the microbenchmarks run at: a CPU's are the tiny and small models' (their operands
// meet the caches the profile describes); a GPU's are transformer layers' at training sizes.
struct Sizes {
  int peak_n = 1024;  // the sustained-peak GEMM is peak_n^3
  std::vector<int> rows;
  std::vector<std::pair<int, int>> kn, kn_cache;  // kn_cache: measured in the cache levels only
  std::vector<std::size_t> stream, adam;
  std::vector<std::size_t> adam_cache;  // AdamW over each cache level's span
  std::vector<std::size_t> host_copy = {1u << 20, 4u << 20, 16u << 20, 64u << 20, 256u << 20};  // bytes
  std::vector<int> seqs;
  std::vector<std::tuple<int, int, int>> heads;  // q heads, kv heads, head_dim
  // The cache levels (their fits empty), smallest first, and the memory span.
  std::vector<CacheFit> caches;
  std::size_t memory_footprint = kMemoryFootprint;
  // AdamW's state (parameters, gradients, moments) is cycled over this much: a training step
  // touches it once, so the step's other data has evicted it. AdamW runs faster on hot state or
  // cycled over 64 MiB than over 256 MiB or 1 GiB, or after streaming 128 MiB of other data; the
  // last is what `foresight run` measures (its trace's optimizer ops show it).
  std::size_t optimizer_footprint = 256u << 20;
  // Attention's saved tensors (q, k, v, probabilities) are cycled over this much: activations come
  // back in the backward of their own micro-batch, after about one micro-batch's activations (a
  // few MiB for the models a CPU trains, hundreds on a GPU), not after the whole step's data.
  std::size_t activation_footprint = kCacheFootprint;
};

Sizes sizes_for(const Backend& be) {
  Sizes z;
  if (be.name() == "cpu") {  // host or separately managed memory alike
    z.rows = {32, 128, 512};
    // The tiny model's shapes (hidden 64) and the small model's (hidden 256); two more of the tiny
    // model's (its proj and mlp_down, with tp=2 too) in the cache levels only, which hold its plans.
    z.kn = {{64, 128}, {64, 512}, {256, 512}, {256, 2048}, {1024, 256}, {2048, 256}};
    z.kn_cache = {{32, 64}, {256, 64}};
    z.stream = {2048u, 8192u, 32768u, 131072u, 524288u, 2097152u};  // from the tiny model's 8 KiB tensors
    z.adam = {262144u, 1048576u, 4194304u};
    // A plan whose whole state fits a level (the tiny model's: 75-150 k parameters) runs AdamW
    // there, slower than that level's streaming rate (`foresight calibrate` prints both).
    z.adam_cache = {16384u, 65536u, 262144u};
    z.seqs = {16, 32, 64, 128};
    z.heads = {{2, 1, 16}, {4, 2, 16}, {8, 4, 32}};  // the tiny model with tp=2 and without, the small model
    // Cache levels: the core's L2, its operands cycled over half of it (the other half holds the
    // hot operands and what the allocator hands out), and a span of kCacheFootprint. The tiny
    // model's GEMMs, whose step's working set fits the L2, are predicted per op within a few percent
    // at the L2 rates and far too long at the 8 MiB span's (`foresight calibrate`, then `foresight
    // run --model tiny --predict --trace` shows each op against its prediction).
    if (const std::size_t l2 = cache_bytes(2); l2 >= (128u << 10) && l2 < kCacheFootprint)
      z.caches.push_back(
          {"l2", "the core's L2 as the machine reports it (sysfs, else CPUID)", l2 / 2, l2, {}, {}});
    z.caches.push_back({"cache", "a span of a few L2s", kCacheFootprint, kCacheFootprint, {}, {}});
    // A third level, a span of kL3Footprint, where the L3 the machine reports holds it twice. At the
    // memory rates, the small model's tp=2 plan (26 MiB of weights, gradients and activations per
    // rank in fp32) is predicted too long per GEMM op: its GEMMs cycled over 32 MiB run faster than
    // over 256 MiB. The 1F1B pp=2 plan (29 MiB) takes this level too, though its GEMM ops run close
    // to the memory rates: the level averages the plans measured (bench/predict_vs_measured.py).
    if (cache_bytes(3) >= 2 * kL3Footprint)
      z.caches.push_back({"l3",
                          "a span within the L3 the machine reports (sysfs, else CPUID)",
                          kL3Footprint,
                          kL3Footprint,
                          {},
                          {}});
    return z;
  }
  // A GPU: operands cycled over 16 MiB stay in its L2 (40-60 MB on A100-H200); over 1 GiB they do not.
  z.peak_n = 4096;
  z.rows = {512, 2048, 8192};
  z.kn = {{768, 3072}, {3072, 768}, {1024, 1024}, {2048, 8192}, {4096, 4096}, {8192, 2048}};
  z.stream = {1u << 18, 1u << 20, 1u << 22, 1u << 24, 1u << 26};
  z.adam = {1u << 22, 1u << 24, 1u << 26};
  z.seqs = {256, 512, 1024, 2048};
  z.heads = {{12, 12, 64}, {16, 4, 128}};
  z.caches.push_back({"cache", "within the GPU's L2", 16u << 20, 16u << 20, {}, {}});
  z.memory_footprint = 1u << 30;
  z.optimizer_footprint = 1u << 30;
  z.activation_footprint = 1u << 30;
  return z;
}

// Relative-residual least squares of t = sum_j x_j term(m, j) over `sel` (K terms). A negative
// coefficient (noise) other than term `keep`'s is dropped and the rest refitted.
template <int K, typename Term>
Eigen::Matrix<double, K, 1> fit_terms(const std::vector<Measurement*>& sel, int keep, Term term) {
  std::array<bool, K> use;
  use.fill(true);
  Eigen::Matrix<double, K, 1> x = Eigen::Matrix<double, K, 1>::Zero();
  for (int attempt = 0; attempt < K; ++attempt) {
    const auto rows = static_cast<Eigen::Index>(sel.size());
    Eigen::MatrixXd A = Eigen::MatrixXd::Zero(rows, K);
    for (Eigen::Index i = 0; i < rows; ++i) {
      const Measurement& m = *sel[static_cast<std::size_t>(i)];
      for (int j = 0; j < K; ++j)
        if (use[static_cast<std::size_t>(j)]) A(i, j) = term(m, j) / m.seconds;
    }
    x = A.colPivHouseholderQr().solve(Eigen::VectorXd::Ones(rows));
    bool again = false;
    for (int j = 0; j < K; ++j)
      if (use[static_cast<std::size_t>(j)] && x(j) < 0 && j != keep) {
        use[static_cast<std::size_t>(j)] = false;
        again = true;
      }
    if (!again) break;
  }
  for (int j = 0; j < K; ++j)
    if (!use[static_cast<std::size_t>(j)]) x(j) = 0;
  return x;
}

}  // namespace

// GEMMs: relative-residual least squares of t = calls a + FLOPs b + weight bytes (c_fwd or c_bwd),
// calls 1 forward and 2 backward. The weight terms are the BLAS's passes over the weight (packing
// it; the backward also reads and writes its gradient): with them the CPU shapes fit about twice
// as closely (`foresight calibrate` prints the rms fit error). A negative coefficient (noise) is
// dropped and the rest refitted.
LineFit fit_gemm(std::vector<Measurement>& pts, const std::string& kind) {
  const std::vector<Measurement*> sel = fitted_points(pts, kind);
  LineFit f;
  if (sel.size() < 4) return fit(pts, kind);
  const Eigen::Vector4d x = fit_terms<4>(sel, 1, [](const Measurement& m, int j) {
    switch (j) {
      case 0:
        return m.backward ? 2.0 : 1.0;  // calls
      case 1:
        return m.work;  // FLOPs
      case 2:
        return m.backward ? 0.0 : m.weight_bytes;
      default:
        return m.backward ? m.weight_bytes : 0.0;
    }
  });
  f.intercept_s = x(0);
  f.slope = x(1);
  f.weight_fwd_s_per_byte = x(2);
  f.weight_bwd_s_per_byte = x(3);
  for (Measurement* m : sel)
    m->fitted_s = (m->backward ? 2.0 : 1.0) * f.intercept_s + f.slope * m->work +
                  m->weight_bytes * (m->backward ? f.weight_bwd_s_per_byte : f.weight_fwd_s_per_byte);
  score(f, sel, [](const Measurement& m) { return m.fitted_s; });
  return f;
}

namespace {
// t = a [+ heads x h] + elements x e + work x b over `kind`'s points (K = 4 with the head term), a
// negative term other than the work's dropped.
template <int K>
LineFit fit_counted(std::vector<Measurement>& pts, const std::string& kind) {
  static_assert(K == 3 || K == 4);
  const std::vector<Measurement*> sel = fitted_points(pts, kind);
  if (sel.size() < static_cast<std::size_t>(K + 1)) return fit(pts, kind);
  const Eigen::Matrix<double, K, 1> x = fit_terms<K>(sel, K - 1, [](const Measurement& m, int j) {
    if (j == 0) return 1.0;
    if (j == K - 1) return m.work;
    return j == K - 2 ? m.elements : m.heads;
  });
  LineFit f;
  f.intercept_s = x(0);
  f.head_s = K == 4 ? x(1) : 0.0;
  f.element_s = x(K - 2);
  f.slope = x(K - 1);
  for (Measurement* m : sel)
    m->fitted_s = f.intercept_s + f.head_s * m->heads + f.element_s * m->elements + f.slope * m->work;
  score(f, sel, [](const Measurement& m) { return m.fitted_s; });
  return f;
}
}  // namespace

// Streaming kernels: the elements are the exponentials (SwiGLU's). Attention pairs without the head
// term: the elements are the causal score elements, the work on the S x S scores that does not
// scale with the head width (scale, softmax, the probabilities' gradient): with it the CPU shapes
// fit about twice as closely (`foresight calibrate` prints the rms fit error).
LineFit fit_with_elements(std::vector<Measurement>& pts, const std::string& kind) {
  return fit_counted<3>(pts, kind);
}

// Attention pairs with a fixed cost per (sequence, head), the CPU backend's per-head GEMMs: with the
// tiny tp=2 plan's heads (2/1) among the shapes, the three-term line cannot fit them
// (Calibration.AttentionFitFindsThePerHeadTerm).
//
// On a loaded machine a term's least-squares coefficient can come out negative (CI once wrote an
// attention efficiency of -0.47: a FLOP slope below zero is no rate): the per-head term, then the
// per-element one, is dropped until every term is physical, and the plain line is the last resort.
LineFit fit_attention(std::vector<Measurement>& pts, const std::string& kind) {
  const auto physical = [](const LineFit& f) { return f.slope > 0 && f.element_s >= 0 && f.head_s >= 0; };
  if (LineFit f = fit_counted<4>(pts, kind); physical(f)) return f;
  if (LineFit f = fit_counted<3>(pts, kind); physical(f)) return f;
  return fit(pts, kind);
}

double gemm_peak(double measured_flops, const std::vector<Measurement>& pts,
                 const std::vector<const LineFit*>& fits) {
  double peak = measured_flops;
  for (const LineFit* f : fits)
    if (f->slope > 0) peak = std::max(peak, 1.0 / f->slope);
  for (const Measurement& m : pts)
    if ((m.kind == "gemm" || m.kind.starts_with("gemm-")) && m.seconds > 0)
      peak = std::max(peak, m.work / m.seconds);
  return peak;
}

LineFit fit_protocols(std::vector<Measurement>& pts, const std::string& kind) {
  LineFit one = fit(pts, kind);
  std::vector<Measurement*> sel = fitted_points(pts, kind);
  std::sort(sel.begin(), sel.end(),
            [](const Measurement* a, const Measurement* b) { return a->work < b->work; });
  std::optional<LineFit> best;
  // The small protocol covers the first sizes only: the larger half at least is the line whose
  // slope gives the bandwidth (a slow spell at the largest sizes is not a protocol).
  for (std::size_t k = 2; 2 * k <= sel.size(); ++k) {
    if (sel[k]->work <= sel[k - 1]->work) continue;
    const LineFit f = fit_split(sel, sel[k]->work);
    if (f.small_intercept_s < 0 || f.slope <= 0 || f.small_intercept_s >= f.intercept_s) continue;
    if (!best || f.rms_rel_error < best->rms_rel_error) best = f;
  }
  // A line already within 1% rms needs no second protocol (and rounding must not invent one).
  if (!best || best->rms_rel_error > one.rms_rel_error * (2.0 / 3.0) ||
      one.rms_rel_error - best->rms_rel_error < 0.01)
    return one;
  for (Measurement* m : sel) m->fitted_s = best->at(m->work);
  return *best;
}

// The cold variant of a collective (its points of `kind`, its data evicted first): the hot line's
// latency with its own bandwidth, returned where slower than `hot_bandwidth` (0 otherwise: a
// "cold" buffer that moved faster was not cold, and the hot slope stands). Fills `cold` and the
// points' fitted_s.
double fit_cold(std::vector<Measurement>& pts, const std::string& kind, const LineFit& hot, double bus_factor,
                double hot_bandwidth, LineFit& cold) {
  cold = {};
  const std::vector<Measurement*> sel = fitted_points(pts, kind);
  if (sel.empty()) return 0.0;
  cold.intercept_s = hot.intercept_s;
  cold.slope = slope_through(sel, cold.intercept_s);
  if (cold.slope <= 0) return 0.0;
  double bandwidth = bus_factor / cold.slope;
  if (bandwidth >= hot_bandwidth) {
    cold.slope = hot.slope;
    bandwidth = 0.0;
  }
  for (Measurement* m : sel) {
    m->fitted_s = cold.at(m->work);
    m->bus_factor = bus_factor;
  }
  score(cold, sel);
  return bandwidth;
}

MeasuredTimes measured_collective_times(const std::vector<Measurement>& pts, int ranks) {
  MeasuredTimes t;
  t.ranks = ranks;
  for (CollectiveOp op : kMeasuredOps) {
    const std::string hot(to_string(op)), in_step = hot + kInStepSuffix;
    // (bytes, back to back, seconds), sorted: a size's in-step time ahead of its back-to-back
    // one, the faster of each kind ahead of a slower one; the first of each size stands.
    std::vector<std::tuple<double, bool, double>> found;
    for (const Measurement& m : pts)
      if ((m.kind == hot || m.kind == in_step) && m.work > 0 && m.seconds > 0)
        found.emplace_back(m.work, m.kind == hot, m.seconds);
    std::sort(found.begin(), found.end());
    std::vector<MeasuredTimes::Point>& v = *t.of(op);
    for (const auto& f : found)
      if (v.empty() || v.back().bytes != std::get<0>(f)) v.push_back({std::get<0>(f), std::get<2>(f)});
    if (v.size() < 2) v.clear();
  }
  return t;
}

double interpolation_rms_error(const std::vector<MeasuredTimes::Point>& pts) {
  double sum = 0;
  int count = 0;
  for (std::size_t i = 1; i + 1 < pts.size(); ++i) {
    sum += std::pow(MeasuredTimes::between(pts[i - 1], pts[i + 1], pts[i].bytes) / pts[i].seconds - 1, 2);
    ++count;
  }
  return count > 0 ? std::sqrt(sum / count) : 0.0;
}

std::string measured_times_summary(const MeasuredTimes& t) {
  std::string out;
  for (CollectiveOp op : kMeasuredOps) {
    const std::vector<MeasuredTimes::Point>& v = *t.of(op);
    if (!v.empty())
      out += fmt::format("{}{} {}-{} ({:.1f}%)", out.empty() ? "" : ", ", to_string(op),
                         size_label(v.front().bytes), size_label(v.back().bytes),
                         100 * interpolation_rms_error(v));
  }
  return out;
}

AfterAttempt after_attempt(double moved_pct, int attempt, int retries, double steadiest_moved_pct) {
  if (moved_pct <= kSpeedDriftWarnPct) return AfterAttempt::kKeep;
  if (attempt < retries) return AfterAttempt::kRetry;
  return steadiest_moved_pct >= 0 && steadiest_moved_pct < moved_pct ? AfterAttempt::kSteadiest
                                                                     : AfterAttempt::kKeep;
}

double speed_drift_pct(const Calibration& c) {
  return c.peak_gemm_start_flops > 0 && c.peak_gemm_end_flops > 0
             ? (c.peak_gemm_end_flops - c.peak_gemm_start_flops) / c.peak_gemm_start_flops * 100
             : 0.0;
}

double small_gemm_drift_pct(const Calibration& c) {
  return c.small_gemm_start_s > 0 && c.small_gemm_end_s > 0
             ? (c.small_gemm_start_s / c.small_gemm_end_s - 1) * 100
             : 0.0;
}

double small_gemm_seconds(Backend& be, const std::array<int, 3>& shape) {
  const int rows = shape[0], k = shape[1],
            n = shape[2];  // named copies: clang 14's lambdas cannot capture bindings
  auto in = random_tensor(be, static_cast<std::size_t>(rows) * k, 5),
       w = random_tensor(be, static_cast<std::size_t>(k) * n, 6);
  DeviceBuffer out = filled(be, static_cast<std::size_t>(rows) * n);
  return time_call(be, [&] { be.gemm_forward(out.data(), in.data(), w.data(), rows, k, n); });
}

double peak_gemm_seconds(Backend& be, int n) {
  const std::size_t nn = static_cast<std::size_t>(n) * n;
  auto a = random_tensor(be, nn, 1), b = random_tensor(be, nn, 2);
  DeviceBuffer out = filled(be, nn);
  return best_gemm_call_s(be, out.data(), a.data(), b.data(), n);
}

std::optional<CalibratedPeak> calibrated_peak(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  const auto notes = j.find("notes");
  if (notes == j.end() || !notes->is_object() || !notes->contains("peak_gemm")) return std::nullopt;
  const nlohmann::json& p = (*notes)["peak_gemm"];
  if (!p.is_object() || !p.value("n", nlohmann::json()).is_number_integer() ||
      !p.value("flops_per_s", nlohmann::json()).is_number() ||
      !p.value("backend", nlohmann::json()).is_string())
    return std::nullopt;
  CalibratedPeak c{p["n"].get<int>(), p["backend"].get<std::string>(), p["flops_per_s"].get<double>()};
  const auto rate = [&p](const char* key) {
    const nlohmann::json v = p.value(key, nlohmann::json());
    return v.is_number() && v.get<double>() > 0 ? v.get<double>() : 0.0;
  };
  c.start_flops_per_s = rate("start_flops_per_s");
  c.end_flops_per_s = rate("end_flops_per_s");
  if (const auto small = p.find("small"); small != p.end() && small->is_object()) {
    const nlohmann::json shape = small->value("shape", nlohmann::json());
    const nlohmann::json seconds = small->value("seconds", nlohmann::json());
    const auto dimension = [](const nlohmann::json& v) {
      return v.is_number_integer() && v.get<int>() > 0 && v.get<int>() <= 65536;
    };
    if (shape.is_array() && shape.size() == 3 && std::all_of(shape.begin(), shape.end(), dimension) &&
        seconds.is_number() && seconds.get<double>() > 0) {
      c.small = {shape[0].get<int>(), shape[1].get<int>(), shape[2].get<int>()};
      c.small_s = seconds.get<double>();
    }
  }
  if (c.n <= 0 || c.n > 16384 || !(c.flops_per_s > 0)) return std::nullopt;
  return c;
}

void set_precision_peaks(DeviceSpec& d, double fp32_peak,
                         const std::vector<std::pair<Precision, double>>& measured) {
  for (DType t : {DType::kFp32, DType::kTf32, DType::kBf16, DType::kFp16})
    if (d.peak(t) > 0 || t == DType::kFp32) d.peak_flops[static_cast<int>(t)] = fp32_peak;
  for (const auto& [p, rate] : measured) {
    if (p == Precision::kBf16) d.peak_flops[static_cast<int>(DType::kBf16)] = rate;
    if (p == Precision::kFp16)
      for (DType t : {DType::kFp16, DType::kTf32}) d.peak_flops[static_cast<int>(t)] = rate;
  }
}

CollectiveRates fit_collective_rates(std::vector<Measurement>& pts, const std::string& kind, CollectiveOp op,
                                     int ranks, double small_below, LineFit& line) {
  line = {};
  const std::vector<Measurement*> sel = fitted_points(pts, kind);
  if (sel.size() < 4) return {};
  // Its own protocol split, found as the all-reduce's is; where it finds none, the link's split
  // is tried (the collective's own latency below it).
  line = fit_protocols(pts, kind);
  if (line.small_below <= 0 && small_below > 0) {
    const LineFit split = fit_split(sel, small_below);
    if (split.slope > 0 && split.intercept_s >= 0 && split.small_intercept_s >= 0 &&
        split.rms_rel_error < line.rms_rel_error)
      line = split;
  }
  if (line.slope <= 0) return {};
  for (Measurement* m : sel) m->fitted_s = line.at(m->work);
  const double steps = collective_latency_steps(op, ranks);
  CollectiveRates r;
  r.bandwidth = collective_bus_factor(op, ranks) / line.slope;
  r.latency_s = line.intercept_s / steps;
  if (line.small_below > 0) {
    r.small_message_latency_s = line.small_intercept_s / steps;
    if (line.small_below != small_below) r.small_message_bytes = line.small_below;
  } else if (small_below > 0) {
    r.small_message_latency_s = r.latency_s;  // one line: the same latency below the link's split
  }
  return r;
}

LineFit measure_host_copies(Backend& be, const std::vector<std::size_t>& sizes,
                            std::vector<Measurement>& pts) {
  if (be.host_memory()) return {};
  for (std::size_t bytes : sizes) {
    const std::size_t n = bytes / sizeof(float);
    std::vector<float> host(n, 0.5f);
    DeviceBuffer dev = filled(be, n);
    pts.push_back({"host_copy", "upload " + size_label(static_cast<double>(bytes)),
                   static_cast<double>(bytes),
                   time_call(be, [&] { be.upload(dev.data(), host.data(), n); })});
    pts.push_back({"host_copy", "download " + size_label(static_cast<double>(bytes)),
                   static_cast<double>(bytes),
                   time_call(be, [&] { be.download(host.data(), dev.data(), n); })});
  }
  return fit(pts, "host_copy");
}

std::string size_label(double bytes) {
  if (bytes >= 1 << 20) return fmt::format("{:g} MiB", bytes / (1 << 20));
  if (bytes >= 1 << 10) return fmt::format("{:g} KiB", bytes / (1 << 10));
  return fmt::format("{:g} B", bytes);
}

Result<Calibration> calibrate_cpu(const ClusterSpec& base, Comm& world,
                                  const std::function<void(const std::string&)>& progress,
                                  const CalibrateOptions& options) {
  auto be = make_cpu_backend();
  return calibrate(base, world, *be, progress, options);
}

namespace {

using ProgressFn = std::function<void(const std::string&)>;

// The number of points of `kind`.
std::ptrdiff_t count_kind(const std::vector<Measurement>& pts, const std::string& kind) {
  return std::count_if(pts.begin(), pts.end(), [&](const Measurement& m) { return m.kind == kind; });
}

// The executor's own cost per op (dispatch, buffers, timing): a training step of a model so small
// that its kernels take next to nothing, divided by its op count; timed before the kernels and
// again at the end. The trainer keeps pointers to the workload and the communicator, so the probe
// lives on the heap and never moves.
struct ExecutorProbe {
  std::optional<Workload> workload;
  Comm comm;
  std::unique_ptr<Trainer> trainer;
  std::size_t ops = 0;
  double step_s = 1e300;  // the fastest step timed

  double time_step(Backend& be) {
    return time_call(
        be, [&] { (void)trainer->step(); }, 0.2);
  }
};

Result<std::unique_ptr<ExecutorProbe>> start_executor_probe(const ClusterSpec& base, Backend& be) {
  ModelSpec micro;
  micro.name = "calibrate-micro";
  micro.layers = 2;
  micro.hidden = 8;
  micro.heads = 2;
  micro.kv_heads = 2;
  micro.head_dim = 4;
  micro.ffn_hidden = 16;
  micro.mlp = MlpKind::kSwiglu;
  micro.norm = NormKind::kRmsNorm;
  micro.vocab = 16;
  micro.seq_len = 4;
  Plan plan;
  plan.global_batch = 4;
  plan.precision = Precision::kFp32;
  ClusterSpec one = base;
  FS_RETURN_IF_ERROR(resize_cluster(one, 1, "calibrate"));
  FS_ASSIGN_OR_RETURN(auto w, lower(micro, one, plan));
  auto probe = std::make_unique<ExecutorProbe>();
  probe->workload.emplace(std::move(w));
  RunOptions ro;
  ro.record_ops = true;  // as `foresight run` does by default (its per-op times; 2 clock reads per op)
  FS_ASSIGN_OR_RETURN(std::unique_ptr<Backend> own, be.another());
  FS_ASSIGN_OR_RETURN(probe->trainer, Trainer::create(*probe->workload, probe->comm, ro, std::move(own)));
  probe->ops = probe->workload->op_count();
  probe->step_s = probe->time_step(be);
  return probe;
}

// A new calibration of `be` over `world`, before anything is measured: the base's device and
// fabric, and the sizes the microbenchmarks run at.
Calibration start_calibration(const ClusterSpec& base, const Comm& world, const Backend& be, const Sizes& z) {
  Calibration c;
  c.device = base.node.accelerator();
  c.fabric = base.node.fabric;
  c.ranks = world.size();
  c.backend = be.name();
  // The small GEMM: the sweep's first shape (the CPU's 32 x 64 x 128, one of the tiny model's).
  c.small_gemm = {z.rows.front(), z.kn.front().first, z.kn.front().second};
  c.caches = z.caches;
  c.memory_footprint = z.memory_footprint;
  c.optimizer_footprint = z.optimizer_footprint;
  c.activation_footprint = z.activation_footprint;
  return c;
}

// Sustained peak: a peak_n^3 GEMM, the best of at least three calls and of as many as fit in a
// quarter of a second (at most 20): on a shared machine a slow spell of tens of milliseconds can
// halve the best of three. Returns the fp32 call's seconds; an attempt's first pass also notes the
// machine's speed at its start. The backend's other GEMM precisions (a GPU's tensor cores) run the
// same GEMM, so that a bf16 plan is not predicted at the fp32 rate; the sweep stays in fp32.
double measure_peak(Calibration& c, Backend& be, const Sizes& z, bool first_pass) {
  const int n = z.peak_n;
  auto a = random_tensor(be, static_cast<std::size_t>(n) * n, 1),
       b = random_tensor(be, static_cast<std::size_t>(n) * n, 2);
  DeviceBuffer out = filled(be, static_cast<std::size_t>(n) * n);
  const auto best_call_s = [&] { return best_gemm_call_s(be, out.data(), a.data(), b.data(), n); };
  const double peak_s = best_call_s();
  if (first_pass) {
    c.peak_gemm_start_flops = 2.0 * n * n * n / peak_s;
    c.small_gemm_start_s = small_gemm_seconds(be, c.small_gemm);
  }
  for (Precision p : be.gemm_precisions()) {
    be.set_gemm_precision(p);
    const double rate = 2.0 * n * n * n / best_call_s();
    auto it = std::find_if(c.precision_peaks.begin(), c.precision_peaks.end(),
                           [p](const auto& e) { return e.first == p; });
    if (it == c.precision_peaks.end())
      c.precision_peaks.emplace_back(p, rate);
    else
      it->second = std::max(it->second, rate);
  }
  be.set_gemm_precision(Precision::kFp32);
  return peak_s;
}

// The kernels' microbenchmarks, one pass over every point.
//
// GEMMs at the shapes the runtime runs (tokens x in x out), forward and backward, and streaming
// kernels with the byte counts the model uses (read + write of each tensor; an elementwise
// backward moves twice its forward's bytes). In a training step a kernel meets operands that other
// kernels used since (weights, their gradients, saved activations), so the calls cycle through
// copies of those instead of hitting the same hot matrices; a tensor the kernel just before wrote
// (a forward's input, a backward's output gradient) stays hot, and outputs are allocated per call,
// as the executor does (a forward's from an OutputPool: new activations). How far the copies span
// decides what the caches hold, so each kernel is measured over each cache level's span (the
// profile's cache rates, for steps whose working set fits the level; only the shapes of which two
// copies fit the span) and over 256 MiB (its memory rates), which passes the last-level cache the
// machine gives a core whatever it reports. Measured over a smaller span (or with a hot output),
// the memory GEMMs ran faster than `foresight run` runs them.
//
// Every rank times the same point at the same time (a barrier before each), so that a rate
// measured with all ranks at it is that: unsynchronized, the ranks drift apart, one rank's AdamW
// meeting the other's GEMMs or nothing at all, and the memory rates scatter from one calibration
// to the next. Off for the points rank 0 measures alone.
class KernelBench {
 public:
  KernelBench(Backend& be, Comm& world, const Sizes& z, std::vector<Measurement>& pts)
      : be_(be), world_(world), z_(z), pts_(pts), together_(world.size() > 1) {}

  // Every kernel point once, in the same order on every pass (the passes compare them by place).
  void measure_pass() {
    optimizer_points();
    cache_points();
    level(z_.memory_footprint, "gemm", "stream");
    // And AdamW over each cache level where two copies of two of the sizes fit (not a 2 MiB L2's
    // 1 MiB span): a plan whose whole state fits a level runs AdamW there (cluster_for_plan).
    for (const CacheFit& cache : z_.caches)
      if (std::count_if(z_.adam_cache.begin(), z_.adam_cache.end(),
                        [&](std::size_t n) { return fits_twice(cache.footprint, n); }) >= 2)
        adamw(cache.footprint, "optimizer-" + cache.name, z_.adam_cache, true);
    // The node's cores share its memory: above, every rank measured at once, as in a plan that runs
    // them all; a plan that runs fewer finds more bandwidth each. So rank 0 measures the memory
    // level's GEMMs and streaming kernels again while the other ranks wait, as AdamW
    // (DeviceSpec::shared_memory; `foresight calibrate` under mpirun prints both rates).
    on_rank0_alone([&] { level(z_.memory_footprint, "gemm" + alone(), "stream" + alone()); });
    keep_faster(pts_, [&] { optimizer_points(); });
    attention_points();
    keep_faster(pts_, [&] { cache_points(); });
    keep_faster(pts_, [&] { optimizer_points(); });
  }

 private:
  static std::string alone() { return std::string(kAloneSuffix); }
  // Two copies of n parameters' state (parameters, gradients, two moments) fit the span.
  static bool fits_twice(std::size_t footprint, std::size_t n) { return footprint / (16 * n) >= 2; }

  template <class F>
  double timed(F&& f) {
    if (together_) world_.barrier();
    return time_call(be_, f);
  }

  // `f` on rank 0 alone while the other ranks wait at a barrier (nothing with one rank).
  template <class F>
  void on_rank0_alone(F&& f) {
    if (world_.size() == 1) return;
    world_.barrier();
    together_ = false;
    if (world_.rank() == 0) f();
    together_ = true;
    world_.barrier();
  }

  // A level's GEMMs and streaming kernels, their operands cycled over `footprint`.
  void level(std::size_t footprint, const std::string& gemm_kind, const std::string& stream_kind) {
    const bool cache_level = footprint < z_.memory_footprint;
    gemms(footprint, gemm_kind, cache_level);
    streams(footprint, stream_kind, cache_level);
  }

  void gemms(std::size_t footprint, const std::string& kind, bool cache_level) {
    std::vector<std::pair<int, int>> shapes = z_.kn;
    if (cache_level) shapes.insert(shapes.end(), z_.kn_cache.begin(), z_.kn_cache.end());
    for (int rows : z_.rows)
      for (const auto& kn : shapes) {
        const int k = kn.first,
                  n = kn.second;  // named copies: lambdas cannot capture structured bindings in clang 14
        const std::size_t in_n = static_cast<std::size_t>(rows) * k, w_n = static_cast<std::size_t>(k) * n,
                          out_n = static_cast<std::size_t>(rows) * n;
        if (cache_level && footprint / (4 * (in_n + 2 * w_n + out_n)) < 2) continue;
        const std::size_t copies = std::max<std::size_t>(2, footprint / (4 * (in_n + 2 * w_n + out_n)));
        // Cycled: the weights and their gradients, the saved inputs the backward reads, the
        // forward's outputs. Hot: the forward's input and the backward's output gradient, each
        // written by the kernel just before.
        auto in = random_tensor(be_, in_n * copies, 3), w = random_tensor(be_, w_n * copies, 4),
             in_hot = random_tensor(be_, in_n, 3), dout_hot = random_tensor(be_, out_n, 5);
        DeviceBuffer dw = filled(be_, w_n * copies);
        OutputPool outs(be_, copies, out_n);
        std::size_t i = 0;
        const double flops = 2.0 * rows * k * n;
        const double weight_bytes = 4.0 * static_cast<double>(w_n);
        pts_.push_back({kind, fmt::format("fwd {}x{}x{}", rows, k, n), flops, timed([&] {
                          const std::size_t at = i++ % copies;
                          be_.gemm_forward(outs.next(), in_hot.data(), w.data() + at * w_n, rows, k, n);
                        })});
        pts_.back().weight_bytes = weight_bytes;
        pts_.push_back({kind, fmt::format("bwd {}x{}x{}", rows, k, n), 2 * flops, timed([&] {
                          const std::size_t at = i++ % copies;
                          DeviceBuffer din = filled(be_, in_n);
                          be_.gemm_backward(din.data(), dw.data() + at * w_n, dout_hot.data(),
                                            in.data() + at * in_n, w.data() + at * w_n, rows, k, n);
                        })});
        pts_.back().weight_bytes = weight_bytes;
        pts_.back().backward = true;
      }
  }

  // As for the GEMMs: the forwards read tensors just written and write new activations; the
  // backwards read the gradient just written (hot) and a saved activation (cycled).
  void streams(std::size_t footprint, const std::string& kind, bool cache_level) {
    for (std::size_t n : z_.stream) {
      if (cache_level && footprint / (2 * 4 * n) < 2) continue;
      const std::size_t copies = std::max<std::size_t>(2, footprint / (2 * 4 * n));
      auto saved = random_tensor(be_, n * copies, 6), a = random_tensor(be_, n, 6),
           b = random_tensor(be_, n, 7), w = random_tensor(be_, 256, 8);
      OutputPool outs(be_, copies, n), halves(be_, copies, n / 2);  // the forwards' outputs
      const int rows = static_cast<int>(n / 256);
      std::size_t i = 0;
      auto next = [&] { return (i++ % copies) * n; };  // the next copy's offset
      pts_.push_back({kind, "residual " + size_label(4.0 * n), 12.0 * n,
                      timed([&] { be_.add(outs.next(), a.data(), b.data(), n); })});
      pts_.push_back({kind, "rmsnorm " + size_label(4.0 * n), 8.0 * n, timed([&] {
                        DeviceBuffer rstd = filled(be_, static_cast<std::size_t>(rows));
                        be_.rmsnorm_forward(outs.next(), rstd.data(), a.data(), w.data(), rows, 256, 1e-5f,
                                            true);
                      })});
      pts_.push_back(
          {kind, "swiglu " + size_label(4.0 * n), 6.0 * n, timed([&] {  // reads gate|up (n), writes n/2
             be_.swiglu_forward(halves.next(), a.data(), rows, 128, true);
           })});
      pts_.back().elements = 0.5 * static_cast<double>(n);  // an exponential per output
      pts_.push_back({kind, "rmsnorm bwd " + size_label(4.0 * n), 16.0 * n, timed([&] {
                        const std::size_t at = next();
                        DeviceBuffer dx = filled(be_, n), dw = filled(be_, 256),
                                     rstd = filled(be_, static_cast<std::size_t>(rows), 1.0f);
                        be_.rmsnorm_backward(dx.data(), dw.data(), b.data(), saved.data() + at, w.data(),
                                             rstd.data(), rows, 256, true);
                      })});
      pts_.push_back({kind, "swiglu bwd " + size_label(4.0 * n), 12.0 * n, timed([&] {
                        const std::size_t at = next();
                        DeviceBuffer dgu = filled(be_, n);
                        be_.swiglu_backward(dgu.data(), saved.data() + at, b.data(), rows, 128, true);
                      })});
      pts_.back().elements = 0.5 * static_cast<double>(n);  // the sigmoid again
    }
  }

  // The optimizer streams every parameter with its moments, out of cache (see optimizer_footprint):
  // the model counts kAdamBytesPerParam bytes per parameter.
  void adamw(std::size_t footprint, const std::string& kind, const std::vector<std::size_t>& sizes,
             bool cache_level) {
    for (std::size_t n : sizes) {
      if (cache_level && !fits_twice(footprint, n)) continue;  // a cache level: two copies fit
      const std::size_t copies = std::max<std::size_t>(2, footprint / (16 * n));
      auto p = random_tensor(be_, n * copies, 10), g = random_tensor(be_, n * copies, 11);
      DeviceBuffer m = filled(be_, n * copies), v = filled(be_, n * copies);
      int step = 0;
      pts_.push_back(
          {kind, "adamw " + size_label(4.0 * n) + " of parameters", kAdamBytesPerParam * n, timed([&] {
             const std::size_t at = (static_cast<std::size_t>(step) % copies) * n;
             be_.adamw(p.data() + at, m.data() + at, v.data() + at, g.data() + at, n, kernels::AdamWConfig{},
                       ++step, 1.0f);
           })});
    }
  }

  // AdamW over memory, all ranks at once and, under mpirun, rank 0 alone. Its few points take a
  // fraction of a second, and the memory bandwidth of a shared machine dips for seconds at a time:
  // they are measured at the start, the middle and the end of the kernels, and each keeps its
  // fastest.
  void optimizer_points() {
    adamw(z_.optimizer_footprint, "optimizer", z_.adam, false);
    on_rank0_alone([&] { adamw(z_.optimizer_footprint, "optimizer" + alone(), z_.adam, false); });
  }

  // The cache levels' kernels. Their operands cycle through the last-level cache, which a VM
  // shares with other tenants' cores, so a level's GEMMs can run slow while the peak GEMM keeps
  // its speed: measured again after the attention, each point keeps its faster time.
  void cache_points() {
    for (const CacheFit& cache : z_.caches)
      level(cache.footprint, "gemm-" + cache.name, "stream-" + cache.name);
  }

  // Attention (the fused path). As in a step: the forward reads the q, k, v just written and writes
  // its output and probabilities as new activations; the backward reads the output gradient just
  // written, and the saved q, k, v and probabilities after other activations have passed. The calls
  // cycle through copies of the saved tensors over the activation span (cycled over 256 MiB
  // instead, the small model's attention is predicted too long); each pairs the forward of one copy
  // with the backward of the copy half a cycle behind (its forward ran untimed first).
  void attention_points() {
    for (int seq : z_.seqs)
      for (const auto& shape : z_.heads) {
        const int q = std::get<0>(shape), kv = std::get<1>(shape), d = std::get<2>(shape);
        const kernels::AttentionShape s{1, seq, q, kv, d};
        const std::size_t qkv_n = s.tokens() * s.qkv_width(), out_n = s.tokens() * q * d,
                          probs_n = s.score_elems();
        const double core = 2.0 * seq * seq * (2.0 * q * d);
        const std::size_t copies =
            std::max<std::size_t>(2, z_.activation_footprint / (4 * (qkv_n + out_n + probs_n)));
        auto qkv_hot = random_tensor(be_, qkv_n, 9), dout = random_tensor(be_, out_n, 12),
             saved_qkv = random_tensor(be_, qkv_n * copies, 13);
        OutputPool outs(be_, copies, out_n), probs(be_, copies, probs_n);
        for (std::size_t copy = 0; copy < copies; ++copy)
          be_.attention_forward(outs.at(copy), probs.at(copy), saved_qkv.data() + copy * qkv_n, s);
        std::size_t i = 0;
        // Forward and backward together: the model times the backward as 2.5 forwards (flash
        // attention recomputes the scores); this backend keeps the probabilities instead, so only
        // the pair's total is comparable: work = (1 + 2.5) x half the full-square FLOPs.
        pts_.push_back({"attention", fmt::format("fwd+bwd s={} heads={}/{} d={}", seq, q, kv, d),
                        3.5 * 0.5 * core, timed([&] {
                          const std::size_t f = i++ % copies, b = (f + copies / 2) % copies;
                          be_.attention_forward(outs.renew(f), probs.renew(f), qkv_hot.data(), s);
                          DeviceBuffer dqkv = filled(be_, qkv_n),
                                       scratch = filled(be_, be_.attention_scratch(s));
                          be_.attention_backward(dqkv.data(), scratch.data(), dout.data(), probs.at(b),
                                                 saved_qkv.data() + b * qkv_n, s);
                        })});
        pts_.back().elements = 0.5 * q * static_cast<double>(seq) * seq;  // causal: the lower half
        pts_.back().heads = q;
        // The forward alone, as in the pair: the pair's split into forward and backward
        // (DeviceSpec::attention_backward_ratio; not fitted, its model time is the pair's share).
        pts_.push_back(
            {"attn_fwd", fmt::format("fwd s={} heads={}/{} d={}", seq, q, kv, d), 0.5 * core, timed([&] {
               const std::size_t f = i++ % copies;
               be_.attention_forward(outs.renew(f), probs.renew(f), qkv_hot.data(), s);
             })});
        pts_.back().in_fit = false;
      }
  }

  Backend& be_;
  Comm& world_;
  const Sizes& z_;
  std::vector<Measurement>& pts_;
  bool together_;
};

// An attempt's kernel measurements, kept while retries look for a steadier one.
struct Attempt {
  int index = 0;
  double moved = 0;
  std::vector<Measurement> pts;
  std::vector<std::pair<Precision, double>> precision_peaks;
  double best_peak_s = 0, start_flops = 0, end_flops = 0, small_start_s = 0, small_end_s = 0;
};

// The attempts so far: the current one's index, and the steadiest one that was retried.
struct Attempts {
  int current = 0;
  std::optional<Attempt> steadiest;
};

// The end of an attempt's last pass: the peak GEMM again, and whether the machine kept its speed
// while the kernels were measured. Returns true when the kernels are to be measured again; where
// the retries are spent, the steadiest attempt's measurements replace the last one's.
bool finish_attempt(Calibration& c, Comm& world, Backend& be, const Sizes& z, const ProgressFn& progress,
                    const CalibrateOptions& options, Attempts& attempts, double& best_peak_s) {
  const double n = z.peak_n, end_s = peak_gemm_seconds(be, z.peak_n);
  c.peak_gemm_end_flops = 2.0 * n * n * n / end_s;
  c.small_gemm_end_s = small_gemm_seconds(be, c.small_gemm);
  best_peak_s = std::min(best_peak_s, end_s);
  // Either GEMM: the small kernels' speed can move apart from the peak GEMM's (small kernels
  // running slow while the peak GEMM keeps its speed).
  double moved = std::max(std::fabs(speed_drift_pct(c)), std::fabs(small_gemm_drift_pct(c)));
  world.all_reduce_max(&moved, 1);  // every rank decides alike
  std::optional<Attempt>& steadiest = attempts.steadiest;
  const AfterAttempt next =
      after_attempt(moved, attempts.current, options.steady_retries, steadiest ? steadiest->moved : -1.0);
  if (next == AfterAttempt::kRetry) {
    if (!steadiest || moved < steadiest->moved)
      steadiest = Attempt{attempts.current,
                          moved,
                          c.points,
                          c.precision_peaks,
                          best_peak_s,
                          c.peak_gemm_start_flops,
                          c.peak_gemm_end_flops,
                          c.small_gemm_start_s,
                          c.small_gemm_end_s};
    ++attempts.current;
    if (progress)
      progress(fmt::format(
          "kernels: the machine's speed moved by {:.1f}% while they were measured; measuring them "
          "again (retry {} of {})",
          moved, attempts.current, options.steady_retries));
    return true;
  }
  if (next == AfterAttempt::kSteadiest) {
    if (progress)
      progress(fmt::format(
          "kernels: the machine's speed moved by {:.1f}% this time too; keeping the steadiest "
          "measurement ({:s}, {:.1f}%)",
          moved, steadiest->index == 0 ? std::string("the first") : fmt::format("retry {}", steadiest->index),
          steadiest->moved));
    c.points = std::move(steadiest->pts);
    c.precision_peaks = std::move(steadiest->precision_peaks);
    best_peak_s = steadiest->best_peak_s;
    c.peak_gemm_start_flops = steadiest->start_flops;
    c.peak_gemm_end_flops = steadiest->end_flops;
    c.small_gemm_start_s = steadiest->small_start_s;
    c.small_gemm_end_s = steadiest->small_end_s;
  }
  return false;
}

// The kernels, measured in `passes` rounds; each point keeps its fastest round. A shared VM runs
// slow for tens of seconds at a time: a point measured once may land in such a spell, and its rate
// would describe the spell, not the machine. With options.steady_retries, kernels measured while
// the machine's speed moved past kSpeedDriftWarnPct (speed_drift_pct or small_gemm_drift_pct, on
// any rank) are measured again, passes and all; where every attempt moved past it, the steadiest
// one stands, not merely the last. Returns the best peak GEMM call's seconds.
Result<double> measure_kernels(Calibration& c, Comm& world, Backend& be, const Sizes& z,
                               const ProgressFn& progress, const CalibrateOptions& options) {
  auto& pts = c.points;
  KernelBench bench(be, world, z, pts);
  double best_peak_s = 1e300;
  const int passes = std::max(1, options.passes);
  Attempts attempts;
  for (int pass = 0; pass < passes; ++pass) {
    if (pass == 0) {  // an attempt starts afresh
      pts.clear();
      c.precision_peaks.clear();
      best_peak_s = 1e300;
    }
    std::vector<Measurement> earlier;
    earlier.swap(pts);
    best_peak_s = std::min(best_peak_s, measure_peak(c, be, z, pass == 0));
    bench.measure_pass();
    if (pass > 0) {
      if (earlier.size() != pts.size()) return Error("calibration: the passes measured different points");
      for (std::size_t i = 0; i < pts.size(); ++i)
        pts[i].seconds = std::min(pts[i].seconds, earlier[i].seconds);
    }
    if (progress && passes > 1) progress(fmt::format("kernels: pass {} of {} measured", pass + 1, passes));
    if (pass + 1 == passes && finish_attempt(c, world, be, z, progress, options, attempts, best_peak_s))
      pass = -1;
  }
  return best_peak_s;
}

// The kernel lines: each cache level from its own GEMMs and streaming kernels, the memory level,
// and rank 0's alone. Where too few shapes fit a level (a GPU's 16 MiB holds two copies of none of
// its GEMM shapes' operands) it is left out, and plans take the memory rates.
void fit_kernel_lines(Calibration& c, const ProgressFn& progress) {
  auto& pts = c.points;
  const auto count = [&](const std::string& kind) { return count_kind(pts, kind); };
  std::erase_if(c.caches, [&](const CacheFit& level) {
    const bool few = count("gemm-" + level.name) < 6 || count("stream-" + level.name) < 5;
    if (few && progress)
      progress(
          fmt::format("cache level of {}: too few shapes fit it ({} GEMMs, {} streaming kernels); left out",
                      size_label(static_cast<double>(level.bytes)), count("gemm-" + level.name),
                      count("stream-" + level.name)));
    return few;
  });
  for (CacheFit& level : c.caches) {
    level.gemm = fit_gemm(pts, "gemm-" + level.name);
    level.stream = fit_with_elements(pts, "stream-" + level.name);
    if (count("optimizer-" + level.name) >= 2) level.optimizer = fit(pts, "optimizer-" + level.name);
  }
  c.gemm = fit_gemm(pts, "gemm");
  c.stream = fit_with_elements(pts, "stream");
  c.optimizer = fit(pts, "optimizer");
  const std::string alone_suffix(kAloneSuffix);
  if (count("stream" + alone_suffix) > 0) {  // rank 0's (the others have none)
    c.alone_gemm = fit_gemm(pts, "gemm" + alone_suffix);
    c.alone_stream = fit_with_elements(pts, "stream" + alone_suffix);
    c.alone_optimizer = fit(pts, "optimizer" + alone_suffix);
  }
}

// The fp32 peak: the measured peak GEMM's, or the sweep's GEMMs' where they ran faster; the other
// precisions' peaks from their own GEMM. Reports them and how far the machine's speed moved.
void fit_peak(Calibration& c, const Backend& be, int peak_n, double best_peak_s, const ProgressFn& progress) {
  const int n = peak_n;
  c.peak_n = n;
  c.peak_gemm_flops = 2.0 * n * n * n / best_peak_s;
  std::vector<const LineFit*> fits{&c.gemm};
  for (const CacheFit& level : c.caches) fits.push_back(&level.gemm);
  const double peak = gemm_peak(c.peak_gemm_flops, c.points, fits);
  set_precision_peaks(c.device, peak, c.precision_peaks);
  if (!progress) return;
  std::string others;
  for (const auto& [p, rate] : c.precision_peaks)
    others += fmt::format("; {}: {:.1f} GFLOP/s", p == Precision::kFp16 ? "fp16 plans' (TF32)" : to_string(p),
                          rate / 1e9);
  progress(fmt::format(
      "peak: {}^3 GEMM at {:.1f} GFLOP/s{}{}", n, c.peak_gemm_flops / 1e9,
      c.precision_peaks.empty() ? fmt::format(" (the {} backend computes every precision in fp32)", be.name())
                                : " in fp32" + others,
      peak > c.peak_gemm_flops
          ? fmt::format("; the sweep's GEMMs reached {:.1f}, which is taken as the fp32 peak", peak / 1e9)
          : ""));
  const double drift = speed_drift_pct(c);
  const double small_drift = small_gemm_drift_pct(c);
  progress(fmt::format(
      "speed: the peak GEMM at {:.1f} GFLOP/s before the kernel measurements and {:.1f} after "
      "({:+.1f}%); "
      "the {}x{}x{} GEMM in {:.2f} us and {:.2f} us ({:+.1f}%){}",
      c.peak_gemm_start_flops / 1e9, c.peak_gemm_end_flops / 1e9, drift, c.small_gemm[0], c.small_gemm[1],
      c.small_gemm[2], c.small_gemm_start_s * 1e6, c.small_gemm_end_s * 1e6, small_drift,
      std::max(std::fabs(drift), std::fabs(small_drift)) > kSpeedDriftWarnPct
          ? fmt::format(
                "; WARNING: the machine's speed moved by more than {:g}% while it was measured, so "
                "the rates mix two speeds: calibrate again (--passes 2 keeps each point's faster pass)",
                kSpeedDriftWarnPct)
          : ""));
}

// The GEMM set-up time per call: the smallest shapes' fit is the cleanest.
const LineFit& gemm_setup_fit(const Calibration& c) {
  return c.caches.empty() ? c.gemm : c.caches.front().gemm;
}

// Each level's lines, and AdamW's.
void report_kernel_lines(const Calibration& c, const Sizes& z, const ProgressFn& progress) {
  if (!progress) return;
  const auto count = [&](const std::string& kind) { return count_kind(c.points, kind); };
  const std::string alone_suffix(kAloneSuffix);
  const auto level_lines = [&](const std::string& where, std::size_t span, const std::string& name,
                               const LineFit& gemm, const LineFit& stream) {
    progress(fmt::format(
        "{} ({} of operands): gemm {} points, {:.1f} GFLOP/s, weight passes {:.2f} / {:.2f} ns per "
        "weight byte forward / backward (rms fit error {:.1f}%); streaming {} points, {:.1f} GB/s "
        "and {:.2f} ns per exponential ({:.1f}%)",
        where, size_label(static_cast<double>(span)), count("gemm" + name), 1e-9 / gemm.slope,
        gemm.weight_fwd_s_per_byte * 1e9, gemm.weight_bwd_s_per_byte * 1e9, 100 * gemm.rms_rel_error,
        count("stream" + name), 1e-9 / stream.slope, 1e9 * stream.element_s, 100 * stream.rms_rel_error));
  };
  for (const CacheFit& level : c.caches)
    level_lines(fmt::format("cache level of {}", size_label(static_cast<double>(level.bytes))),
                level.footprint, "-" + level.name, level.gemm, level.stream);
  level_lines(c.ranks > 1 ? fmt::format("memory, all {} ranks at once", c.ranks) : std::string("memory"),
              z.memory_footprint, "", c.gemm, c.stream);
  if (c.alone_stream.slope > 0)
    level_lines(fmt::format("memory, rank 0 alone (the other {} waiting)", c.ranks - 1), z.memory_footprint,
                alone_suffix, c.alone_gemm, c.alone_stream);
  progress(
      fmt::format("gemm: {:.2f} us per call (the {} level's intercept); AdamW {:.1f} GB/s over {} ({:.1f}%)",
                  gemm_setup_fit(c).intercept_s * 1e6,
                  c.caches.empty() ? std::string("memory") : c.caches.front().name, 1e-9 / c.optimizer.slope,
                  size_label(static_cast<double>(z.optimizer_footprint)), 100 * c.optimizer.rms_rel_error));
  if (c.alone_optimizer.slope > 0)
    progress(fmt::format("AdamW over {} with rank 0 alone: {:.1f} GB/s ({:.1f}%)",
                         size_label(static_cast<double>(z.optimizer_footprint)),
                         1e-9 / c.alone_optimizer.slope, 100 * c.alone_optimizer.rms_rel_error));
  for (const CacheFit& level : c.caches)
    if (level.optimizer.slope > 0)
      progress(
          fmt::format("AdamW over {} (for plans whose whole state fits the level): {:.1f} GB/s ({:.1f}%)",
                      size_label(static_cast<double>(level.footprint)), 1e-9 / level.optimizer.slope,
                      100 * level.optimizer.rms_rel_error));
}

// The attention line, and the backward against the forward: whole calls over every shape (each
// pair followed by its forward).
void fit_attention_lines(Calibration& c, const ProgressFn& progress) {
  auto& pts = c.points;
  c.attention = fit_attention(pts, "attention");
  if (progress)
    progress(fmt::format(
        "attention: {:.1f} GFLOP/s of causal FLOPs, {:.2f} ns per causal score element and {:.2f} us per "
        "head (rms fit error {:.1f}%)",
        1e-9 / c.attention.slope, 1e9 * c.attention.element_s, 1e6 * c.attention.head_s,
        100 * c.attention.rms_rel_error));
  std::vector<std::pair<const Measurement*, Measurement*>> pairs;
  for (std::size_t i = 0; i + 1 < pts.size(); ++i)
    if (pts[i].kind == "attention" && pts[i + 1].kind == "attn_fwd") pairs.emplace_back(&pts[i], &pts[i + 1]);
  double pair = 0, fwd = 0;
  for (const auto& [both, alone] : pairs) {
    pair += both->seconds;
    fwd += alone->seconds;
  }
  c.attention_backward_ratio = fwd > 0 && pair > fwd ? pair / fwd - 1 : 0.0;
  if (c.attention_backward_ratio > 0)
    for (const auto& [both, alone] : pairs)
      alone->fitted_s = both->fitted_s / (1 + c.attention_backward_ratio);
  if (progress && c.attention_backward_ratio > 0)
    progress(fmt::format(
        "attention: the backward {:.2f}x the forward over the {} shapes (flash attention's: 2.5x)",
        c.attention_backward_ratio, count_kind(pts, "attention")));
}

// Host<->device copies (a device backend's: the profile's host link, which offload plans use).
void measure_host_link(Calibration& c, Backend& be, const Sizes& z, const ProgressFn& progress) {
  c.host_copy = measure_host_copies(be, z.host_copy, c.points);
  if (!progress) return;
  progress(c.host_copy.slope > 0
               ? fmt::format(
                     "host<->device copies: {:.2f} GB/s and {:.1f} us per copy, uploads and downloads {}-{} "
                     "from pageable host memory (rms fit error {:.1f}%)",
                     1e-9 / c.host_copy.slope, c.host_copy.intercept_s * 1e6,
                     size_label(static_cast<double>(z.host_copy.front())),
                     size_label(static_cast<double>(z.host_copy.back())), 100 * c.host_copy.rms_rel_error)
               : fmt::format("host<->device copies: none (the {} backend's tensors are in host memory)",
                             be.name()));
}

// The collectives' microbenchmarks at one size over every rank: each rank's median over up to 12
// repetitions (at least 3, about 0.3 s per size), averaged over the ranks.
//
// Up to 64 KiB a sample times kCollectiveBackToBack calls in a row, as nccl-tests and the OSU
// benchmarks do: timed one by one after a barrier, a call also counts the barrier's exit skew (one
// rank leaves it microseconds after the other and the early one waits inside the call), while in a
// step the previous collective has lined the ranks up.
//
// In a step a collective follows other work, and over shared memory that costs (the tiny and small
// models' tp=2 sp plans' all-gathers and reduce-scatters run slower than back to back: `foresight
// run --trace` shows it). So a host backend's collectives up to kInStepUpTo are measured again as
// a step calls them (kInStepSuffix): before each call (untimed) each rank writes as much other data
// as its first cache level holds and rewrites the call's input, as the op before it would; each
// call is timed alone. These are the measured times plans take.
//
// A host backend's collectives copy through the CPUs' caches: for the cold variants each rank
// first writes the optimizer's span of other data (untimed), which evicts the buffer, as the
// backward's other data evicts the gradients before their reduction.
class CollectiveBench {
 public:
  CollectiveBench(Calibration& c, Comm& world, Backend& be, const Sizes& z, GroupComm& group)
      : c_(c),
        world_(world),
        be_(be),
        group_(group),
        n_(world.size()),
        ping_pong_(be.host_addressable()),
        evictor_(ping_pong_ ? z.optimizer_footprint / sizeof(float) : 0),
        step_work_(ping_pong_ ? step_bytes(c) / sizeof(float) : 0) {}

  // Each collective back to back, then as a step calls it and with its data evicted where those
  // apply; ping-pong between ranks 0 and 1 (half the round trip is one send) where the buffers are
  // host-addressable (MPI): a device backend's transfers are measured by the collectives alone.
  void measure_size(std::size_t bytes) {
    const std::size_t elems = bytes / sizeof(float);
    const auto n = static_cast<std::size_t>(n_);
    DeviceBuffer buf = filled(be_, elems, 1.0f), block = filled(be_, elems / n);
    const bool cold = ping_pong_ && bytes >= kColdCollectiveFrom && bytes <= kFitCollective;
    const bool in_step = ping_pong_ && bytes <= kInStepUpTo;
    const auto settings = [&](CollectiveOp op, auto&& call) {
      const std::string kind(to_string(op));
      timed(kind, bytes, call);
      if (in_step) timed(kind + kInStepSuffix, bytes, call, Setting::kInStep, &buf);
      if (cold && op != CollectiveOp::kAllGather) timed(kind + "_cold", bytes, call, Setting::kCold);
    };
    settings(CollectiveOp::kAllReduce, [&] { group_.all_reduce(buf.data(), elems); });
    settings(CollectiveOp::kAllGather, [&] { group_.all_gather(buf.data(), elems - elems % n); });
    settings(CollectiveOp::kReduceScatter,
             [&] { group_.reduce_scatter(buf.data(), block.data(), elems - elems % n); });
    if (!ping_pong_) return;
    const auto ping_pong_call = [&] {
      if (world_.rank() == 0) {
        world_.send_blocking(buf.data(), elems, 1, 7);
        world_.recv(buf.data(), elems, 1, 8);
      } else if (world_.rank() == 1) {
        world_.recv(buf.data(), elems, 0, 7);
        world_.send_blocking(buf.data(), elems, 0, 8);
      }
    };
    timed("send_recv", bytes, ping_pong_call);
    c_.points.back().seconds /= 2;  // the send/recv just measured
    if (in_step) {
      timed(std::string("send_recv") + kInStepSuffix, bytes, ping_pong_call, Setting::kInStep, &buf);
      c_.points.back().seconds /= 2;
    }
  }

 private:
  enum class Setting { kHot, kInStep, kCold };

  static std::size_t step_bytes(const Calibration& c) {
    return c.caches.empty() ? std::size_t{1} << 20 : c.caches.front().bytes;
  }

  // One point: calls per sample, small ones many, an in-step sample of a larger size a few (each
  // call is timed alone, after its untimed work); one where the data is evicted before the sample.
  template <class Op>
  void timed(const std::string& kind, std::size_t bytes, Op&& op, Setting setting = Setting::kHot,
             DeviceBuffer* input = nullptr) {
    int reps = 1;
    if (setting != Setting::kCold)
      reps = bytes <= (64u << 10) ? kCollectiveBackToBack : setting == Setting::kInStep ? 4 : 1;
    std::vector<double> samples;
    double spent = 0;
    while (samples.size() < 3 || (samples.size() < 12 && spent < 0.3)) {
      if (setting == Setting::kCold) {
        for (float& x : evictor_) x += 1.0f;
        evict_sink_ = evict_sink_ + evictor_[samples.size() % evictor_.size()];
      }
      be_.synchronize();
      world_.barrier();
      double elapsed = 0;
      if (setting == Setting::kInStep) {
        for (int r = 0; r < reps; ++r) {
          for (float& x : step_work_) x += 1.0f;
          if (input) std::fill(input->data(), input->data() + input->size(), 1.0f);
          const auto t0 = Clock::now();
          op();
          elapsed += std::chrono::duration<double>(Clock::now() - t0).count();
        }
        evict_sink_ = evict_sink_ + step_work_[samples.size() % step_work_.size()];
      } else {
        const auto t0 = Clock::now();
        for (int r = 0; r < reps; ++r) op();
        be_.synchronize();
        elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
      }
      samples.push_back(elapsed / reps);
      spent += elapsed;
      double all = spent;  // every rank decides alike
      world_.all_reduce(&all, 1);
      spent = all / n_;
    }
    const std::size_t mid = samples.size() / 2;
    std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(mid), samples.end());
    double sum = samples[mid];
    world_.all_reduce(&sum, 1);
    Measurement m{kind, size_label(static_cast<double>(bytes)), static_cast<double>(bytes), sum / n_};
    m.in_fit = setting != Setting::kInStep && bytes <= kFitCollective;
    c_.points.push_back(m);
  }

  Calibration& c_;
  Comm& world_;
  Backend& be_;
  GroupComm& group_;
  const int n_;
  const bool ping_pong_;
  std::vector<float> evictor_, step_work_;
  volatile float evict_sink_ = 0;
};

// Collectives over every rank, 1 KiB to kMaxCollective in steps of 2 (nccl-tests' sizes: the full
// buffer; all-gather's output, reduce-scatter's input). Sizes double until kMaxCollective, or
// until the next size (about twice the last one's time) would take the collectives past
// kCollectiveBudget_s; the fitted sizes always run. Returns the largest size measured.
Result<std::size_t> measure_collectives(Calibration& c, Comm& world, Backend& be, const Sizes& z) {
  const int n = world.size();
  FS_ASSIGN_OR_RETURN(std::unique_ptr<GroupComm> group, be.make_comm(world));
  CollectiveBench bench(c, world, be, z, *group);
  const auto start = Clock::now();
  double last_size_s = 0;
  std::size_t largest = 0;
  for (std::size_t bytes = 1024; bytes <= kMaxCollective; bytes *= 2) {
    double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    world.all_reduce(&elapsed, 1);  // every rank decides alike
    elapsed /= n;
    if (bytes > kFitCollective && elapsed + 2 * last_size_s > kCollectiveBudget_s) break;
    const auto size_start = Clock::now();
    largest = bytes;
    bench.measure_size(bytes);
    last_size_s = std::chrono::duration<double>(Clock::now() - size_start).count();
  }
  // The small sizes again, each point keeping its faster time: microseconds each, they are the
  // likeliest to land in a slow moment of a shared machine, and they take a fraction of a second.
  keep_faster(c.points, [&] {
    for (std::size_t bytes = 1024; bytes <= kRemeasureCollectiveUpTo; bytes *= 2) bench.measure_size(bytes);
  });
  return largest;
}

}  // namespace

void fit_collectives(Calibration& c, int n) {
  auto& pts = c.points;
  // t = 2(n-1) * alpha + 2(n-1)/n * S / B: regress t on S with intercept 2(n-1) alpha.
  if (!fitted_points(pts, "all_reduce").empty()) {
    c.all_reduce = fit_protocols(pts, "all_reduce");
    c.fabric.latency_s = c.all_reduce.intercept_s / (2.0 * (n - 1));
    c.fabric.bandwidth = 2.0 * (n - 1) / n / c.all_reduce.slope;
    c.fabric.efficiency = 1.0;
    c.fabric.small_message_bytes = c.all_reduce.small_below;
    c.fabric.small_message_latency_s = c.all_reduce.small_intercept_s / (2.0 * (n - 1));
    c.fabric_measured = true;
    c.fabric.cold_bandwidth =
        fit_cold(pts, "all_reduce_cold", c.all_reduce, collective_bus_factor(CollectiveOp::kAllReduce, n),
                 c.fabric.bandwidth, c.all_reduce_cold);
  }
  // The other collectives: each its own line over the same sizes, split where the all-reduce's
  // protocols split (a link has one small-message size), as its own rates on the fabric. With the
  // all-reduce's rates, reduce-scatters and all-gathers (sequence parallelism, ZeRO-1) are
  // predicted far too short (bench/predict_vs_measured.py --collectives).
  for (const OwnCollective& o : kOwnCollectives)
    *c.fabric.own_rates(o.op) = fit_collective_rates(pts, std::string(to_string(o.op)), o.op, n,
                                                     c.fabric.small_message_bytes, c.*o.fit);
  // The cold reduce-scatter, as the cold all-reduce.
  if (c.fabric.reduce_scatter.bandwidth > 0)
    c.fabric.reduce_scatter.cold_bandwidth = fit_cold(
        pts, "reduce_scatter_cold", c.reduce_scatter, collective_bus_factor(CollectiveOp::kReduceScatter, n),
        c.fabric.reduce_scatter.bandwidth, c.reduce_scatter_cold);
  // Every point against the model's formulas on the fitted fabric (its lines: none of the base
  // profile's measured times).
  c.fabric.measured = {};
  GroupLink link;
  link.size = n;
  link.bus_bandwidth = c.fabric.bandwidth;
  link.latency_s = c.fabric.latency_s;
  link.small_message_bytes = c.fabric.small_message_bytes;
  link.small_message_latency_s = c.fabric.small_message_latency_s;
  link.own_rates = &c.fabric;
  constexpr std::pair<CollectiveOp, double (*)(const GroupLink&, double)> kModel[] = {
      {CollectiveOp::kAllReduce, allreduce_time},
      {CollectiveOp::kAllGather, allgather_time},
      {CollectiveOp::kReduceScatter, reduce_scatter_time},
      {CollectiveOp::kSendRecv, sendrecv_time}};  // a send/recv's time does not depend on the group's size
  for (Measurement& m : pts)
    for (const auto& [op, time] : kModel)
      if (m.kind == to_string(op) || m.kind == std::string(to_string(op)) + kInStepSuffix) {
        m.fitted_s = time(link, m.work);
        m.bus_factor = collective_bus_factor(op, n);
      }
  // The measured times themselves, which plans of n ranks inside the node take between the
  // measured sizes (LinkSpec::measured): no line follows MPI's protocol and algorithm changes.
  // (Set after the points' fitted times, which are the lines'.)
  c.fabric.measured = measured_collective_times(pts, n);
}

namespace {

void report_collectives(const Calibration& c, int n, std::size_t largest, const ProgressFn& progress) {
  if (!progress) return;
  progress(
      fmt::format("all-reduce over {} ranks: bus bandwidth {:.2f} GB/s, latency {:.2f} us per step{} "
                  "(rms fit error {:.1f}% "
                  "over 1 KiB-{})",
                  n, c.fabric.bandwidth / 1e9, c.fabric.latency_s * 1e6,
                  c.all_reduce.small_below > 0
                      ? fmt::format(", {:.2f} us below {}", c.fabric.small_message_latency_s * 1e6,
                                    size_label(c.all_reduce.small_below))
                      : std::string(),
                  100 * c.all_reduce.rms_rel_error, size_label(kFitCollective)));
  if (c.fabric.cold_bandwidth > 0)
    progress(fmt::format(
        "all-reduce with its buffer evicted from the caches: bus bandwidth {:.2f} GB/s ({}-{}, rms fit "
        "error {:.1f}%), for the gradient reduction after the backward",
        c.fabric.cold_bandwidth / 1e9, size_label(kColdCollectiveFrom), size_label(kFitCollective),
        100 * c.all_reduce_cold.rms_rel_error));
  for (const OwnCollective& o : kOwnCollectives) {
    const CollectiveRates& r = *c.fabric.own_rates(o.op);
    if (r.bandwidth <= 0) continue;
    progress(fmt::format(
        "{}: bus bandwidth {:.2f} GB/s, latency {:.2f} us per step{}{} (rms fit error {:.1f}%)",
        to_string(o.op), r.bandwidth / 1e9, r.latency_s * 1e6,
        r.small_message_latency_s > 0 ? fmt::format(", {:.2f} us below {}", r.small_message_latency_s * 1e6,
                                                    size_label(c.fabric.small_message_bytes_of(o.op)))
                                      : std::string(),
        r.cold_bandwidth > 0 ? fmt::format("; {:.2f} GB/s with its input evicted (rms {:.1f}%)",
                                           r.cold_bandwidth / 1e9, 100 * c.reduce_scatter_cold.rms_rel_error)
                             : std::string(),
        100 * (c.*o.fit).rms_rel_error));
  }
  if (!c.fabric.measured.empty())
    progress(fmt::format(
        "measured times kept for plans of {} ranks inside the node, interpolated between the sizes: {} "
        "(in brackets: each size left out and interpolated from its neighbours, rms error)",
        n, measured_times_summary(c.fabric.measured)));
  if (largest < kMaxCollective)
    progress(fmt::format("collectives measured up to {} (the next sizes would pass the {:.0f} s budget)",
                         size_label(largest), kCollectiveBudget_s));
}

// The executor's cost per op, timed again after everything else: each keeps its faster time (a
// shared machine's slow spell can land on either).
void time_executor_again(Calibration& c, ExecutorProbe& probe, Backend& be, int passes,
                         const ProgressFn& progress) {
  double per_step = probe.step_s;
  for (int pass = 0; pass < passes; ++pass) per_step = std::min(per_step, probe.time_step(be));
  c.executor_overhead_s = per_step / static_cast<double>(probe.ops);
  if (progress)
    progress(fmt::format("executor: {:.2f} us per op ({} ops of a micro model in {:.1f} us)",
                         c.executor_overhead_s * 1e6, probe.ops, per_step * 1e6));
}

// The device's rates from the fitted lines.
void set_device_rates(Calibration& c) {
  const double peak = c.device.peak(DType::kFp32);
  c.device.gemm_efficiency = std::min(1.0, 1.0 / (c.gemm.slope * peak));
  // The fitted line is one rate over the measured shapes, not a large GEMM's: no shape model on top.
  c.device.gemm_tile = {};
  // The same for attention: its line's rate already holds the measured blocks and head width.
  c.device.attention_tile = {};
  c.device.special_function_rate = 0;
  // (A line with no positive slope says nothing about the rate: the GEMMs' efficiency stands in.)
  c.device.attention_efficiency =
      c.attention.slope > 0 ? std::clamp(1.0 / (c.attention.slope * c.device.peak(DType::kBf16)), 0.01, 1.0)
                            : c.device.gemm_efficiency;
  c.device.memory_bandwidth = 1.0 / c.stream.slope;
  auto rate = [](double s_per_byte) { return s_per_byte > 0 ? 1.0 / s_per_byte : 0.0; };
  c.device.gemm_weight_fwd_bandwidth = rate(c.gemm.weight_fwd_s_per_byte);
  c.device.gemm_weight_bwd_bandwidth = rate(c.gemm.weight_bwd_s_per_byte);
  c.device.caches.clear();
  for (const CacheFit& level : c.caches)
    c.device.caches.push_back({static_cast<double>(level.bytes),
                               std::min(1.0, 1.0 / (level.gemm.slope * peak)), 1.0 / level.stream.slope,
                               rate(level.gemm.weight_fwd_s_per_byte), rate(level.gemm.weight_bwd_s_per_byte),
                               level.stream.element_s, rate(level.optimizer.slope),
                               level.footprint < level.bytes ? static_cast<double>(level.footprint) : 0.0});
  c.device.activation_element_s = c.stream.element_s;
  c.device.shared_memory = {};
  if (c.alone_stream.slope > 0) {
    // The memory rates above are each rank's with all of them at once (the calibration's ranks
    // are one node's cores); these are rank 0's alone.
    c.device.shared_memory.shared_by = c.ranks;
    CacheLevel& a = c.device.shared_memory.alone;
    a.gemm_efficiency =
        c.alone_gemm.slope > 0 ? std::min(1.0, 1.0 / (c.alone_gemm.slope * peak)) : c.device.gemm_efficiency;
    a.memory_bandwidth = 1.0 / c.alone_stream.slope;
    a.gemm_weight_fwd_bandwidth = rate(c.alone_gemm.weight_fwd_s_per_byte);
    a.gemm_weight_bwd_bandwidth = rate(c.alone_gemm.weight_bwd_s_per_byte);
    a.activation_element_s = c.alone_stream.element_s;
    a.optimizer_bandwidth = rate(c.alone_optimizer.slope);
  }
  c.device.memory_efficiency = 1.0;
  // AdamW's rate over the streaming rate (1 where its line has no slope: too few points to say).
  c.device.optimizer_efficiency = c.optimizer.slope > 0 ? std::clamp(c.stream.slope / c.optimizer.slope,
                                                                     DeviceSpec::kOptimizerEfficiencyMin,
                                                                     DeviceSpec::kOptimizerEfficiencyMax)
                                                        : 1.0;
  c.device.kernel_overhead_s = c.executor_overhead_s;
  // The lines' intercepts: what a call costs beyond its work (the attention line's is per forward
  // and backward pair).
  c.device.gemm_setup_s = gemm_setup_fit(c).intercept_s;
  c.device.attention_setup_s = 0.5 * c.attention.intercept_s;
  c.device.attention_score_s = c.attention.element_s;
  c.device.attention_head_s = c.attention.head_s;
  c.device.attention_backward_ratio = c.attention_backward_ratio;
}
}  // namespace

Result<Calibration> calibrate(const ClusterSpec& base, Comm& world, Backend& be, const ProgressFn& progress,
                              const CalibrateOptions& options) {
  keep_freed_memory_in_heap();  // allocate as the trainer does
  const Sizes z = sizes_for(be);
  Calibration c = start_calibration(base, world, be, z);
  // The trainer's fp32 plans run full-fp32 GEMMs (no TF32): so does the calibration.
  be.set_gemm_precision(Precision::kFp32);
  FS_ASSIGN_OR_RETURN(std::unique_ptr<ExecutorProbe> executor, start_executor_probe(base, be));
  FS_ASSIGN_OR_RETURN(const double best_peak_s, measure_kernels(c, world, be, z, progress, options));
  fit_kernel_lines(c, progress);
  fit_peak(c, be, z.peak_n, best_peak_s, progress);
  report_kernel_lines(c, z, progress);
  fit_attention_lines(c, progress);
  measure_host_link(c, be, z, progress);
  if (world.size() > 1) {
    FS_ASSIGN_OR_RETURN(const std::size_t largest, measure_collectives(c, world, be, z));
    fit_collectives(c, world.size());
    report_collectives(c, world.size(), largest, progress);
  }
  time_executor_again(c, *executor, be, std::max(1, options.passes), progress);
  set_device_rates(c);
  return c;
}

}  // namespace foresight::runtime
