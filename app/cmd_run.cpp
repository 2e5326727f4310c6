// `foresight run`: executes a plan for real. Launched like training: `mpirun -np N foresight run ...`
// (or without mpirun for one rank); each rank runs its pipeline stage's op graph.
#include <fmt/core.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "app/cli_checks.h"
#include "app/commands.h"
#include "app/plan_options.h"
#include "foresight/config.h"
#include "runtime/calibration/calibrate.h"
#include "runtime/communication/comm.h"
#include "runtime/training/trainer.h"
#include "sim/analytic/analytic_model.h"
#include "sim/compare/compare.h"
#include "sim/core/output_file.h"
#include "sim/des/rank_clocks.h"
#include "sim/des/simulator.h"
#include "sim/des/trace.h"

namespace foresight::app {

namespace {

struct RunCli {
  PlanOptions plan;
  int steps = 10;
  int warmup = -1;
  std::string trace, summary, backend = "auto", checkpoint_dir, predicted_trace;
  bool predict = false;
  bool speed_adjust = false;
  bool resume = false;
  int checkpoint_every = 0;
  std::uint64_t seed = 1234;
  float lr = 1e-3f;
  runtime::AlgorithmOptions algorithms;
};

// The bytes of the data-parallel gradient collectives in rank `rank`'s stage graph (0 without a
// DP group): what the simulator moves, to set beside the runtime's StepStats::dp_grad_bytes.
double graph_dp_grad_bytes(const Workload& w, int rank) {
  if (w.plan.dp <= 1) return 0;
  const OpGraph& g = w.stages[static_cast<std::size_t>(w.stage_of(rank))].graph();
  double bytes = 0;
  for (auto v : boost::make_iterator_range(boost::vertices(g))) {
    const Op& op = g[v];
    const std::string_view name = op.name;
    if (op.kind == OpKind::kCollective && op.group == GroupKind::kDp &&
        (name == "grad_reduce" || name == "grad_all_reduce" || name == "grad_reduce_scatter"))
      bytes += op.bytes;
  }
  return bytes;
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// FORESIGHT_FAULT_INJECT="RANK:STEP" kills rank RANK (SIGKILL) when step STEP begins: the fault
// tests use it to check that a dying rank ends the whole job instead of hanging it.
void maybe_inject_fault(int rank, int step) {
  const char* spec = std::getenv("FORESIGHT_FAULT_INJECT");
  if (!spec) return;
  int r = -1, s = -1;
  if (std::sscanf(spec, "%d:%d", &r, &s) == 2 && r == rank && s == step) std::raise(SIGKILL);
}

std::string temp_path(const std::string& what) {
  return (std::filesystem::temp_directory_path() /
          ("foresight-" + what + "-" + std::to_string(getpid()) + ".json"))
      .string();
}

// Ends the run on every rank after rank `rank` printed why.
[[noreturn]] void fail_all(int rank, const std::string& message) {
  fmt::print(stderr, "error: rank {}: {}\n", rank, message);
  std::fflush(stderr);
  runtime::Comm::abort_job(1);
}

// Every rank resolves the same inputs; only rank 0 reports input errors.
int input_fail(int rank, const std::string& msg) {
  int code = 2;
  if (rank == 0) code = input_error(msg);
  runtime::Comm::finalize();
  return code;
}

// --- the options, by group ----------------------------------------------------------------------

void add_length_options(CLI::App& cmd, RunCli& o) {
  cmd.add_option("--steps", o.steps, "optimizer steps to run (in all, counting resumed ones)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd.add_option("--warmup", o.warmup, "steps left out of the median step time (default: min(2, steps - 1))")
      ->check(int_in(0, 1000000));
}

void add_output_options(CLI::App& cmd, RunCli& o) {
  cmd.add_option("--trace", o.trace,
                 "write the measured Chrome trace of the median step (opens in Perfetto)");
  cmd.add_option("--summary", o.summary, "write a JSON summary (losses, step times, memory, prediction)");
}

void add_backend_option(CLI::App& cmd, RunCli& o) {
  cmd.add_option("--backend", o.backend, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
}

void add_checkpoint_options(CLI::App& cmd, RunCli& o) {
  cmd.add_option(
      "--checkpoint-dir", o.checkpoint_dir,
      "save the training state here at the end (and every --checkpoint-every steps): one folder per step, "
      "step-NNNNNNNN, with every rank's file and a MANIFEST.json written last; the previous set is removed "
      "once the new one is complete");
  cmd.add_option("--checkpoint-every", o.checkpoint_every, "steps between checkpoints (0: only at the end)")
      ->check(int_in(0, 1000000));
  cmd.add_flag(
      "--resume", o.resume,
      "continue from the newest complete checkpoint set in --checkpoint-dir (all ranks agree on it)");
}

void add_predict_options(CLI::App& cmd, RunCli& o) {
  cmd.add_flag("--predict", o.predict,
               "also simulate the plan (DES, every rank) on --cluster and compare op by op");
  cmd.add_option("--predicted-trace", o.predicted_trace, "with --predict: where to keep the simulated trace");
  cmd.add_flag("--speed-adjust", o.speed_adjust,
               "with --predict on a profile that `calibrate` wrote: predict at the machine's speed just "
               "before the run "
               "(its peak GEMM timed again against the calibration's scales the device's rates)");
}

void add_training_options(CLI::App& cmd, RunCli& o) {
  cmd.add_option("--seed", o.seed, "seed of the parameters and the synthetic data")->capture_default_str();
  cmd.add_option("--lr", o.lr, "AdamW learning rate")->check(number_in(1e-12, 10))->capture_default_str();
}

void add_algorithm_options(CLI::App& cmd, RunCli& o) {
  cmd.add_option("--loss-scale-alpha", o.algorithms.loss_scale_alpha,
                 "fp16: loss scale = dynamic scale x (1 - alpha x variance of the last 20 losses)")
      ->check(number_in(0, 1e6))
      ->group("Algorithms");
  cmd.add_option("--grad-decay", o.algorithms.grad_decay,
                 "beta: the optimizer steps on beta x previous + (1 - beta) x this step's gradients")
      ->check(number_in(0, 0.9999))
      ->group("Algorithms");
  cmd.add_option("--aradam-gamma", o.algorithms.aradam_gamma,
                 "ARAdam: per-parameter learning rate lr x (1 + gamma x |parameter|)")
      ->check(number_in(0, 1e6))
      ->group("Algorithms");
}

// --- the run, step by step ----------------------------------------------------------------------

// The plan options with run's defaults: the CPU backend computes in fp32 (unless the user asked for
// a precision, the plan says so, and predictions of it count 4-byte activations), the plan takes
// every launched rank, and the global batch fills the pipeline twice per data-parallel rank.
Result<PlanOptions> run_plan_options(const PlanOptions& given, int ranks) {
  PlanOptions po = given;
  if (!po.has("/precision") && po.plan_file.empty()) po.set("/precision", "fp32");
  // The degrees as given (the plan reader checks their ranges in resolve_inputs).
  auto degree = [&po](const char* field) {
    return std::clamp<long long>(po.integer(field).value_or(1), 1, 1 << 20);
  };
  const long long model_parallel = degree("/tp") * degree("/pp") * degree("/cp");
  if (po.plan_file.empty() && !po.gpus && ranks % model_parallel != 0)
    return Error(fmt::format("--tp x --pp x --cp = {} needs a multiple of {} ranks, but {} {} launched",
                             model_parallel, model_parallel, ranks, ranks == 1 ? "was" : "were"));
  if (!po.gpus) po.gpus = ranks;
  if (!po.has("/global_batch") && po.plan_file.empty()) {
    const long long tp = degree("/tp"), pp = degree("/pp"), mb = degree("/micro_batch");
    const long long dp = po.has("/dp") ? degree("/dp") : std::max<long long>(1, ranks / (tp * pp));
    po.set("/global_batch", std::max<long long>(4, 2 * pp) * dp * mb);
  }
  return po;
}

// What is checked before the run rather than found at its end: the output paths, the checkpoint
// folder (made now, every rank alike, so that a file in its place or a read-only parent is said
// before the first save), what the runtime executes, and the launched rank count.
Status check_before_run(const RunCli& o, const ResolvedInputs& in, int ranks) {
  for (const auto& [path, option] :
       {std::pair{o.trace, "--trace"}, {o.summary, "--summary"}, {o.predicted_trace, "--predicted-trace"}})
    if (!path.empty()) FS_RETURN_IF_ERROR(check_output_path(path, option));
  if (!o.checkpoint_dir.empty() && !o.resume) {
    std::error_code ec;
    std::filesystem::create_directories(o.checkpoint_dir, ec);
    if (!std::filesystem::is_directory(o.checkpoint_dir))
      return Error("--checkpoint-dir: " + o.checkpoint_dir + ": not a folder and cannot be made one" +
                   (ec ? " (" + ec.message() + ")" : ""));
    if (::access(o.checkpoint_dir.c_str(), W_OK) != 0)
      return Error("--checkpoint-dir: " + o.checkpoint_dir + ": cannot write: " + std::strerror(errno));
  }
  FS_RETURN_IF_ERROR(runtime::check_runtime_plan(in.model, in.plan, in.plan_source));
  if (in.plan.gpus() != ranks)
    return Error(fmt::format(
        "{}: the plan needs {} ranks (tp {} x pp {} x dp {}) but {} {} launched{}", in.plan_source,
        in.plan.gpus(), in.plan.tp, in.plan.pp, in.plan.dp, ranks, ranks == 1 ? "was" : "were",
        runtime::Comm::launched_by_mpi() || FORESIGHT_HAVE_MPI == 0
            ? ""
            : fmt::format(" (start it with mpirun -np {} foresight run ...)", in.plan.gpus())));
  return Status::Ok();
}

// --predict on a profile that `calibrate` wrote: its peak GEMM timed again just before and just
// after the run (rank 0, on a backend of its own on the trainer's device; the others wait), so
// that a miss can be told apart from a machine running slower or faster than when it was
// calibrated (a shared VM's speed moves within minutes). With --speed-adjust the prediction takes
// the speed before the run (device_at_speed); else only the printout and the summary do. The
// calibration's small GEMM too, where the profile has it: the small kernels' speed moves apart
// from the peak GEMM's on a shared VM.
struct SpeedProbe {
  std::optional<runtime::CalibratedPeak> calibrated;
  std::unique_ptr<runtime::Backend> backend;  // rank 0's
  bool small = false;
  double before = 0, after = 0, small_before_s = 0, small_after_s = 0;

  // `f` timed on rank 0 (the others wait), its value on every rank.
  template <class F>
  static double on_rank0(const runtime::Comm& world, F&& f) {
    double v = world.rank() == 0 ? f() : 0.0;
    world.all_reduce(&v, 1);
    return v;
  }
  double gemm_speed(const runtime::Comm& world) {
    const double n = calibrated->n;
    return on_rank0(world,
                    [&] { return 2.0 * n * n * n / runtime::peak_gemm_seconds(*backend, calibrated->n); });
  }
  double small_call_s(const runtime::Comm& world) {
    return on_rank0(world, [&] { return runtime::small_gemm_seconds(*backend, calibrated->small); });
  }
  void measure_before(const runtime::Comm& world) {
    small = calibrated && calibrated->small_s > 0;
    small_before_s = small ? small_call_s(world) : 0.0;
    before = calibrated ? gemm_speed(world) : 0.0;
  }
  void measure_after(const runtime::Comm& world) {
    after = calibrated ? gemm_speed(world) : 0.0;
    small_after_s = small ? small_call_s(world) : 0.0;
  }
};

// The profile's calibrated peak where --predict runs on one, with rank 0's backend to time it
// (none, on every rank alike, where rank 0 cannot make one of the calibration's kind).
SpeedProbe find_speed_probe(const RunCli& o, runtime::Backend& backend, const runtime::Comm& world) {
  SpeedProbe probe;
  const int rank = world.rank();
  if (o.predict) probe.calibrated = runtime::calibrated_peak(o.plan.cluster);
  if (probe.calibrated && rank == 0) {
    auto b = backend.another();
    if (b && (*b)->name() == probe.calibrated->backend) probe.backend = std::move(*b);
  }
  double no_probe = probe.calibrated && rank == 0 && !probe.backend ? 1.0 : 0.0;
  world.all_reduce(&no_probe, 1);  // every rank decides alike
  if (no_probe > 0) probe.calibrated.reset();
  return probe;
}

// --predict: the simulator runs the very workload the runtime is about to execute (rank 0); the
// path of its trace.
std::string simulate_on_rank0(const RunCli& o, const ResolvedInputs& in, const Workload& w, int rank) {
  if (!o.predict || rank != 0) return "";
  if (Status shape = check_cluster_shape(in.cluster, in.cluster.name); !shape)
    fail_all(rank, shape.error().message());
  SimOptions so;
  so.full = true;
  so.record = true;
  Simulator simulator(w, so);
  auto sim = simulator.run();
  if (!sim) fail_all(rank, sim.error().message());
  const std::string path = o.predicted_trace.empty() ? temp_path("predicted") : o.predicted_trace;
  if (Status s = write_chrome_trace(path, w, *sim, "predicted"); !s) fail_all(rank, s.error().message());
  fmt::print("predicted (DES on {}): {:.2f} ms per step\n", in.cluster.name,
             sim->prediction.step_time_s * 1e3);
  return path;
}

// The trainer of this rank's stage. The loss window and decayed gradients are not in checkpoints.
Result<std::unique_ptr<runtime::Trainer>> make_trainer(const RunCli& o, const Workload& w,
                                                       runtime::Comm& world,
                                                       std::unique_ptr<runtime::Backend> backend) {
  runtime::RunOptions ro;
  ro.seed = o.seed;
  ro.adam.lr = o.lr;
  ro.algorithms = o.algorithms;
  const runtime::AlgorithmOptions none;
  if ((!o.checkpoint_dir.empty() || o.resume) &&
      (o.algorithms.loss_scale_alpha != none.loss_scale_alpha || o.algorithms.grad_decay != none.grad_decay))
    return Error(
        "--checkpoint-dir: the loss window and decayed gradients are not saved in checkpoints yet; "
        "run --loss-scale-alpha and --grad-decay without checkpoints");
  return runtime::Trainer::create(w, world, ro, std::move(backend));
}

// --resume. Collective: the ranks agree on the newest checkpoint set that every one of them can
// load (runtime/training/checkpoint.h), or all get the same error -- bad input, exit 2, never a
// hang. Returns the step resumed from.
Result<int> resume(const RunCli& o, runtime::Trainer& t, int rank) {
  FS_ASSIGN_OR_RETURN(auto resumed, t.load_checkpoint(o.checkpoint_dir));
  if (rank == 0) {
    for (const std::string& why : resumed.skipped) fmt::print("checkpoint set skipped: {}\n", why);
    fmt::print("resumed from {} at step {}\n", resumed.set_dir, t.steps_done());
  }
  return resumed.step;
}

void print_run_header(const ResolvedInputs& in, int ranks, const runtime::Trainer& t) {
  fmt::print(
      "foresight run: model {} ({:.2f} M parameters), {} ranks: tp {} x pp {} x dp {}, {} micro-batches "
      "of {} x {} tokens, "
      "schedule {}, ZeRO-{}, recompute {}\n",
      in.model.name, in.model.total_params() / 1e6, ranks, in.plan.tp, in.plan.pp, in.plan.dp,
      in.plan.micro_batches(), in.plan.micro_batch, effective_seq_len(in.plan, in.model),
      to_string(in.plan.schedule), in.plan.zero_stage, to_string(in.plan.recompute));
  const bool cpu = t.backend().name() == "cpu";
  const std::string precision_note =
      in.plan.precision == Precision::kFp32   ? ""
      : in.plan.precision == Precision::kFp16 ? "; fp16 dynamic loss scaling with fp16's range"
      : cpu ? "; the plan's " + to_string(in.plan.precision) + " applies on GPUs"
            : "; the plan's " + to_string(in.plan.precision) + " applies to the GEMMs, the tensors are fp32";
  fmt::print("backend {}{}; MPI {}\n", t.backend().describe(), precision_note,
             FORESIGHT_HAVE_MPI ? "yes" : "no (one rank)");
}

// The steps run, and each step's op timings (for the trace of the median step) while they take at
// most kMaxKeptTimings entries (24 bytes each); past that, the last step's. step_ops[i] is
// history[i]'s: once one step is left out, no later one is kept.
struct StepRecord {
  static constexpr std::size_t kMaxKeptTimings = std::size_t{1} << 21;
  std::vector<runtime::StepStats> history;
  std::vector<std::vector<runtime::OpTiming>> step_ops;
  std::size_t kept_timings = 0;
};

// The steps from the trainer's next one to --steps, saving checkpoints as asked. Returns the exit
// code where a save failed (collective: every rank gets the same outcome, so all stop together).
std::optional<int> run_steps(const RunCli& o, runtime::Trainer& t, int rank, StepRecord& rec) {
  const bool want_ops = o.predict || !o.trace.empty();
  for (int s = t.steps_done() + 1; s <= o.steps; ++s) {
    maybe_inject_fault(rank, s);
    auto st = t.step();
    if (!st) fail_all(rank, st.error().message());
    rec.history.push_back(*st);
    if (want_ops && rec.step_ops.size() + 1 == rec.history.size() &&
        rec.kept_timings + t.timings().size() <= StepRecord::kMaxKeptTimings) {
      rec.step_ops.push_back(t.timings());
      rec.kept_timings += t.timings().size();
    }
    if (rank == 0)
      fmt::print("step {:>5}  loss {:.4f}  {:8.2f} ms{}\n", st->step, st->loss, st->seconds * 1e3,
                 st->skipped
                     ? fmt::format("  (fp16 overflow: step skipped, loss scale now {:g})", st->loss_scale)
                     : "");
    const bool save = !o.checkpoint_dir.empty() &&
                      (s == o.steps || (o.checkpoint_every > 0 && s % o.checkpoint_every == 0));
    if (save)
      if (Status cs = t.save_checkpoint(o.checkpoint_dir); !cs) {
        if (rank == 0) fmt::print(stderr, "error: {}\n", cs.error().message());
        return 1;
      }
  }
  return std::nullopt;
}

// The median step time after warm-up, as the slowest rank saw it, and the step traced: the
// median one, so that its ops add up to the step time they are compared with (every rank finds
// the same step from the same maxima), or the last where its ops were not kept.
struct MedianStep {
  int warm = 0;
  std::size_t measured = 0;  // steps after warm-up
  double seconds = 0;
  std::size_t traced = 0;  // index into the history
};

MedianStep median_step(const RunCli& o, const StepRecord& rec, const runtime::Comm& world) {
  const auto& history = rec.history;
  MedianStep m;
  m.warm = o.warmup >= 0 ? std::min<int>(o.warmup, static_cast<int>(history.size()) - 1)
                         : std::min(2, static_cast<int>(history.size()) - 1);
  std::vector<double> slowest;  // per measured step, the maximum over ranks (every rank has it)
  for (std::size_t i = static_cast<std::size_t>(m.warm); i < history.size(); ++i)
    slowest.push_back(history[i].seconds);
  world.all_reduce_max(slowest.data(), slowest.size());
  std::vector<std::size_t> order(slowest.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return slowest[a] < slowest[b]; });
  m.measured = slowest.size();
  m.seconds = slowest[order[order.size() / 2]];
  const std::size_t median_index = static_cast<std::size_t>(m.warm) + order[order.size() / 2];
  m.traced = median_index < rec.step_ops.size() ? median_index : history.size() - 1;
  return m;
}

// Every rank's traced ops and peak memory, gathered on rank 0 (collective; empty elsewhere).
struct Gathered {
  SimResult measured;
  std::vector<MemoryTrack> memory;  // per rank: the backend's tensors held after each op
  double rss_max = 0, device_max = 0;
  std::vector<RankClock> clocks;  // how the ranks' times were put on one clock (align_rank_clocks)
};

Gathered gather_measured(const runtime::Comm& world, const runtime::Trainer& t,
                         const std::vector<runtime::OpTiming>& traced_ops, const Workload& w) {
  std::ostringstream mine;
  mine.precision(17);
  mine << peak_rss_mib() << ' ' << t.backend().peak_device_bytes() / (1024.0 * 1024.0) << '|';
  for (const auto& ot : traced_ops)
    mine << ot.op << ' ' << ot.start_s << ' ' << ot.end_s << ' ' << ot.bytes << ' ';
  const auto blobs = world.gather_bytes(mine.str());
  Gathered g;
  if (world.rank() != 0) return g;
  g.measured.full = true;
  for (std::size_t r = 0; r < blobs.size(); ++r) {
    std::istringstream in_s(blobs[r]);
    std::string part;
    std::getline(in_s, part, '|');
    std::istringstream mem(part);
    double rss = 0, dev = 0;
    mem >> rss >> dev;
    g.rss_max = std::max(g.rss_max, rss);
    g.device_max = std::max(g.device_max, dev);
    std::getline(in_s, part);
    std::istringstream os(part);
    runtime::OpTiming ot;
    const int stage = w.stage_of(static_cast<int>(r));
    MemoryTrack track;
    track.rank = static_cast<int>(r);
    track.stage = stage;
    while (os >> ot.op >> ot.start_s >> ot.end_s >> ot.bytes) {
      g.measured.ops.push_back({static_cast<int>(r), stage, ot.op, ot.start_s, ot.end_s});
      track.samples.emplace_back(ot.end_s, ot.bytes);
    }
    // By time: the ops were issued in program order, which is not the streams' finishing order.
    std::stable_sort(track.samples.begin(), track.samples.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    g.measured.simulated_ranks.push_back(static_cast<int>(r));
    if (track.samples.empty()) continue;
    const auto peak = std::max_element(track.samples.begin(), track.samples.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
    std::tie(track.peak_s, track.peak_bytes) = *peak;
    g.memory.push_back(std::move(track));
  }
  // Each rank timed its ops from its own start of the step: one clock for all of them, the memory
  // tracks moved with their ranks' ops.
  if (blobs.size() > 1) {
    g.clocks = align_rank_clocks(w, g.measured.ops);
    for (MemoryTrack& track : g.memory)
      for (const RankClock& c : g.clocks)
        if (c.rank == track.rank) {
          for (auto& sample : track.samples) sample.first += c.applied_s;
          track.peak_s += c.applied_s;
        }
  }
  return g;
}

// Throughput, memory and the data-parallel traffic against the prediction (rank 0).
void print_measured(const ResolvedInputs& in, const Workload& w, const Prediction& predicted,
                    const MedianStep& m, const Gathered& g, const StepRecord& rec, int ranks) {
  const double tokens = static_cast<double>(in.plan.global_batch) * effective_seq_len(in.plan, in.model);
  const double flops_rate = w.model_flops / m.seconds;
  fmt::print(
      "median step {:.2f} ms over {} steps after {} warm-up (slowest rank): {:.0f} tokens/s, {:.2f} "
      "GFLOP/s model FLOPs "
      "({:.2f} GFLOP/s per rank); predicted {:.2f} ms on the {} profile\n",
      m.seconds * 1e3, m.measured, m.warm, tokens / m.seconds, flops_rate / 1e9, flops_rate / 1e9 / ranks,
      predicted.step_time_s * 1e3, in.cluster.name);
  if (const std::string levels = cache_levels_taken(in.model, in.cluster, in.plan); !levels.empty())
    fmt::print("the prediction's cache levels: {}\n", levels);
  fmt::print("peak resident memory: {:.1f} MiB (largest rank)\n", g.rss_max);
  if (g.device_max > 0)
    fmt::print(
        "peak device memory: {:.1f} MiB (largest rank; the model's {:.1f} MiB on {} less its {:.1f} MiB "
        "reserve: {:.1f} MiB)\n",
        g.device_max, predicted.memory.total / (1024.0 * 1024.0), in.cluster.name,
        predicted.memory.reserved / (1024.0 * 1024.0),
        (predicted.memory.total - predicted.memory.reserved) / (1024.0 * 1024.0));
  if (in.plan.dp > 1)
    fmt::print(
        "data-parallel gradient collectives (rank 0, {}): {:.3f} MB per step; the op graph's: {:.3f} "
        "MB\n",
        in.plan.grad_compression == GradCompression::kNone
            ? std::string("uncompressed")
            : to_string(in.plan.grad_compression) + " compressed",
        rec.history.back().dp_grad_bytes / 1e6, graph_dp_grad_bytes(w, 0) / 1e6);
}

// The run's metadata, in the measured trace and the summary.
nlohmann::json run_metadata(const runtime::Trainer& t, int ranks, const StepRecord& rec,
                            const MedianStep& m) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return {{"backend", t.backend().name()},
          {"device", t.backend().describe()},
          {"compute_precision", t.backend().compute_precision()},
          {"host", host},
          {"ranks", ranks},
          {"measured_step_s", rec.history[m.traced].seconds},
          {"traced_step", rec.history[m.traced].step},
          {"median_step_s", m.seconds}};
}

// How the ranks' clocks were aligned (align_rank_clocks), for the trace's and the summary's metadata.
nlohmann::json clocks_json(const std::vector<RankClock>& clocks) {
  nlohmann::json out = nlohmann::json::array();
  for (const RankClock& c : clocks)
    out.push_back({{"rank", c.rank},
                   {"reference", c.reference},
                   {"offset_s", c.offset_s},
                   {"spread_s", c.spread_s},
                   {"pairs", c.pairs},
                   {"by", c.by}});
  return out;
}

void print_clocks(const std::vector<RankClock>& clocks) {
  double lo = 0, hi = 0;
  int by_collectives = 0, by_transfers = 0, unjoined = 0;
  for (const RankClock& c : clocks) {
    lo = std::min(lo, c.offset_s);
    hi = std::max(hi, c.offset_s);
    by_collectives += c.by == "collectives";
    by_transfers += c.by == "pipeline transfers";
    unjoined += c.by == "none";
  }
  fmt::print(
      "ranks' clocks: each rank timed its ops from its own start of the step; put on rank {}'s by the "
      "collectives they shared ({} rank{}) and the pipeline transfers between stages ({}): offsets {:+.1f} "
      "to {:+.1f} us\n",
      clocks.front().rank, by_collectives, by_collectives == 1 ? "" : "s", by_transfers, lo * 1e6, hi * 1e6);
  if (unjoined > 0)
    fmt::print("ranks' clocks: {} rank{} shared no collective or transfer with the others and kept {}\n",
               unjoined, unjoined == 1 ? "" : "s", unjoined == 1 ? "its own" : "their own");
}

// The speeds the probe measured against the calibration's, printed and into the comparison.
void compare_speeds(const RunCli& o, const SpeedProbe& probe, double speed_factor,
                    nlohmann::json& comparison) {
  const runtime::CalibratedPeak& cal = *probe.calibrated;
  const double before = 100 * (probe.before / cal.flops_per_s - 1),
               after = 100 * (probe.after / cal.flops_per_s - 1);
  fmt::print(
      "the machine against its calibration: the {}^3 fp32 GEMM at {:.1f} GFLOP/s before the run "
      "and {:.1f} "
      "after, {:.1f} when calibrated ({:+.1f}%, {:+.1f}%)\n",
      cal.n, probe.before / 1e9, probe.after / 1e9, cal.flops_per_s / 1e9, before, after);
  comparison["gemm_speed_vs_calibration_pct"] = {before, after};
  if (probe.small) {
    const auto [sr, sk, sn] = cal.small;
    const double sb = 100 * (cal.small_s / probe.small_before_s - 1),
                 sa = 100 * (cal.small_s / probe.small_after_s - 1);
    fmt::print(
        "the {}x{}x{} GEMM in {:.2f} us before the run and {:.2f} after, {:.2f} when calibrated "
        "(speed "
        "{:+.1f}%, {:+.1f}%)\n",
        sr, sk, sn, probe.small_before_s * 1e6, probe.small_after_s * 1e6, cal.small_s * 1e6, sb, sa);
    comparison["small_gemm_speed_vs_calibration_pct"] = {sb, sa};
  }
  comparison["speed_adjusted"] = o.speed_adjust;
  if (o.speed_adjust)
    fmt::print(
        "predicted at the machine's speed before the run (--speed-adjust): the profile's device "
        "rates x{:.3f}\n",
        speed_factor);
}

// --predict: the predicted trace against the measured one, op by op (null on an error, with `code`
// set).
nlohmann::json compare_with_prediction(const RunCli& o, const std::string& predicted_path,
                                       const std::string& measured_path, const SpeedProbe& probe,
                                       double speed_factor, int& code) {
  auto pt = load_trace(predicted_path);
  auto mt = load_trace(measured_path);
  auto cmp = pt && mt ? compare_traces(*pt, *mt)
                      : Result<CompareReport>(Error((!pt ? pt.error() : mt.error()).message()));
  if (!cmp) {
    fmt::print(stderr, "error: {}\n", cmp.error().message());
    code = 1;
    return nullptr;
  }
  fmt::print("\npredicted against measured, op by op:\n");
  print_compare_report(*cmp);
  nlohmann::json comparison = compare_report_to_json(*cmp);
  if (probe.calibrated) compare_speeds(o, probe, speed_factor, comparison);
  return comparison;
}

nlohmann::json summary_json(const ResolvedInputs& in, const Workload& w, const Prediction& predicted,
                            const StepRecord& rec, const MedianStep& m, const Gathered& g,
                            const nlohmann::json& metadata) {
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& st : rec.history)
    steps.push_back({{"step", st.step},
                     {"loss", st.loss},
                     {"seconds", st.seconds},
                     {"skipped", st.skipped},
                     {"loss_scale", st.loss_scale},
                     {"dp_grad_bytes", st.dp_grad_bytes}});
  const double tokens = static_cast<double>(in.plan.global_batch) * effective_seq_len(in.plan, in.model);
  return {{"model", in.model.name},
          {"cluster", in.cluster.name},
          {"plan", plan_to_json(in.plan)},
          {"steps", steps},
          {"warmup_steps", m.warm},
          {"median_step_s", m.seconds},
          {"tokens_per_s", tokens / m.seconds},
          {"model_flops_per_step", w.model_flops},
          {"peak_rss_mib", g.rss_max},
          {"peak_device_mib", g.device_max},
          {"predicted_step_s", predicted.step_time_s},
          {"graph_dp_grad_bytes", graph_dp_grad_bytes(w, 0)},
          {"metadata", metadata}};
}

// What rank 0 reports after the steps: the measurements, the measured trace, the comparison with
// the prediction, the summary. Returns the exit code.
struct RunResults {
  const ResolvedInputs& in;
  const Workload& w;
  const Prediction& predicted;
  const StepRecord& rec;
  const MedianStep& m;
  const Gathered& g;
  const runtime::Trainer& t;
  const SpeedProbe& probe;
  double speed_factor;
  std::string predicted_path;
  int resumed_step;
};

int report_on_rank0(const RunCli& o, RunResults& r, int ranks) {
  int code = 0;
  print_measured(r.in, r.w, r.predicted, r.m, r.g, r.rec, ranks);
  nlohmann::json metadata = run_metadata(r.t, ranks, r.rec, r.m);
  if (!r.g.clocks.empty()) {
    metadata["clocks"] = clocks_json(r.g.clocks);
    print_clocks(r.g.clocks);
  }
  const std::string measured_path = !o.trace.empty() ? o.trace : o.predict ? temp_path("measured") : "";
  if (!measured_path.empty()) {
    // The ops are the median step's (or the last one's: see kMaxKeptTimings); the step time is
    // the median (robust to one noisy step).
    SimResult measured = r.g.measured;
    measured.prediction.step_time_s = r.m.seconds;
    // The memory track is the runtime's own: the bytes its backend's tensors held after each op.
    const StepAnnotations annotations{critical_path(r.w, measured), r.g.memory};
    if (Status s = write_chrome_trace(measured_path, r.w, measured, "measured", metadata, annotations); !s) {
      fmt::print(stderr, "error: {}\n", s.error().message());
      code = 2;
    } else if (!o.trace.empty()) {
      fmt::print("trace of step {}: {}\n", r.rec.history[r.m.traced].step, o.trace);
    }
  }
  nlohmann::json comparison;
  if (o.predict && code == 0)
    comparison = compare_with_prediction(o, r.predicted_path, measured_path, r.probe, r.speed_factor, code);
  if (o.predict) {  // traces the user did not ask to keep are scratch
    std::error_code ec;
    if (o.predicted_trace.empty()) std::filesystem::remove(r.predicted_path, ec);
    if (o.trace.empty()) std::filesystem::remove(measured_path, ec);
  }
  if (!o.summary.empty()) {
    nlohmann::json summary = summary_json(r.in, r.w, r.predicted, r.rec, r.m, r.g, metadata);
    if (!comparison.is_null()) summary["comparison"] = comparison;
    if (r.resumed_step >= 0) summary["resumed_from_step"] = r.resumed_step;
    if (Status s = write_file_atomically(o.summary, summary.dump(2) + "\n"); !s) {
      fmt::print(stderr, "error: {}\n", s.error().message());
      code = 2;
    } else {
      fmt::print("summary: {}\n", o.summary);
    }
  }
  return code;
}

// `foresight run` on every rank, phase by phase. Input errors exit 2 on every rank, reported by
// rank 0; every exit finalises MPI.
int run(const RunCli& o) {
  runtime::Comm world = runtime::Comm::world();
  const int rank = world.rank();
  // One GPU per rank: the launcher's local rank picks it on a multi-GPU node.
  auto backend = runtime::make_backend(o.backend, runtime::Comm::local_rank(rank));
  if (!backend) return input_fail(rank, "--backend " + o.backend + ": " + backend.error().message());
  if (o.resume && o.checkpoint_dir.empty()) return input_fail(rank, "--resume needs --checkpoint-dir");
  auto po = run_plan_options(o.plan, world.size());
  if (!po) return input_fail(rank, po.error().message());
  auto in = resolve_inputs(*po);
  if (!in) return input_fail(rank, in.error().message());
  if (Status s = check_before_run(o, *in, world.size()); !s) return input_fail(rank, s.error().message());
  SpeedProbe probe = find_speed_probe(o, **backend, world);
  if (o.speed_adjust && !probe.calibrated)
    return input_fail(
        rank,
        "--speed-adjust needs --predict and a --cluster profile written by `foresight calibrate` "
        "on the " +
            (*backend)->name() + " backend (" + o.plan.cluster + " has no calibrated peak GEMM for it)");
  probe.measure_before(world);
  const double speed_factor = o.speed_adjust ? probe.before / probe.calibrated->flops_per_s : 1.0;
  if (o.speed_adjust)
    for (DeviceGroup& g : in->cluster.node.devices) g.device = device_at_speed(g.device, speed_factor);
  const AnalyticModel am(in->model, in->cluster);
  const Prediction predicted = am.evaluate(in->plan);
  if (!predicted.fits())
    return input_fail(
        rank, in->plan_source + ": plan does not fit in memory: " + describe_memory(predicted.memory));
  auto w = lower(in->model, in->cluster, in->plan);
  if (!w) return input_fail(rank, w.error().with_context(in->plan_source).message());
  const std::string predicted_path = simulate_on_rank0(o, *in, *w, rank);
  auto trainer = make_trainer(o, *w, world, std::move(*backend));
  if (!trainer) return input_fail(rank, trainer.error().message());
  runtime::Trainer& t = **trainer;
  int resumed_step = -1;
  if (o.resume) {
    auto resumed = resume(o, t, rank);
    if (!resumed) {
      if (rank == 0) fmt::print(stderr, "error: {}\n", resumed.error().message());
      runtime::Comm::finalize();
      return 2;
    }
    resumed_step = *resumed;
  }
  if (rank == 0) print_run_header(*in, world.size(), t);
  StepRecord rec;
  if (std::optional<int> failed = run_steps(o, t, rank, rec)) {
    runtime::Comm::finalize();
    return *failed;
  }
  probe.measure_after(world);
  if (rec.history.empty()) {
    if (rank == 0)
      fmt::print("nothing to run: the checkpoint is already at step {} (--steps {})\n", t.steps_done(),
                 o.steps);
    runtime::Comm::finalize();
    return 0;
  }
  const MedianStep m = median_step(o, rec, world);
  const std::vector<runtime::OpTiming>& traced_ops =
      m.traced < rec.step_ops.size() ? rec.step_ops[m.traced] : t.timings();
  const Gathered g = gather_measured(world, t, traced_ops, *w);
  int code = 0;
  if (rank == 0) {
    RunResults r{*in, *w, predicted, rec, m, g, t, probe, speed_factor, predicted_path, resumed_step};
    code = report_on_rank0(o, r, world.size());
  }
  runtime::Comm::finalize();
  return code;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("run", "execute a plan for real (CPU: Eigen + MPI); launch with mpirun -np N");
  auto o = std::make_shared<RunCli>();
  o->plan.model = "tiny";
  o->plan.cluster = "cpu-local";
  add_plan_options(*cmd, o->plan);
  add_length_options(*cmd, *o);
  add_output_options(*cmd, *o);
  add_backend_option(*cmd, *o);
  add_checkpoint_options(*cmd, *o);
  add_predict_options(*cmd, *o);
  add_training_options(*cmd, *o);
  add_algorithm_options(*cmd, *o);
  return [o]() -> int { return run(*o); };
}

}  // namespace foresight::app
