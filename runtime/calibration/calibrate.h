// Calibration of a hardware profile from microbenchmarks of the runtime's own kernels: the
// profile then describes this machine as the runtime uses it, and predictions of `run` can be
// checked against measurements (`foresight run --predict`).
//
//   Comm world = Comm::world();                      // under mpirun for the collectives
//   auto cal = calibrate_cpu(base_cluster, world, progress);
//   auto gpu = calibrate(h200_cluster, world, **make_backend("cuda", local_rank), progress);
//   nlohmann::json profile = calibrated_cluster_json(*cal, "local", provenance);
//
// Each fitted constant is physical and comes from a least-squares line through the measurements
// (Eigen, weighted by 1/t so that small and large sizes count alike):
//   GEMM       t = overhead + FLOPs / (peak * gemm_efficiency)    peak: the rate of a 1024^3 GEMM
//   streaming  t = overhead + bytes / memory_bandwidth   norms, residuals, activations (forward and
//                  + exponentials x activation_element   backward) at model sizes; AdamW apart
//   attention  t = overhead + 0.5 * core FLOPs / (peak * attention_efficiency)   (the model's flash form)
//   all-reduce t = 2(n-1) * latency + 2(n-1)/n * bytes / bandwidth  (ring, the nccl-tests busbw convention),
//              with a second latency below a size where the MPI library changes protocol
// and the executor's per-op cost (the model's kernel overhead) from a step of a micro model. GEMMs
// and streaming kernels are fitted per cache level (a CPU's core L2, an 8 MiB span and a 32 MiB one
// within its L3; a GPU's L2) and beyond the caches (DeviceSpec::caches).
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/backends/backend.h"
#include "runtime/communication/comm.h"
#include "sim/core/status.h"
#include "sim/spec/hardware.h"

namespace foresight::runtime {

// How far the CPU calibration's copies of a kernel's operands span: its outer cache level (its
// inner one is the core's L2, when the machine says its size), and the memory rates (see
// calibrate; a GPU's are 16 MiB and 1 GiB).
inline constexpr std::size_t kCacheFootprint = 8u << 20;
inline constexpr std::size_t kL3Footprint = 32u
                                            << 20;  // a third level, where the machine's L3 holds it twice
inline constexpr std::size_t kMemoryFootprint = 256u << 20;

// Collectives are measured from 1 KiB to kMaxCollective (within kCollectiveBudget_s); the fabric is fitted on
// the all-reduce sizes up to kFitCollective (the messages of the models a CPU trains) and the larger sizes
// are reported against the model.
inline constexpr std::size_t kMaxCollective = 1u << 30;
inline constexpr std::size_t kFitCollective = 16u << 20;
// The all-reduce is also measured with its buffer evicted from the caches (a host backend's), from
// this size to kFitCollective: LinkSpec::cold_bandwidth. (From 1 MiB the line fits worse, 16% rms: a
// cold all-reduce also pays about 0.2 ms more per call, which matters only for the small ones.)
inline constexpr std::size_t kColdCollectiveFrom = 4u << 20;
inline constexpr double kCollectiveBudget_s = 20;  // larger sizes stop once it would be spent
// The collectives up to this size are measured twice, each point keeping its faster time.
inline constexpr std::size_t kRemeasureCollectiveUpTo = 256u << 10;
// Up to 64 KiB a collective's sample times this many calls in a row (nccl-tests' and the OSU
// benchmarks' way).
inline constexpr int kCollectiveBackToBack = 16;
// A host backend's collectives up to this size are also measured as a step calls them, after
// other work (kinds: the collective's + kInStepSuffix); their times are the measured times plans
// take (LinkSpec::measured), the back-to-back ones the lines' and nccl-tests' convention.
inline constexpr std::size_t kInStepUpTo = 4u << 20;
inline constexpr const char* kInStepSuffix = "_in_step";

struct Measurement {
  std::string kind;       // gemm(-LEVEL), stream(-LEVEL), optimizer(-LEVEL), attention, attn_fwd, host_copy,
                          // all_reduce(_cold), all_gather, reduce_scatter, send_recv
  std::string shape;      // "128x256x2048", "4 MiB", ...
  double work = 0;        // FLOPs or bytes the fit uses
  double seconds = 0;     // median
  double fitted_s = 0;    // the fitted line's, or for collectives the model's on the fitted fabric
  bool in_fit = true;     // whether the fit of its kind uses it
  double bus_factor = 0;  // collectives: busbw / algbw in the nccl-tests convention
  double weight_bytes = 0;  // GEMMs: the weight's bytes (k x n)
  bool backward = false;    // GEMMs: a backward (two calls: data and weight gradients)
  // Attention: causal score elements (heads x seq^2 / 2); streaming: elements through an
  // exponential (the activation's outputs).
  double elements = 0;
  double heads = 0;  // attention: the (sequence, head) pairs it loops over
};

struct LineFit {
  double intercept_s = 0;    // fixed cost per call
  double slope = 0;          // seconds per unit of work
  double rms_rel_error = 0;  // root-mean-square relative residual of the fit
  double max_rel_error = 0;
  // Two protocols (LinkSpec::small_message_bytes): points with work below `small_below` have
  // their own intercept, `small_intercept_s`; the slope is shared. 0: one line.
  double small_below = 0;
  double small_intercept_s = 0;
  // GEMMs (fit_gemm): seconds per weight byte of the forward's and the backward's weight passes;
  // the intercept is then per call.
  double weight_fwd_s_per_byte = 0, weight_bwd_s_per_byte = 0;
  // fit_with_elements: seconds per element (attention: per causal score element; streaming: per
  // exponential); the intercept is per call.
  double element_s = 0;
  double head_s = 0;  // fit_attention: seconds per (sequence, head) pair
  // The line's time for `work`.
  double at(double work) const {
    return (work < small_below ? small_intercept_s : intercept_s) + slope * work;
  }
};

// The all-reduce line, split in two where a message protocol changes (MPI's eager limit, NCCL's
// low-latency protocol): every split between consecutive sizes is tried (at least two sizes
// below it, at least half of them above), each fitted as two intercepts and one slope. The best
// split is kept if it cuts the single line's rms relative error by a third or more (and by at
// least one point) and its small-message intercept is the smaller one. Fills the points' fitted_s.
LineFit fit_protocols(std::vector<Measurement>& pts, const std::string& kind);
// A collective's own rates on the fabric (LinkSpec::CollectiveRates) from its points of `kind` over
// `ranks`: one line, split where its own protocol changes (as fit_protocols finds it; its own
// small-message size where that is not the link's `small_below`), else where the link's does if
// that fits better (0: the link has no split), read as
// t = steps x latency + bus factor x S / bandwidth, steps and factor as sim/analytic/collective.h
// counts them (a send/recv: one step, factor 1). Over MPI's shared memory the collectives differ
// by up to 4x from the all-reduce's rates (an all-gather only copies; Open MPI's reduce-scatter
// runs slower than its all-reduce). Fills `line` and the points' fitted_s; empty rates where there
// are fewer than four points or the slope is not positive.
CollectiveRates fit_collective_rates(std::vector<Measurement>& pts, const std::string& kind, CollectiveOp op,
                                     int ranks, double small_below, LineFit& line);
// The collectives' measured times (LinkSpec::measured) from the points of kinds "all_reduce",
// "all_gather", "reduce_scatter" and "send_recv" (the cold ones are not these) over `ranks`: each
// collective's sizes in order, one point per size (the faster where one was measured twice), a
// size measured as a step calls it (kind + kInStepSuffix) taking that time; a collective with
// fewer than two sizes has none.
MeasuredTimes measured_collective_times(const std::vector<Measurement>& pts, int ranks);
// How well the measured times interpolate: each size but the first and the last left out and
// interpolated from its neighbours (as MeasuredTimes::time does, over twice the gap), the rms of
// the relative errors; 0 with fewer than three sizes.
double interpolation_rms_error(const std::vector<MeasuredTimes::Point>& pts);
// "all_reduce 1 KiB-512 MiB (21.5%), ...": each collective's measured sizes and, in brackets,
// its interpolation_rms_error.
std::string measured_times_summary(const MeasuredTimes& t);
// GEMMs: t = calls x intercept + FLOPs x slope + weight bytes x (weight_fwd or weight_bwd), one call
// forward and two backward; negative terms are dropped. Fills the points' fitted_s.
LineFit fit_gemm(std::vector<Measurement>& pts, const std::string& kind);
// t = intercept + elements x element_s + work x slope, negative terms dropped: attention pairs (score
// elements, FLOPs) and streaming kernels (exponentials, bytes).
LineFit fit_with_elements(std::vector<Measurement>& pts, const std::string& kind);
// Attention pairs: as fit_with_elements (score elements, FLOPs) with a term per (sequence, head)
// pair the kernel loops over.
LineFit fit_attention(std::vector<Measurement>& pts, const std::string& kind);
// The device's GEMM peak: the peak GEMM's measured rate, or the fastest rate of a GEMM point (any
// level's) or of the fitted lines where one is faster (a peak measured in a slow moment would
// otherwise cap every GEMM, the efficiencies being rates over the peak capped at 1).
double gemm_peak(double measured_flops, const std::vector<Measurement>& pts,
                 const std::vector<const LineFit*>& fits);

// A cache level as the calibration measured it: the kernels with their operands cycled over
// `footprint`; a plan whose working set fits `bytes` takes its rates (DeviceSpec::caches).
struct CacheFit {
  std::string name;  // the points' kinds are "gemm-" + name and "stream-" + name
  std::string what;  // what the level is, for the profile's source ("the core's L2 as Linux reports it")
  std::size_t footprint = 0, bytes = 0;
  LineFit gemm, stream;
  LineFit optimizer;  // AdamW over the level's span (where two copies of two sizes fit)
};

// The device's peak per dtype: `fp32_peak` for fp32 and for every dtype that has a peak in the
// base profile, unless the backend measured a GEMM precision of its own for it: bf16 for bf16;
// the fp16 plans' (TF32 operands on the CUDA backend) for fp16 and tf32.
void set_precision_peaks(DeviceSpec& d, double fp32_peak,
                         const std::vector<std::pair<Precision, double>>& measured);

// The kind suffix of the points rank 0 measured alone ("gemm-alone", "stream-alone", "optimizer-alone").
inline constexpr std::string_view kAloneSuffix = "-alone";

struct Calibration {
  std::string backend = "cpu";  // the backend measured
  std::size_t memory_footprint = kMemoryFootprint, optimizer_footprint = 0;
  std::size_t activation_footprint = 0;  // attention's saved tensors are cycled over this much
  DeviceSpec device;  // the base device with fitted peak, efficiencies, bandwidth, overhead
  LinkSpec fabric;    // fitted when there were 2+ ranks, else the base's
  bool fabric_measured = false;
  double executor_overhead_s = 0;  // per op: becomes the device's kernel_overhead
  double peak_gemm_flops = 0;      // the peak GEMM's best rate (the device's peak may be a faster GEMM's)
  // The peak GEMM's rate before the first pass of kernel measurements and again after the last:
  // how far the machine's speed moved while the kernels were measured (a shared VM's moves by
  // 15-25% within minutes, and a calibration across such a change mixes two machines).
  double peak_gemm_start_flops = 0, peak_gemm_end_flops = 0;
  int peak_n = 0;  // the peak GEMM is peak_n^3, fp32
  // A small GEMM's call (small_gemm: rows, k, n; forward, operands hot) at the same two moments:
  // the small kernels' speed, which moves apart from the peak GEMM's on a shared VM.
  std::array<int, 3> small_gemm{};
  double small_gemm_start_s = 0, small_gemm_end_s = 0;
  // The peak GEMM's best rate in each of the backend's other GEMM precisions (Backend::
  // gemm_precisions: a GPU's bf16 and TF32 tensor cores); empty where all compute in fp32.
  std::vector<std::pair<Precision, double>> precision_peaks;
  int ranks = 1;
  LineFit gemm, stream, attention, all_reduce;  // gemm, stream: operands beyond the caches
  LineFit optimizer;                            // AdamW, its state cycled over optimizer_footprint
  // The same three lines (gemm, stream, optimizer) measured on rank 0 while the other ranks waited
  // (DeviceSpec::shared_memory; kinds + kAloneSuffix); empty with one rank, and on ranks but 0.
  LineFit alone_gemm, alone_stream, alone_optimizer;
  LineFit all_reduce_cold;  // its buffer evicted first (fabric.cold_bandwidth)
  // The other collectives' own lines (fabric.all_gather, .reduce_scatter, .send_recv), the
  // reduce-scatter's also with its input evicted first (as the ZeRO gradient reduction's).
  LineFit all_gather, reduce_scatter, reduce_scatter_cold, send_recv;
  LineFit host_copy;  // uploads and downloads (node.host_link); none where the tensors are in host memory
  double attention_backward_ratio = 0;  // the attention pair's backward over its forward (0: not measured)
  std::vector<CacheFit> caches;         // smallest first
  std::vector<Measurement> points;
};

struct CalibrateOptions {
  // Rounds of kernel measurements; each point keeps its fastest, so that a short slow spell of a
  // shared machine does not set a rate (spells of tens of seconds still can, and a calibration
  // landing in one predicts every plan too long). The collectives are measured once.
  int passes = 1;
  // Times the kernels are measured again (passes and all) when the machine's speed moved by more
  // than kSpeedDriftWarnPct while they were measured (the peak or the small GEMM before against
  // after, on any rank); where every attempt moved that much, the steadiest stands (after_attempt),
  // with calibrate's warning.
  int steady_retries = 2;
};

// The best time of an n^3 fp32 GEMM (n x n operands) on `be`: of at least three calls and of as
// many as fit in a quarter of a second (at most 20), after one warm-up call. The calibration's
// peak; `run --predict` times it again before and after the run to show how fast the machine is
// against the calibration (a shared VM's speed moves by 15-25% within minutes).
double peak_gemm_seconds(Backend& be, int n);

// How far the machine's speed moved while the kernels were measured: the peak GEMM's rate after
// them against before, in percent (0 where either was not timed). calibrate warns past
// kSpeedDriftWarnPct: on a shared VM a calibration measured in a slow spell predicts every run
// after it too long. A slow spell that begins or ends within the calibration shows here; one that
// spans it does not (`run --predict` times the peak GEMM around the run for that).
double speed_drift_pct(const Calibration& c);
// The same for the small GEMM (Calibration::small_gemm), as a speed: + when it ran faster after.
double small_gemm_drift_pct(const Calibration& c);
inline constexpr double kSpeedDriftWarnPct = 10;

// After an attempt at the kernels (0 the first, retries as CalibrateOptions::steady_retries) whose
// measurement saw the speed move by `moved_pct` (on any rank): keep it (within kSpeedDriftWarnPct,
// or the retries spent with none steadier), measure again, or take back the steadiest earlier
// attempt, which moved by `steadiest_moved_pct` (negative: none yet).
enum class AfterAttempt { kKeep, kRetry, kSteadiest };
AfterAttempt after_attempt(double moved_pct, int attempt, int retries, double steadiest_moved_pct);

// The calibration's peak GEMM as the profile keeps it (notes.peak_gemm), for that comparison.
struct CalibratedPeak {
  int n = 0;
  std::string backend;
  double flops_per_s = 0;
  // The same GEMM before and after the calibration's kernel measurements (0: not recorded).
  double start_flops_per_s = 0, end_flops_per_s = 0;
  // The small GEMM's shape and its call's seconds when calibrated (the mean of before and after
  // the kernels; 0: not recorded).
  std::array<int, 3> small{};
  double small_s = 0;
};

// A rows x k by k x n GEMM's median call, forward, its operands hot (the calibration's time_call).
double small_gemm_seconds(Backend& be, const std::array<int, 3>& shape);
// From the cluster file at `path`; none where it is not a file, not JSON or has no such note.
std::optional<CalibratedPeak> calibrated_peak(const std::string& path);

// Measures `be` on this rank (rank 0 reports; every rank takes part in the collectives).
// `progress` gets a line per measured group. The sizes follow the backend: a CPU's are the tiny
// and small models', a GPU's a transformer layer's at training sizes.
Result<Calibration> calibrate(const ClusterSpec& base, Comm& world, Backend& be,
                              const std::function<void(const std::string&)>& progress,
                              const CalibrateOptions& options = {});
// Host<->device copies: uploads and downloads of each size in `sizes` (bytes) between a host
// vector (pageable memory, as the backend's uploads read it) and a device tensor, appended to
// `pts` (kind "host_copy"), and the line t = latency + bytes / bandwidth fitted over both
// directions. A backend whose tensors are in host memory has no such copies (the line stays 0).
LineFit measure_host_copies(Backend& be, const std::vector<std::size_t>& sizes,
                            std::vector<Measurement>& pts);

// calibrate() on the CPU backend.
Result<Calibration> calibrate_cpu(const ClusterSpec& base, Comm& world,
                                  const std::function<void(const std::string&)>& progress,
                                  const CalibrateOptions& options = {});

// A cluster profile (device and node inline) with the fitted numbers and their provenance.
nlohmann::json calibrated_cluster_json(const Calibration& c, const ClusterSpec& base, const std::string& name,
                                       const std::string& provenance);

}  // namespace foresight::runtime
