// `foresight calibrate`: fits a hardware profile of this machine from microbenchmarks of the
// runtime's kernels (and MPI collectives when launched under mpirun).
#include <fmt/core.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "foresight/config.h"
#include "runtime/calibration/calibrate.h"
#include "runtime/calibration/nccl_tests.h"
#include "runtime/communication/comm.h"
#include "sim/compare/foreign_trace.h"
#include "sim/core/output_file.h"
#include "sim/core/units.h"
#include "sim/des/simulator.h"
#include "sim/des/trace.h"
#include "sim/spec/job.h"
#include "sim/workload/workload.h"

namespace foresight::app {

namespace {

struct CalibrateCli {
  std::string base = "cpu-local";
  std::string out, name;
  std::string backend = "cpu";
  runtime::CalibrateOptions options;
  CLI::Option* base_option = nullptr;  // whether --cluster was given
  std::vector<std::string> nccl_logs;  // --from-nccl-tests: files or folders
  std::vector<std::string> traces;     // --from-trace: PyTorch profiler traces, files or folders
  std::string predicted;               // --predicted: Foresight's trace of the same plan
  std::string model;                   // --model: the prediction's model, where not a preset
  int trace_passes = 4;                // --trace-passes: fits, the plan re-predicted after each
  runtime::NcclTestsColumn nccl_column = runtime::NcclTestsColumn::kOutOfPlace;
};

void add_profile_options(CLI::App& cmd, CalibrateCli& o) {
  o.base_option =
      cmd.add_option("--cluster,-c", o.base,
                     "the profile to start from (its capacities, prices and network layout are kept)")
          ->capture_default_str();
  cmd.add_option("--out,-o", o.out, "where to write the profile (default: hwprofiles/local-HOST.json)");
  cmd.add_option("--name", o.name, "profile name (default: local-HOST)");
}

void add_measurement_options(CLI::App& cmd, CalibrateCli& o) {
  cmd.add_option("--backend", o.backend, "cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd.add_option(
         "--passes", o.options.passes,
         "rounds of kernel measurements, each point keeping its fastest (a shared machine's slow spells)")
      ->check(CLI::Range(1, 20))
      ->capture_default_str();
  cmd.add_option(
         "--steady-retries", o.options.steady_retries,
         "measure the kernels again, up to this many times, when the machine's speed (a peak GEMM before and "
         "after them) moved by more than 10% meanwhile")
      ->check(CLI::Range(0, 10))
      ->capture_default_str();
}

// Each kernel point against its fit, and each collective point with nccl-tests' columns (algbw =
// size / time, busbw = algbw x the collective's bus factor) against the model.
void print_points(const runtime::Calibration& cal) {
  fmt::print("\n{:<11} {:<28} {:>12} {:>12} {:>8}\n", "kind", "shape", "measured us", "fitted us", "error");
  bool collectives = false;
  for (const auto& p : cal.points) {
    collectives = collectives || p.bus_factor > 0;
    if (p.bus_factor > 0) continue;
    fmt::print("{:<11} {:<28} {:>12.2f} {:>12.2f} {:>+7.1f}%\n", p.kind, p.shape, p.seconds * 1e6,
               p.fitted_s * 1e6, 100 * (p.fitted_s - p.seconds) / p.seconds);
  }
  if (!collectives) return;
  fmt::print("\n{:<22} {:>9} {:>12} {:>11} {:>11} {:>12} {:>8}\n", "collective", "size", "measured us",
             "algbw GB/s", "busbw GB/s", "model us", "error");
  for (const auto& p : cal.points)
    if (p.bus_factor > 0)
      fmt::print("{:<22} {:>9} {:>12.2f} {:>11.2f} {:>11.2f} {:>12.2f} {:>+7.1f}%{}\n", p.kind, p.shape,
                 p.seconds * 1e6, p.work / p.seconds / 1e9, p.bus_factor * p.work / p.seconds / 1e9,
                 p.fitted_s * 1e6, 100 * (p.fitted_s - p.seconds) / p.seconds, p.in_fit ? "  (fitted)" : "");
}

void print_written(const runtime::Calibration& cal, const std::string& profile_name,
                   const std::string& path) {
  const DeviceSpec& d = cal.device;
  fmt::print(
      "\nprofile {} written to {}: peak {:.1f} GFLOP/s, GEMM efficiency {:.2f}, attention efficiency "
      "{:.2f}, "
      "streaming {:.1f} GB/s (the optimizer x{:.2f}), kernel overhead {:.2f} us{}\n",
      profile_name, path, d.peak(DType::kFp32) / 1e9, d.gemm_efficiency, d.attention_efficiency,
      d.memory_bandwidth / 1e9, d.optimizer_efficiency, d.kernel_overhead_s * 1e6,
      cal.fabric_measured
          ? fmt::format(", interconnect {:.2f} GB/s and {:.2f} us", cal.fabric.bandwidth / 1e9,
                        cal.fabric.latency_s * 1e6)
          : " (one rank: interconnect kept from the base profile; run under mpirun to fit it)");
  fmt::print("use it with --cluster {}\n", path);
}

// The logs named by --from-nccl-tests: files as given, and a folder's regular files whose names hold
// "_perf" (all_reduce_perf.log, ...), by name.
Result<std::vector<runtime::NcclTestsLog>> read_nccl_logs(const std::vector<std::string>& args) {
  std::vector<runtime::NcclTestsLog> logs;
  for (const std::string& a : args) {
    std::vector<std::string> files;
    std::error_code ec;
    if (std::filesystem::is_directory(a, ec)) {
      for (const auto& e : std::filesystem::directory_iterator(a, ec))
        if (e.is_regular_file() && e.path().filename().string().find("_perf") != std::string::npos)
          files.push_back(e.path().string());
      std::sort(files.begin(), files.end());
      if (files.empty())
        return Error("--from-nccl-tests " + a +
                     ": the folder holds no file whose name has \"_perf\" (all_reduce_perf.log, ...)");
    } else {
      files.push_back(a);
    }
    for (const std::string& f : files) {
      auto log = runtime::load_nccl_tests_log(f);
      if (!log) return log.error().with_context("--from-nccl-tests");
      logs.push_back(std::move(*log));
    }
  }
  return logs;
}

// Each log's sizes against the profile's prediction, busbw as nccl-tests reports it: with `rows`
// every size, else each log's median and largest |error|.
void print_nccl_checks(const std::vector<runtime::NcclTestsCheck>& checks, bool rows) {
  if (rows)
    fmt::print("\n{:<20} {:>5} {:>10} {:>12} {:>14} {:>8}\n", "collective", "ranks", "size", "logged GB/s",
               "predicted GB/s", "error");
  std::map<std::string, std::vector<double>> errors;  // by file
  std::vector<std::string> order;
  for (const auto& k : checks) {
    if (!errors.count(k.file)) order.push_back(k.file);
    auto& e = errors[k.file];
    if (k.failure.empty()) e.push_back(std::abs(k.error_pct));
    if (!rows) continue;
    if (!k.failure.empty())
      fmt::print("{:<20} {:>5} {:>10} {:>12.2f} {:>14} {}\n", k.collective, k.ranks,
                 format_quantity(k.bytes, Dimension::kBytes), k.logged_busbw / 1e9, "-", k.failure);
    else
      fmt::print("{:<20} {:>5} {:>10} {:>12.2f} {:>14.2f} {:>+7.1f}%\n", k.collective, k.ranks,
                 format_quantity(k.bytes, Dimension::kBytes), k.logged_busbw / 1e9, k.predicted_busbw / 1e9,
                 k.error_pct);
  }
  fmt::print("\n");
  for (const auto& f : order) {
    auto& e = errors[f];
    if (e.empty()) {
      fmt::print("  {}: not compared\n", f);
      continue;
    }
    std::sort(e.begin(), e.end());
    fmt::print("  {}: {} sizes, median |error| {:.1f}%, largest {:.1f}%\n", f, e.size(), e[e.size() / 2],
               e.back());
  }
}

// `foresight calibrate --from-nccl-tests`: no measurement, no MPI; the logs into a profile.
int calibrate_from_nccl_tests(const CalibrateCli& o) {
  if (o.base_option->count() == 0)
    return input_error(
        "--from-nccl-tests: name the profile the logs were measured on with --cluster (e.g. "
        "--cluster dgx-h100-ndr): its devices, node and network are kept, the fabric fitted");
  auto cluster = load_cluster(o.base);
  if (!cluster) return input_error(cluster.error().with_context("--cluster").message());
  auto logs = read_nccl_logs(o.nccl_logs);
  if (!logs) return input_error(logs.error().message());
  const std::string profile_name = o.name.empty() ? cluster->name + "-nccl-tests" : o.name;
  const std::string path = o.out.empty() ? "hwprofiles/" + profile_name + ".json" : o.out;
  FS_RETURN_CLI_IF_ERROR(check_output_path(path, o.out.empty() ? "the profile (--out)" : "--out"));
  for (const auto& l : *logs) {
    fmt::print("{}: {}, {} rank{} on {} host{}, {} sizes{}\n", l.file, l.program, l.ranks,
               l.ranks == 1 ? "" : "s", l.hosts.size(), l.hosts.size() == 1 ? "" : "s", l.rows.size(),
               l.version.empty() ? "" : ", nccl-tests " + l.version);
    for (const auto& w : l.warnings) fmt::print("  warning: {}\n", w);
  }
  fmt::print("\nbefore calibration, busbw predicted on profile {} against the logs':", cluster->name);
  print_nccl_checks(runtime::check_against_nccl_tests(*cluster, *logs, o.nccl_column), false);
  auto cal = runtime::calibrate_from_nccl_tests(*cluster, *logs, o.nccl_column);
  if (!cal) return input_error(cal.error().message());
  fmt::print("\nfitted:\n");
  for (const auto& f : cal->fitted) fmt::print("  {}\n", f);
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  const std::string provenance =
      fmt::format("{}, `foresight calibrate --from-nccl-tests` {}", date, FORESIGHT_VERSION);
  const auto j = runtime::nccl_tests_cluster_json(*cal, profile_name, provenance);
  FS_RETURN_CLI_IF_ERROR(write_file_atomically(path, j.dump(2) + "\n"));
  // The check reads the written profile back: what a plan will be priced with.
  auto written = load_cluster(path);
  if (!written) return input_error(written.error().with_context("the written profile").message());
  fmt::print("\nafter calibration, busbw predicted on profile {} (as written to {}) against the logs':",
             profile_name, path);
  print_nccl_checks(runtime::check_against_nccl_tests(*written, *logs, o.nccl_column), true);
  fmt::print("use it with --cluster {}\n", path);
  return 0;
}

// A folder of scratch files, removed with everything in it when it goes out of scope.
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    path = std::filesystem::temp_directory_path() / fmt::format("foresight-calibrate-{}", ::getpid());
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
};

// The job the prediction's trace ran: its model (--model, else the preset its metadata names) and
// plan, resolved on the base profile. Resolved once; each pass swaps in the fitted profile.
Result<Job> traced_job(const Trace& first, const std::string& model, const std::string& base) {
  if (!first.metadata.contains("plan") || !first.metadata["plan"].is_object())
    return Error(first.file + ": its metadata holds no plan");
  JobRequest req;
  req.model = model;
  req.cluster = base;
  req.model_label = "the prediction's model (--model)";
  FS_ASSIGN_OR_RETURN(req.plan, plan_from_json(first.metadata["plan"], first.file + ": metadata/plan"));
  return resolve_job(req);
}

// The traced plan predicted again on a fitted profile (sized to the job as the base was), as
// `simulate --trace` predicted it first, and compared with the measured traces.
Result<ForeignCompareReport> repredict(const Trace& first, const Job& job,
                                       const std::vector<ForeignTrace>& measured, const ClusterSpec& fitted,
                                       const ScratchDir& scratch) {
  ClusterSpec sized = fitted;
  FS_RETURN_IF_ERROR(resize_cluster(sized, job.cluster.nodes * job.cluster.node.accelerators(), "the job"));
  FS_ASSIGN_OR_RETURN(Workload w, lower(job.model, sized, job.plan));
  SimOptions so;
  so.full = first.metadata.value("symmetric", false) == false;
  so.record = true;
  Simulator sim(w, so);
  FS_ASSIGN_OR_RETURN(SimResult r, sim.run());
  const std::string trace = (scratch.path / "predicted.json").string();
  FS_RETURN_IF_ERROR(write_chrome_trace(trace, w, r, "predicted"));
  FS_ASSIGN_OR_RETURN(Trace again, load_trace(trace));
  again.file = first.file + " re-predicted";
  return compare_foreign(again, measured);
}

// `foresight calibrate --from-trace`: the kinds' measured times against the prediction's, into the
// rates each kind is priced with; then, while it brings the kinds closer, the plan predicted again
// on the fitted profile and what is still off fitted again (--trace-passes).
int calibrate_from_traces(const CalibrateCli& o) {
  if (o.base_option->count() == 0 || o.predicted.empty())
    return input_error(
        "--from-trace: give --cluster (the profile the prediction used) and --predicted (its "
        "`foresight simulate --full --trace` of the plan the traces ran)");
  auto cluster = load_cluster(o.base);
  if (!cluster) return input_error(cluster.error().with_context("--cluster").message());
  auto pred = load_trace(o.predicted);
  if (!pred) return input_error(pred.error().with_context("--predicted").message());
  if (pred->metadata.contains("cluster") && pred->metadata["cluster"] != cluster->name)
    return input_error(fmt::format("--predicted {} was predicted on cluster {}, not on --cluster {}",
                                   o.predicted, pred->metadata["cluster"].dump(), cluster->name));
  const auto paths = measured_paths(o.traces);
  if (paths.empty()) return input_error("--from-trace: the folders hold no .json traces");
  auto measured = load_measured(paths, "");
  if (!measured) return input_error(measured.error().message());
  auto report = compare_foreign(*pred, *measured);
  if (!report) return input_error(report.error().message());
  const std::string model =
      !o.model.empty() ? o.model : pred->metadata.value("model", std::string("(no model in its metadata)"));
  Result<TraceCalibration> cal = Error("");
  std::string one_pass;  // why the plan was not predicted again
  Result<Job> job = Error("");
  if (o.trace_passes > 1) {
    job = traced_job(*pred, model, o.base);
    if (!job) one_pass = job.error().message();
  }
  if (o.trace_passes > 1 && job) {
    ScratchDir scratch;
    cal = calibrate_from_trace_passes(
        *cluster, *report,
        [&](const ClusterSpec& c) { return repredict(*pred, *job, *measured, c, scratch); }, o.trace_passes);
  } else {
    cal = calibrate_from_trace(*cluster, *report);
  }
  if (!cal) return input_error(cal.error().message());
  const std::string profile_name = o.name.empty() ? cluster->name + "-from-trace" : o.name;
  const std::string path = o.out.empty() ? "hwprofiles/" + profile_name + ".json" : o.out;
  FS_RETURN_CLI_IF_ERROR(check_output_path(path, o.out.empty() ? "the profile (--out)" : "--out"));
  nlohmann::json j = cluster_to_json(cal->cluster);
  j["name"] = profile_name;
  j["description"] = std::string("calibrated from measured traces by `foresight calibrate --from-trace` ") +
                     FORESIGHT_VERSION;
  j["sources"] = cal->sources;
  j["sources"]["all"] = "the rest as in profile " + cluster->name + " (its own sources)";
  FS_RETURN_CLI_IF_ERROR(write_file_atomically(path, j.dump(2) + "\n"));
  auto written = load_cluster(path);
  if (!written) return input_error(written.error().with_context("the written profile").message());
  fmt::print("step: predicted {:.3f} ms, measured {:.3f} ms ({:+.1f}%) on {} before calibration\nfitted:\n",
             report->predicted_step_s * 1e3, report->measured_step_s * 1e3, report->step_time_error_pct,
             cluster->name);
  for (const auto& f : cal->fitted) fmt::print("  {}\n", f);
  if (!one_pass.empty())
    fmt::print("one pass: the plan could not be predicted again to check it ({}); --model names its model\n",
               one_pass);
  for (const TraceResidual& r : cal->residuals) {
    fmt::print("after {} pass{}, the plan predicted again on the profile:", r.passes,
               r.passes == 1 ? "" : "es");
    for (const auto& k : r.kinds) fmt::print(" {} {:+.1f}%", k.kind, k.error_pct);
    fmt::print(" (mean |error| {:.1f}%)\n", r.mean_abs_pct);
  }
  if (!cal->residuals.empty() && cal->residuals.back().passes < o.trace_passes &&
      cal->residuals.back().max_abs_pct > 1.0)
    fmt::print("stopped after {} pass{}: another did not bring the kinds closer\n", cal->passes,
               cal->passes == 1 ? "" : "es");
  fmt::print("profile {} written to {}; predict other plans with --cluster {}\n", profile_name, path, path);
  return 0;
}

// `foresight calibrate` on every rank: the backend and base profile, the measurements, and on rank
// 0 the points and the profile written.
int calibrate(const CalibrateCli& o) {
  if (!o.nccl_logs.empty()) return calibrate_from_nccl_tests(o);
  if (!o.traces.empty()) return calibrate_from_traces(o);
  runtime::Comm world = runtime::Comm::world();
  const int rank = world.rank();
  auto finish = [&](int code) {
    runtime::Comm::finalize();
    return code;
  };
  // Input errors: every rank exits 2, rank 0 says why.
  auto input_fail = [&](const std::string& message) {
    if (rank == 0) input_error(message);
    return finish(2);
  };
  if (o.backend == "cuda" && o.base_option->count() == 0)
    return input_fail(
        "--backend cuda: name the GPU's profile to start from with --cluster (e.g. --cluster h200-ndr); "
        "cpu-local describes this machine's CPU");
  auto be = runtime::make_backend(o.backend, runtime::Comm::local_rank(rank));
  if (!be) return input_fail("--backend " + o.backend + ": " + be.error().message());
  auto cluster = load_cluster(o.base);
  if (!cluster) return input_fail(cluster.error().with_context("--cluster").message());
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  const std::string profile_name = o.name.empty() ? std::string("local-") + host : o.name;
  const std::string path = o.out.empty() ? "hwprofiles/" + profile_name + ".json" : o.out;
  // The profile's path is checked before the minute of measuring, not found unwritable after it.
  if (Status s = check_output_path(path, o.out.empty() ? "the profile (--out)" : "--out"); !s)
    return input_fail(s.error().message());
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  const std::string provenance =
      fmt::format("{} on {}, `foresight calibrate` {}, backend {}, {} rank{}", date, host, FORESIGHT_VERSION,
                  (*be)->describe(), world.size(), world.size() == 1 ? "" : "s");
  if (rank == 0)
    fmt::print("calibrating the {} backend on {} ({} rank{}) from profile {}\n", (*be)->describe(), host,
               world.size(), world.size() == 1 ? "" : "s", cluster->name);
  auto progress = [&](const std::string& line) {
    if (rank == 0) {
      fmt::print("  {}\n", line);
      std::fflush(stdout);
    }
  };
  auto cal = runtime::calibrate(*cluster, world, **be, progress, o.options);
  if (!cal) {
    if (rank == 0) fmt::print(stderr, "error: {}\n", cal.error().message());
    return finish(1);
  }
  if (rank != 0) return finish(0);
  print_points(*cal);
  const auto j = runtime::calibrated_cluster_json(*cal, *cluster, profile_name, provenance);
  if (Status s = write_file_atomically(path, j.dump(2) + "\n"); !s) {
    input_error(s.error().message());
    return finish(2);
  }
  print_written(*cal, profile_name, path);
  return finish(0);
}

}  // namespace

Command add_calibrate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("calibrate",
                                 "measure this machine and write a calibrated hardware profile "
                                 "(run under mpirun -np 2+ to fit the interconnect too)");
  auto o = std::make_shared<CalibrateCli>();
  add_profile_options(*cmd, *o);
  add_measurement_options(*cmd, *o);
  cmd->add_option(
         "--from-nccl-tests", o->nccl_logs,
         "fit the node's fabric (logs of one host) or the NICs (logs across hosts) from nccl-tests "
         "output (all_reduce_perf, all_gather_perf, reduce_scatter_perf, sendrecv_perf, alltoall_perf; "
         "files, or folders of *_perf* files) instead of measuring; needs --cluster")
      ->check(CLI::ExistingPath);
  cmd->add_option(
         "--from-trace", o->traces,
         "fit the device's GEMM, attention, streaming and optimizer rates and the fabric from PyTorch "
         "profiler traces (one per rank, or folders) of a plan, against --predicted; needs --cluster")
      ->check(CLI::ExistingPath);
  cmd->add_option("--predicted", o->predicted,
                  "with --from-trace: `foresight simulate --full --trace` of the same plan on --cluster")
      ->check(CLI::ExistingFile);
  cmd->add_option("--trace-passes", o->trace_passes,
                  "with --from-trace: fits at most, the plan predicted again on the profile after each and "
                  "what is still off fitted again (1: one fit)")
      ->check(CLI::Range(1, 20))
      ->capture_default_str();
  cmd->add_option("--model", o->model,
                  "with --from-trace: the prediction's model (preset or file), to predict its plan again; "
                  "default: the preset its trace names");
  const std::map<std::string, runtime::NcclTestsColumn> columns = {
      {"out-of-place", runtime::NcclTestsColumn::kOutOfPlace},
      {"in-place", runtime::NcclTestsColumn::kInPlace}};
  cmd->add_option("--nccl-tests-column", o->nccl_column, "which of nccl-tests' time columns to fit")
      ->transform(CLI::CheckedTransformer(columns, CLI::ignore_case))
      ->capture_default_str();
  return [o]() -> int { return calibrate(*o); };
}

}  // namespace foresight::app
