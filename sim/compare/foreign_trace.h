// Measured traces from other tools, read as time per op kind per step, and compared with a
// prediction: PyTorch profiler Chrome traces (Kineto's: "cat" kernel, cpu_op, user_annotation,
// gpu_memcpy, ...; and the older export of builds without Kineto, such as Debian's python3-torch:
// a bare array of events under "pid": "CPU functions", no "cat"), and Nsight Systems reports
// exported to SQLite (`nsys export --type sqlite`: kernels, copies, NVTX ranges as the steps; needs
// a build with SQLite). One file per rank. JSON files are streamed (nlohmann's SAX parser): memory
// grows with the events kept (about 40 bytes each), not with the file.
//
//   auto kinds = default_kind_table();                          // compare/kernel-kinds.json
//   auto t = load_foreign_trace("rank0.json", *kinds, {});      // steps, time per kind, unmapped names
//   auto r = compare_foreign(*load_trace("pred.json"), {*t});   // predicted against measured, per kind
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/compare/compare.h"
#include "sim/core/status.h"
#include "sim/spec/hardware.h"

namespace foresight {

// The kinds a measured trace's names map to. "step" marks a step's range (ProfilerStep#N); "layer"
// a transformer layer's range (record_function("layers.3"), an NVTX range, or the profiler's
// module ranges "nn.Module: TransformerBlock_3" of with_stack traces), its layer the number right
// after the pattern (else the last number in the name). Neither is a kind of time: a layer range claims
// nothing, its ops keep their kinds.
inline constexpr const char* kForeignKinds[] = {"gemm",      "attention",     "elementwise",
                                                "optimizer", "communication", "memcpy"};

struct KindRule {
  std::string pattern;  // matched as a case-insensitive substring of the name
  std::string kind;     // one of kForeignKinds, or "step"
};
struct KindTable {
  std::vector<KindRule> rules;  // the first rule whose pattern the name contains wins
  // The kind of `name` ("" where no rule maps it).
  std::string kind_of(const std::string& name) const;
  // The rule that maps `name` (null: none), and where in the name its pattern matched.
  const KindRule* rule_of(const std::string& name, std::size_t* at = nullptr) const;
};
// The table that ships with the project (compare/kernel-kinds.json, embedded at build time).
Result<KindTable> default_kind_table();
// A table file of the same form ({"rules": [{"pattern", "kind"}]}); errors name the file and field.
Result<KindTable> kind_table_from_json(const nlohmann::json& doc, const std::string& file);
// `extra`'s rules ahead of `base`'s.
KindTable extend_kind_table(const KindTable& base, const KindTable& extra);

struct ForeignStep {
  std::string name;  // "ProfilerStep#3"
  double start_s = 0, dur_s = 0;
  std::map<std::string, double> kind_s;  // time per kind (see ForeignTrace)
  double idle_s = 0;                     // the step's time no mapped op covers (the host between ops)
  double exposed_communication_s = 0;    // communication no compute overlaps
  // Time inside each layer's outermost ranges (by the layer's number): on the host in a CPU trace,
  // on the device in a Kineto GPU trace (its gpu_user_annotation ranges, the host ranges' device
  // side); none in an Nsight Systems report (its NVTX ranges are the host's).
  std::map<int, double> layer_s;
  // The host's issue of the step's work, in a Kineto GPU trace (none in a CPU trace or an Nsight
  // Systems report): the kernels launched by the threads that launch kernels, and those threads'
  // time busy issuing (their framework ops and runtime calls less the calls that wait for the
  // device, with the short pauses between them: the framework's Python). host_busy_s /
  // host_kernels is the host's time per kernel it launches (DeviceSpec::host_op_s, which the model
  // charges per kernel of an eager step).
  int host_kernels = 0;
  double host_busy_s = 0;
};

struct ForeignTrace {
  std::string file;
  std::string format;      // "kineto", "chrome-cpu" (a profiler without Kineto) or "nsys-sqlite"
  bool device = false;     // GPU kernels found: kinds are the kernels' (a device's time); else the CPU ops'
  std::size_t events = 0;  // complete events read
  std::vector<ForeignStep> steps;
  // Names no rule maps, with their time inside the steps (self time on a CPU thread, a kernel's
  // duration on a device), largest first.
  std::vector<std::pair<std::string, double>> unmapped;
  // The collectives (communication kernels in a GPU trace, communication ops in a CPU trace; not
  // point-to-point sends and receives), each as its name's place in collective_names and its end
  // in this trace's clock (seconds), in the order they end: every rank of a collective finishes it
  // together, so they align the ranks' clocks (compare_foreign).
  std::vector<std::string> collective_names;
  std::vector<std::pair<std::uint32_t, double>> collectives;
};

struct ForeignOptions {
  std::size_t max_events = std::size_t{50} << 20;  // refused past this many complete events
};

// Errors name the file: not JSON (with the byte offset), no events, no step ranges (the trace
// needs torch.profiler's ProfilerStep#N ranges: profile with a schedule and prof.step(), or wrap
// each step in record_function("ProfilerStep#N")), an event field of the wrong type.
Result<ForeignTrace> load_foreign_trace(const std::string& path, const KindTable& kinds,
                                        const ForeignOptions& options = {});
Result<ForeignTrace> foreign_trace_from_text(const std::string& text, const std::string& file,
                                             const KindTable& kinds, const ForeignOptions& options = {});

// Whether `path` holds a trace of Foresight's own (simulate --trace, run --trace): its metadata
// names a plan within the first 64 KiB (both write "metadata" before "traceEvents").
bool is_foresight_trace(const std::string& path);

struct ForeignLayerComparison {
  int measured_layer = 0, predicted_layer = 0;  // the layer's number in each (k-th on its rank)
  double predicted_s = 0, measured_s = 0;       // forward, per rank and step
  double error_pct = 0;
};

struct ForeignKindComparison {
  std::string kind;
  double predicted_s = 0, measured_s = 0;  // per rank and step
  double error_pct = 0;
};

struct ForeignCompareReport {
  std::string predicted_file;
  std::vector<std::string> measured_files;
  int ranks_predicted = 0;  // the prediction's plan's ranks
  int steps_compared = 0, warmup_steps = 0;
  double predicted_step_s = 0, measured_step_s = 0;  // measured: the median step over the ranks' mean
  double measured_step_mean_s = 0;                   // the mean step (the kinds' times are means)
  double step_time_error_pct = 0;
  // The host's issue (ForeignStep::host_kernels, host_busy_s), per rank and step; 0 where the traces
  // do not show it.
  double host_kernels_per_step = 0;
  double host_op_s = 0;                      // the host's time per kernel launched: busy time over launches
  std::vector<ForeignKindComparison> kinds;  // kForeignKinds then idle, then exposed_communication
  // Per layer, where the measured traces show layer ranges and every rank shows as many layers as
  // the plan gives it: the k-th layer of each rank against the k-th the prediction places there.
  // Forward only: a module's range covers its forward (and a recompute's), not the backward that
  // autograd runs later outside it.
  std::vector<ForeignLayerComparison> layers;
  std::vector<std::pair<std::string, double>> unmapped;  // per rank and step, largest first (ten at most)
  // Each further trace's clock against the first's, from the collectives both ran (the k-th of a
  // name in one against the k-th of that name in the other): the median of their ends' differences
  // (added to its times, it reads the first's clock) and their median distance from it.
  struct Clock {
    std::string file;
    double offset_s = 0, spread_s = 0;
    int collectives = 0;  // 0: none in common, not aligned
  };
  std::vector<Clock> clocks;
  // With the clocks aligned: how far apart the ranks start each compared step (its latest start
  // less its earliest, the mean over the steps); 0 with one trace.
  double step_start_skew_s = 0;
  std::vector<std::string> notes;  // where the traces contradict the plan, or say less than it
};

// The prediction's ops in the measured kinds (lm_head's GEMM and loss under gemm, collectives and
// p2p under communication) against the measured steps after `warmup` (default: the first step
// when there are three or more).
Result<ForeignCompareReport> compare_foreign(const Trace& predicted,
                                             const std::vector<ForeignTrace>& measured, int warmup = -1);
nlohmann::json foreign_report_to_json(const ForeignCompareReport& r);

}  // namespace foresight

namespace foresight {

// The traced plan's kinds re-predicted on a calibrated profile, against the measured.
struct TraceResidual {
  int passes = 0;                            // fits behind the profile
  std::vector<ForeignKindComparison> kinds;  // the fitted kinds (gemm ... communication) measured
  double mean_abs_pct = 0, max_abs_pct = 0;  // over those kinds
};

// A profile calibrated from a measured trace: each op kind's measured time against its predicted
// time on `base` (ForeignCompareReport) scales the rates that kind is priced with, so that the same
// plan is predicted as measured, kind by kind:
//   gemm           GEMM efficiencies (every dtype, every cache level, running alone), the weight
//                  passes' rates, the set-up time per GEMM
//   attention      attention efficiencies, the set-up, score-element and per-head times
//   elementwise    memory bandwidths (device, levels, alone), the time per exponential
//   optimizer      the optimizer's efficiency and the levels' optimizer rates
//   communication  the node fabric's bandwidths and latencies, its measured times
// A kind measured or predicted at zero is left as it was (a one-rank trace says nothing about the
// fabric); idle time is not fitted. Where the traces show the host's issue (a Kineto GPU trace),
// the device's host_op_s becomes the measured host time per kernel launched.
struct TraceCalibration {
  ClusterSpec cluster;
  std::vector<std::string> fitted;                  // "gemm: x0.97 (predicted 575.9 ms, measured 557.5 ms)"
  nlohmann::json sources;                           // profile "sources" entries
  std::map<std::string, std::string> source_lines;  // each "sources" key's kind line, the traces unnamed
  int passes = 1;
  std::vector<TraceResidual> residuals;  // after each pass, where the plan was re-predicted
};
Result<TraceCalibration> calibrate_from_trace(const ClusterSpec& base, const ForeignCompareReport& report);

// The kinds a calibration fits, compared: their mean and largest |error|.
TraceResidual trace_residual(const ForeignCompareReport& report, int passes);

// Calibration in passes. The kinds are not independent (a small GEMM's memory-bound part moves
// with the streaming rate, the optimizer's with the elementwise rate), so one fit leaves each kind
// some percent off. After each fit `repredict` predicts the traced plan again on the profile fitted
// so far and the kinds still off are fitted again, up to `max_passes` fits, until every fitted kind
// is within `tolerance_pct`. A pass is kept only while the mean error of the fitted kinds falls
// (a kind held at a profile's bound cannot close); the profile returned is the best re-predicted.
using TraceRepredict = std::function<Result<ForeignCompareReport>(const ClusterSpec&)>;
Result<TraceCalibration> calibrate_from_trace_passes(const ClusterSpec& base,
                                                     const ForeignCompareReport& report,
                                                     const TraceRepredict& repredict, int max_passes,
                                                     double tolerance_pct = 1.0);

}  // namespace foresight
