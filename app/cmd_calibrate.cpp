// `foresight calibrate`: fits a hardware profile of this machine from microbenchmarks of the
// runtime's kernels (and MPI collectives when launched under mpirun).
#include <fmt/core.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "foresight/config.h"
#include "runtime/calibration/calibrate.h"
#include "runtime/communication/comm.h"
#include "sim/core/output_file.h"

namespace foresight::app {

namespace {

struct CalibrateCli {
  std::string base = "cpu-local";
  std::string out, name;
  std::string backend = "cpu";
  runtime::CalibrateOptions options;
  CLI::Option* base_option = nullptr;  // whether --cluster was given
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

// `foresight calibrate` on every rank: the backend and base profile, the measurements, and on rank
// 0 the points and the profile written.
int calibrate(const CalibrateCli& o) {
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
  return [o]() -> int { return calibrate(*o); };
}

}  // namespace foresight::app
