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

}  // namespace

Command add_run_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("run", "execute a plan for real (CPU: Eigen + MPI); launch with mpirun -np N");
  auto o = std::make_shared<RunCli>();
  o->plan.model = "tiny";
  o->plan.cluster = "cpu-local";
  add_plan_options(*cmd, o->plan);
  cmd->add_option("--steps", o->steps, "optimizer steps to run (in all, counting resumed ones)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--warmup", o->warmup,
                  "steps left out of the median step time (default: min(2, steps - 1))")
      ->check(int_in(0, 1000000));
  cmd->add_option("--trace", o->trace,
                  "write the measured Chrome trace of the median step (opens in Perfetto)");
  cmd->add_option("--summary", o->summary, "write a JSON summary (losses, step times, memory, prediction)");
  cmd->add_option("--backend", o->backend, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option(
      "--checkpoint-dir", o->checkpoint_dir,
      "save the training state here at the end (and every --checkpoint-every steps): one folder per step, "
      "step-NNNNNNNN, with every rank's file and a MANIFEST.json written last; the previous set is removed "
      "once the new one is complete");
  cmd->add_option("--checkpoint-every", o->checkpoint_every, "steps between checkpoints (0: only at the end)")
      ->check(int_in(0, 1000000));
  cmd->add_flag(
      "--resume", o->resume,
      "continue from the newest complete checkpoint set in --checkpoint-dir (all ranks agree on it)");
  cmd->add_flag("--predict", o->predict,
                "also simulate the plan (DES, every rank) on --cluster and compare op by op");
  cmd->add_option("--predicted-trace", o->predicted_trace,
                  "with --predict: where to keep the simulated trace");
  cmd->add_flag("--speed-adjust", o->speed_adjust,
                "with --predict on a profile that `calibrate` wrote: predict at the machine's speed just "
                "before the run "
                "(its peak GEMM timed again against the calibration's scales the device's rates)");
  cmd->add_option("--seed", o->seed, "seed of the parameters and the synthetic data")->capture_default_str();
  cmd->add_option("--lr", o->lr, "AdamW learning rate")->check(number_in(1e-12, 10))->capture_default_str();
  cmd->add_option("--loss-scale-alpha", o->algorithms.loss_scale_alpha,
                  "fp16: loss scale = dynamic scale x (1 - alpha x variance of the last 20 losses)")
      ->check(number_in(0, 1e6))
      ->group("Algorithms");
  cmd->add_option("--grad-decay", o->algorithms.grad_decay,
                  "beta: the optimizer steps on beta x previous + (1 - beta) x this step's gradients")
      ->check(number_in(0, 0.9999))
      ->group("Algorithms");
  cmd->add_option("--aradam-gamma", o->algorithms.aradam_gamma,
                  "ARAdam: per-parameter learning rate lr x (1 + gamma x |parameter|)")
      ->check(number_in(0, 1e6))
      ->group("Algorithms");
  return [o]() -> int {
    runtime::Comm world = runtime::Comm::world();
    const int rank = world.rank();
    // Every rank resolves the same inputs; only rank 0 reports input errors.
    auto input_fail = [&](const std::string& msg) {
      int code = 2;
      if (rank == 0) code = input_error(msg);
      runtime::Comm::finalize();
      return code;
    };
    // One GPU per rank: the launcher's local rank picks it on a multi-GPU node.
    auto backend = runtime::make_backend(o->backend, runtime::Comm::local_rank(rank));
    if (!backend) return input_fail("--backend " + o->backend + ": " + backend.error().message());
    if (o->resume && o->checkpoint_dir.empty()) return input_fail("--resume needs --checkpoint-dir");
    PlanOptions po = o->plan;
    // The CPU backend computes in fp32: unless the user asked for a precision, the plan says so,
    // and predictions of it (--predict) count 4-byte activations.
    if (!po.has("/precision") && po.plan_file.empty()) po.set("/precision", "fp32");
    // The degrees as given (the plan reader checks their ranges in resolve_inputs).
    auto degree = [&po](const char* field) {
      return std::clamp<long long>(po.integer(field).value_or(1), 1, 1 << 20);
    };
    const long long model_parallel = degree("/tp") * degree("/pp") * degree("/cp");
    if (po.plan_file.empty() && !po.gpus && world.size() % model_parallel != 0)
      return input_fail(
          fmt::format("--tp x --pp x --cp = {} needs a multiple of {} ranks, but {} {} launched",
                      model_parallel, model_parallel, world.size(), world.size() == 1 ? "was" : "were"));
    if (!po.gpus) po.gpus = world.size();
    if (!po.has("/global_batch") && po.plan_file.empty()) {
      // Default: enough micro-batches to fill the pipeline twice, per data-parallel rank.
      const long long tp = degree("/tp"), pp = degree("/pp"), mb = degree("/micro_batch");
      const long long dp = po.has("/dp") ? degree("/dp") : std::max<long long>(1, world.size() / (tp * pp));
      po.set("/global_batch", std::max<long long>(4, 2 * pp) * dp * mb);
    }
    auto in = resolve_inputs(po);
    if (!in) return input_fail(in.error().message());
    // Output paths are checked before the run, not found unwritable at its end.
    for (const auto& [path, option] : {std::pair{o->trace, "--trace"},
                                       {o->summary, "--summary"},
                                       {o->predicted_trace, "--predicted-trace"}})
      if (!path.empty())
        if (Status s = check_output_path(path, option); !s) return input_fail(s.error().message());
    if (!o->checkpoint_dir.empty() && !o->resume) {
      // The folder the sets go to: made now (every rank alike), so that a file in its place or a
      // read-only parent is said before the run rather than at its first save.
      std::error_code ec;
      std::filesystem::create_directories(o->checkpoint_dir, ec);
      if (!std::filesystem::is_directory(o->checkpoint_dir))
        return input_fail("--checkpoint-dir: " + o->checkpoint_dir + ": not a folder and cannot be made one" +
                          (ec ? " (" + ec.message() + ")" : ""));
      if (::access(o->checkpoint_dir.c_str(), W_OK) != 0)
        return input_fail("--checkpoint-dir: " + o->checkpoint_dir +
                          ": cannot write: " + std::strerror(errno));
    }
    if (Status s = runtime::check_runtime_plan(in->model, in->plan, in->plan_source); !s)
      return input_fail(s.error().message());
    if (in->plan.gpus() != world.size())
      return input_fail(fmt::format(
          "{}: the plan needs {} ranks (tp {} x pp {} x dp {}) but {} {} launched{}", in->plan_source,
          in->plan.gpus(), in->plan.tp, in->plan.pp, in->plan.dp, world.size(),
          world.size() == 1 ? "was" : "were",
          runtime::Comm::launched_by_mpi() || FORESIGHT_HAVE_MPI == 0
              ? ""
              : fmt::format(" (start it with mpirun -np {} foresight run ...)", in->plan.gpus())));
    // --predict on a profile that `calibrate` wrote: its peak GEMM timed again just before and just
    // after the run (rank 0, on a backend of its own on the trainer's device; the others wait), so
    // that a miss can be told apart from a machine running slower or faster than when it was
    // calibrated (a shared VM moves by 15-25% within minutes). With --speed-adjust the prediction
    // takes the speed before the run (device_at_speed); else only the printout and the summary do.
    std::optional<runtime::CalibratedPeak> calibrated;
    if (o->predict) calibrated = runtime::calibrated_peak(o->plan.cluster);
    std::unique_ptr<runtime::Backend> probe_backend;
    if (calibrated && rank == 0) {
      auto b = (*backend)->another();
      if (b && (*b)->name() == calibrated->backend) probe_backend = std::move(*b);
    }
    double no_probe = calibrated && rank == 0 && !probe_backend ? 1.0 : 0.0;
    world.all_reduce(&no_probe, 1);  // every rank decides alike
    if (no_probe > 0) calibrated.reset();
    if (o->speed_adjust && !calibrated)
      return input_fail(
          "--speed-adjust needs --predict and a --cluster profile written by `foresight calibrate` on the " +
          (*backend)->name() + " backend (" + o->plan.cluster + " has no calibrated peak GEMM for it)");
    // `f` timed on rank 0 (the others wait), its value on every rank.
    const auto on_rank0 = [&](auto&& f) {
      double v = rank == 0 ? f() : 0.0;
      world.all_reduce(&v, 1);
      return v;
    };
    const auto gemm_speed = [&] {
      const double n = calibrated->n;
      return on_rank0(
          [&] { return 2.0 * n * n * n / runtime::peak_gemm_seconds(*probe_backend, calibrated->n); });
    };
    // The calibration's small GEMM too, where the profile has it: the small kernels' speed moves
    // apart from the peak GEMM's on a shared VM.
    const auto small_call_s = [&] {
      return on_rank0([&] { return runtime::small_gemm_seconds(*probe_backend, calibrated->small); });
    };
    const bool small_probe = calibrated && calibrated->small_s > 0;
    const double small_before_s = small_probe ? small_call_s() : 0.0;
    const double speed_before = calibrated ? gemm_speed() : 0.0;
    const double speed_factor = o->speed_adjust ? speed_before / calibrated->flops_per_s : 1.0;
    if (o->speed_adjust)
      for (DeviceGroup& g : in->cluster.node.devices) g.device = device_at_speed(g.device, speed_factor);
    const AnalyticModel am(in->model, in->cluster);
    const Prediction predicted = am.evaluate(in->plan);
    if (!predicted.fits())
      return input_fail(in->plan_source +
                        ": plan does not fit in memory: " + describe_memory(predicted.memory));
    auto w = lower(in->model, in->cluster, in->plan);
    if (!w) return input_fail(w.error().with_context(in->plan_source).message());
    // --predict: the simulator runs the very workload the runtime is about to execute.
    std::string predicted_path;
    if (o->predict && rank == 0) {
      if (Status shape = check_cluster_shape(in->cluster, in->cluster.name); !shape)
        fail_all(rank, shape.error().message());
      SimOptions so;
      so.full = true;
      so.record = true;
      Simulator simulator(*w, so);
      auto sim = simulator.run();
      if (!sim) fail_all(rank, sim.error().message());
      predicted_path = o->predicted_trace.empty() ? temp_path("predicted") : o->predicted_trace;
      if (Status s = write_chrome_trace(predicted_path, *w, *sim, "predicted"); !s)
        fail_all(rank, s.error().message());
      fmt::print("predicted (DES on {}): {:.2f} ms per step\n", in->cluster.name,
                 sim->prediction.step_time_s * 1e3);
    }
    runtime::RunOptions ro;
    ro.seed = o->seed;
    ro.adam.lr = o->lr;
    ro.algorithms = o->algorithms;
    const runtime::AlgorithmOptions none;
    if ((!o->checkpoint_dir.empty() || o->resume) &&
        (o->algorithms.loss_scale_alpha != none.loss_scale_alpha ||
         o->algorithms.grad_decay != none.grad_decay))
      return input_fail(
          "--checkpoint-dir: the loss window and decayed gradients are not saved in checkpoints yet; "
          "run --loss-scale-alpha and --grad-decay without checkpoints");
    auto trainer = runtime::Trainer::create(*w, world, ro, std::move(*backend));
    if (!trainer) return input_fail(trainer.error().message());
    runtime::Trainer& t = **trainer;
    int resumed_step = -1;
    if (o->resume) {
      // Collective: the ranks agree on the newest checkpoint set that every one of them can load
      // (runtime/training/checkpoint.h), or all get the same error -- bad input, exit 2, never a hang.
      auto resumed = t.load_checkpoint(o->checkpoint_dir);
      if (!resumed) {
        if (rank == 0) fmt::print(stderr, "error: {}\n", resumed.error().message());
        runtime::Comm::finalize();
        return 2;
      }
      resumed_step = resumed->step;
      if (rank == 0) {
        for (const std::string& why : resumed->skipped) fmt::print("checkpoint set skipped: {}\n", why);
        fmt::print("resumed from {} at step {}\n", resumed->set_dir, t.steps_done());
      }
    }

    if (rank == 0) {
      fmt::print(
          "foresight run: model {} ({:.2f} M parameters), {} ranks: tp {} x pp {} x dp {}, {} micro-batches "
          "of {} x {} tokens, "
          "schedule {}, ZeRO-{}, recompute {}\n",
          in->model.name, in->model.total_params() / 1e6, world.size(), in->plan.tp, in->plan.pp, in->plan.dp,
          in->plan.micro_batches(), in->plan.micro_batch, effective_seq_len(in->plan, in->model),
          to_string(in->plan.schedule), in->plan.zero_stage, to_string(in->plan.recompute));
      const bool cpu = t.backend().name() == "cpu";
      const std::string precision_note =
          in->plan.precision == Precision::kFp32   ? ""
          : in->plan.precision == Precision::kFp16 ? "; fp16 dynamic loss scaling with fp16's range"
          : cpu ? "; the plan's " + to_string(in->plan.precision) + " applies on GPUs"
                : "; the plan's " + to_string(in->plan.precision) +
                      " applies to the GEMMs, the tensors are fp32";
      fmt::print("backend {}{}; MPI {}\n", t.backend().describe(), precision_note,
                 FORESIGHT_HAVE_MPI ? "yes" : "no (one rank)");
    }
    std::vector<runtime::StepStats> history;
    // Each step's op timings, for the trace of the median step (below), while they take at most
    // kMaxKeptTimings entries (24 bytes each); past that, the last step's.
    constexpr std::size_t kMaxKeptTimings = std::size_t{1} << 21;
    const bool want_ops = o->predict || !o->trace.empty();
    std::vector<std::vector<runtime::OpTiming>> step_ops;
    std::size_t kept_timings = 0;
    const int first = t.steps_done() + 1;
    for (int s = first; s <= o->steps; ++s) {
      maybe_inject_fault(rank, s);
      auto st = t.step();
      if (!st) fail_all(rank, st.error().message());
      history.push_back(*st);
      // step_ops[i] is history[i]'s: once one step is left out, no later one is kept.
      if (want_ops && step_ops.size() + 1 == history.size() &&
          kept_timings + t.timings().size() <= kMaxKeptTimings) {
        step_ops.push_back(t.timings());
        kept_timings += t.timings().size();
      }
      if (rank == 0)
        fmt::print("step {:>5}  loss {:.4f}  {:8.2f} ms{}\n", st->step, st->loss, st->seconds * 1e3,
                   st->skipped
                       ? fmt::format("  (fp16 overflow: step skipped, loss scale now {:g})", st->loss_scale)
                       : "");
      const bool save = !o->checkpoint_dir.empty() &&
                        (s == o->steps || (o->checkpoint_every > 0 && s % o->checkpoint_every == 0));
      // Collective: every rank gets the same outcome, so all stop together on a failed save.
      if (save)
        if (Status cs = t.save_checkpoint(o->checkpoint_dir); !cs) {
          if (rank == 0) fmt::print(stderr, "error: {}\n", cs.error().message());
          runtime::Comm::finalize();
          return 1;
        }
    }
    const double speed_after = calibrated ? gemm_speed() : 0.0;
    const double small_after_s = small_probe ? small_call_s() : 0.0;
    if (history.empty()) {
      if (rank == 0)
        fmt::print("nothing to run: the checkpoint is already at step {} (--steps {})\n", t.steps_done(),
                   o->steps);
      runtime::Comm::finalize();
      return 0;
    }

    // Median step time after warm-up, as the slowest rank saw it.
    const int warm = o->warmup >= 0 ? std::min<int>(o->warmup, static_cast<int>(history.size()) - 1)
                                    : std::min(2, static_cast<int>(history.size()) - 1);
    std::vector<double> slowest;  // per measured step, the maximum over ranks (every rank has it)
    for (std::size_t i = static_cast<std::size_t>(warm); i < history.size(); ++i)
      slowest.push_back(history[i].seconds);
    world.all_reduce_max(slowest.data(), slowest.size());
    // The traces are of the median step, so that their ops add up to the step time they are
    // compared with; every rank finds the same step from the same maxima.
    std::vector<std::size_t> order(slowest.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return slowest[a] < slowest[b]; });
    const double median = slowest[order[order.size() / 2]];
    const std::size_t median_step = static_cast<std::size_t>(warm) + order[order.size() / 2];
    const std::size_t traced = median_step < step_ops.size() ? median_step : history.size() - 1;
    const std::vector<runtime::OpTiming>& traced_ops =
        traced < step_ops.size() ? step_ops[traced] : t.timings();
    std::ostringstream mine;
    mine.precision(17);
    mine << peak_rss_mib() << ' ' << t.backend().peak_device_bytes() / (1024.0 * 1024.0) << '|';
    for (const auto& ot : traced_ops) mine << ot.op << ' ' << ot.start_s << ' ' << ot.end_s << ' ';
    const auto blobs = world.gather_bytes(mine.str());
    int code = 0;
    if (rank == 0) {
      double rss_max = 0, device_max = 0;
      SimResult measured;
      measured.full = true;
      for (std::size_t r = 0; r < blobs.size(); ++r) {
        std::istringstream in_s(blobs[r]);
        std::string part;
        std::getline(in_s, part, '|');
        std::istringstream mem(part);
        double rss = 0, dev = 0;
        mem >> rss >> dev;
        rss_max = std::max(rss_max, rss);
        device_max = std::max(device_max, dev);
        std::getline(in_s, part);
        std::istringstream os(part);
        runtime::OpTiming ot;
        const int stage = w->stage_of(static_cast<int>(r));
        while (os >> ot.op >> ot.start_s >> ot.end_s)
          measured.ops.push_back({static_cast<int>(r), stage, ot.op, ot.start_s, ot.end_s});
        measured.simulated_ranks.push_back(static_cast<int>(r));
      }
      const double tokens =
          static_cast<double>(in->plan.global_batch) * effective_seq_len(in->plan, in->model);
      const double flops_rate = w->model_flops / median;
      fmt::print(
          "median step {:.2f} ms over {} steps after {} warm-up (slowest rank): {:.0f} tokens/s, {:.2f} "
          "GFLOP/s model FLOPs "
          "({:.2f} GFLOP/s per rank); predicted {:.2f} ms on the {} profile\n",
          median * 1e3, slowest.size(), warm, tokens / median, flops_rate / 1e9,
          flops_rate / 1e9 / world.size(), predicted.step_time_s * 1e3, in->cluster.name);
      if (const std::string levels = cache_levels_taken(in->model, in->cluster, in->plan); !levels.empty())
        fmt::print("the prediction's cache levels: {}\n", levels);
      fmt::print("peak resident memory: {:.1f} MiB (largest rank)\n", rss_max);
      if (device_max > 0)
        fmt::print(
            "peak device memory: {:.1f} MiB (largest rank; the model's {:.1f} MiB on {} less its {:.1f} MiB "
            "reserve: {:.1f} MiB)\n",
            device_max, predicted.memory.total / (1024.0 * 1024.0), in->cluster.name,
            predicted.memory.reserved / (1024.0 * 1024.0),
            (predicted.memory.total - predicted.memory.reserved) / (1024.0 * 1024.0));
      const double graph_bytes = graph_dp_grad_bytes(*w, 0);
      if (in->plan.dp > 1)
        fmt::print(
            "data-parallel gradient collectives (rank 0, {}): {:.3f} MB per step; the op graph's: {:.3f} "
            "MB\n",
            in->plan.grad_compression == GradCompression::kNone
                ? std::string("uncompressed")
                : to_string(in->plan.grad_compression) + " compressed",
            history.back().dp_grad_bytes / 1e6, graph_bytes / 1e6);
      char host[256] = {0};
      gethostname(host, sizeof host - 1);
      const nlohmann::json extra = {{"backend", t.backend().name()},
                                    {"device", t.backend().describe()},
                                    {"compute_precision", t.backend().compute_precision()},
                                    {"host", host},
                                    {"ranks", world.size()},
                                    {"measured_step_s", history[traced].seconds},
                                    {"traced_step", history[traced].step},
                                    {"median_step_s", median}};
      const std::string measured_path = !o->trace.empty() ? o->trace
                                        : o->predict      ? temp_path("measured")
                                                          : "";
      if (!measured_path.empty()) {
        // The ops are the median step's (or the last one's: see kMaxKeptTimings); the step time
        // is the median (robust to one noisy step).
        measured.prediction.step_time_s = median;
        if (Status s = write_chrome_trace(measured_path, *w, measured, "measured", extra); !s) {
          fmt::print(stderr, "error: {}\n", s.error().message());
          code = 2;
        } else if (!o->trace.empty()) {
          fmt::print("trace of step {}: {}\n", history[traced].step, o->trace);
        }
      }
      nlohmann::json comparison;
      if (o->predict && code == 0) {
        auto pt = load_trace(predicted_path);
        auto mt = load_trace(measured_path);
        auto cmp = pt && mt ? compare_traces(*pt, *mt)
                            : Result<CompareReport>(Error((!pt ? pt.error() : mt.error()).message()));
        if (!cmp) {
          fmt::print(stderr, "error: {}\n", cmp.error().message());
          code = 1;
        } else {
          fmt::print("\npredicted against measured, op by op:\n");
          print_compare_report(*cmp);
          comparison = compare_report_to_json(*cmp);
          if (calibrated) {
            const double before = 100 * (speed_before / calibrated->flops_per_s - 1),
                         after = 100 * (speed_after / calibrated->flops_per_s - 1);
            fmt::print(
                "the machine against its calibration: the {}^3 fp32 GEMM at {:.1f} GFLOP/s before the run "
                "and {:.1f} "
                "after, {:.1f} when calibrated ({:+.1f}%, {:+.1f}%)\n",
                calibrated->n, speed_before / 1e9, speed_after / 1e9, calibrated->flops_per_s / 1e9, before,
                after);
            comparison["gemm_speed_vs_calibration_pct"] = {before, after};
            if (small_probe) {
              const auto [sr, sk, sn] = calibrated->small;
              const double sb = 100 * (calibrated->small_s / small_before_s - 1),
                           sa = 100 * (calibrated->small_s / small_after_s - 1);
              fmt::print(
                  "the {}x{}x{} GEMM in {:.2f} us before the run and {:.2f} after, {:.2f} when calibrated "
                  "(speed "
                  "{:+.1f}%, {:+.1f}%)\n",
                  sr, sk, sn, small_before_s * 1e6, small_after_s * 1e6, calibrated->small_s * 1e6, sb, sa);
              comparison["small_gemm_speed_vs_calibration_pct"] = {sb, sa};
            }
            comparison["speed_adjusted"] = o->speed_adjust;
            if (o->speed_adjust)
              fmt::print(
                  "predicted at the machine's speed before the run (--speed-adjust): the profile's device "
                  "rates x{:.3f}\n",
                  speed_factor);
          }
        }
      }
      if (o->predict) {  // traces the user did not ask to keep are scratch
        std::error_code ec;
        if (o->predicted_trace.empty()) std::filesystem::remove(predicted_path, ec);
        if (o->trace.empty()) std::filesystem::remove(measured_path, ec);
      }
      if (!o->summary.empty()) {
        nlohmann::json steps = nlohmann::json::array();
        for (const auto& st : history)
          steps.push_back({{"step", st.step},
                           {"loss", st.loss},
                           {"seconds", st.seconds},
                           {"skipped", st.skipped},
                           {"loss_scale", st.loss_scale},
                           {"dp_grad_bytes", st.dp_grad_bytes}});
        nlohmann::json summary = {{"model", in->model.name},
                                  {"cluster", in->cluster.name},
                                  {"plan", plan_to_json(in->plan)},
                                  {"steps", steps},
                                  {"warmup_steps", warm},
                                  {"median_step_s", median},
                                  {"tokens_per_s", tokens / median},
                                  {"model_flops_per_step", w->model_flops},
                                  {"peak_rss_mib", rss_max},
                                  {"peak_device_mib", device_max},
                                  {"predicted_step_s", predicted.step_time_s},
                                  {"graph_dp_grad_bytes", graph_bytes},
                                  {"metadata", extra}};
        if (!comparison.is_null()) summary["comparison"] = comparison;
        if (resumed_step >= 0) summary["resumed_from_step"] = resumed_step;
        if (Status s = write_file_atomically(o->summary, summary.dump(2) + "\n"); !s) {
          fmt::print(stderr, "error: {}\n", s.error().message());
          code = 2;
        } else {
          fmt::print("summary: {}\n", o->summary);
        }
      }
    }
    runtime::Comm::finalize();
    return code;
  };
}

}  // namespace foresight::app
