// `foresight sweep`: run a what-if sweep spec in parallel, resumable, shardable.
#include <fmt/core.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>

#include "app/commands.h"
#include "foresight/config.h"
#include "sim/sweep/sweep.h"

#if FORESIGHT_HAVE_MPI
#include <mpi.h>
#endif

namespace foresight::app {

namespace {

// Under mpirun (Open MPI, MPICH/PMI or PMIx environments), each rank takes its share of the
// points; all append to the same results.jsonl and rank 0 writes the CSV once everyone is done.
struct MpiWorld {
  int rank = 0, size = 1;
  bool active = false;
  MpiWorld() {
#if FORESIGHT_HAVE_MPI
    const bool launched =
        std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
    if (!launched) return;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) MPI_Init(nullptr, nullptr);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    active = true;
#endif
  }
  void barrier() const {
#if FORESIGHT_HAVE_MPI
    if (active) MPI_Barrier(MPI_COMM_WORLD);
#endif
  }
  ~MpiWorld() {
#if FORESIGHT_HAVE_MPI
    if (active) MPI_Finalize();
#endif
  }
};

// --shard "i/N" into so.shard and so.shards.
Status apply_shard(const std::string& shard, SweepOptions& so) {
  if (shard.empty()) return Status::Ok();
  int i = -1, n = -1;
  char extra = 0;
  if (std::sscanf(shard.c_str(), "%d/%d%c", &i, &n, &extra) != 2 || n < 1 || i < 0 || i >= n)
    return Error("--shard: \"" + shard + "\" is not i/N with 0 <= i < N, e.g. 0/4");
  so.shard = i;
  so.shards = n;
  return Status::Ok();
}

std::size_t points_in_shard(const SweepSpec& spec, const SweepOptions& so) {
  std::size_t n = 0;
  for (const auto& p : spec.points)
    if (p.index % static_cast<std::size_t>(so.shards) == static_cast<std::size_t>(so.shard)) ++n;
  return n;
}

// Progress on stderr while the sweep runs, on its own thread: a bar with rate and ETA on a
// terminal, a plain line every few seconds otherwise (from rank 0 only).
class ProgressReporter {
 public:
  ProgressReporter(const std::atomic<std::size_t>& done, std::size_t total, bool tty, bool rank0,
                   std::chrono::steady_clock::time_point t0)
      : done_(done), total_(total), tty_(tty), rank0_(rank0), t0_(t0), thread_([this] { loop(); }) {}
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;
  ~ProgressReporter() { stop(); }

  void stop() {
    finished_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  void loop() {
    auto last_plain = t0_;
    while (!finished_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
      const std::size_t d = done_;
      const double rate = el > 0 ? d / el : 0;
      const double eta = rate > 0 && total_ > d ? (total_ - d) / rate : 0;
      if (tty_) {
        const int width = 30;
        const int filled = total_ ? static_cast<int>(width * d / total_) : width;
        fmt::print(stderr, "\r[{}{}] {}/{} points  {:.1f}/s  ETA {:.0f}s   ", std::string(filled, '#'),
                   std::string(width - filled, '.'), d, total_, rate, eta);
      } else if (rank0_ && std::chrono::steady_clock::now() - last_plain > std::chrono::seconds(5)) {
        last_plain = std::chrono::steady_clock::now();
        fmt::print(stderr, "progress: {} points done, {:.1f}/s, ETA {:.0f}s\n", d, rate, eta);
      }
    }
  }

  const std::atomic<std::size_t>& done_;
  const std::size_t total_;
  const bool tty_, rank0_;
  const std::chrono::steady_clock::time_point t0_;
  std::atomic<bool> finished_{false};
  std::thread thread_;  // last: starts once the members it reads are set
};

// run_sweep with an exception turned into an error (the reporter thread must still be joined).
Result<SweepStatus> run_sweep_guarded(const SweepSpec& spec, const SweepOptions& so,
                                      std::atomic<std::size_t>& done) {
  try {
    return run_sweep(spec, so, &done);
  } catch (const std::exception& e) {
    return Error(std::string("internal error: ") + e.what());
  }
}

struct SweepFlags {
  std::string spec, out = "sweep-out", shard;
  unsigned jobs = 0;
};

// Runs the loaded spec's points of this shard (and MPI rank) with progress; rank 0 prints the
// summary.
int run_and_report(const SweepFlags& o, const SweepSpec& spec, const SweepOptions& so, const MpiWorld& mpi) {
  std::atomic<std::size_t> done{0};
  const bool tty = isatty(fileno(stderr)) != 0 && mpi.rank == 0;
  const std::size_t shard_points = points_in_shard(spec, so);
  if (mpi.rank == 0)
    fmt::print(stderr, "sweep {}: {} points ({} in this shard{}), engine {}, output {}\n", o.spec,
               spec.points.size(), shard_points,
               mpi.size > 1 ? fmt::format(" of {} MPI ranks", mpi.size) : "", spec.engine, o.out);
  const auto t0 = std::chrono::steady_clock::now();
  Result<SweepStatus> st = Error("sweep did not run");
  {
    ProgressReporter reporter(done, shard_points, tty, mpi.rank == 0, t0);
    st = run_sweep_guarded(spec, so, done);
    reporter.stop();
  }
  if (tty) fmt::print(stderr, "\n");
  mpi.barrier();
  if (!st) return input_error(st.error().message());
  if (mpi.size > 1 && mpi.rank == 0) FS_RETURN_CLI_IF_ERROR(write_sweep_csv(spec, o.out));
  if (mpi.rank != 0) return 0;
  const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print(
      "{} points in this shard: {} computed, {} already done (resumed); {} did not fit or were invalid "
      "(recorded with the reason). {:.2f} s.\nresults: {} and {}\n",
      st->total, st->computed, st->skipped, st->failed, el, st->jsonl, st->csv);
  return 0;
}

}  // namespace

Command add_sweep_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("sweep", "run a what-if sweep (spec: base + axes by JSON pointer)");
  auto o = std::make_shared<SweepFlags>();
  cmd->add_option("spec", o->spec, "sweep spec JSON")->required();
  cmd->add_option("--out,-o", o->out, "output folder (results.jsonl, results.csv)")->capture_default_str();
  cmd->add_option("--shard", o->shard, "i/N: run the points whose index % N == i (job arrays)");
  cmd->add_option("--jobs,-j", o->jobs, "worker threads (default: all cores)");
  return [o]() -> int {
    SweepOptions so;
    so.out_dir = o->out;
    so.threads = o->jobs;
    FS_RETURN_CLI_IF_ERROR(apply_shard(o->shard, so));
    const MpiWorld mpi;
    if (mpi.size > 1) {  // MPI ranks subdivide this shard
      so.shard = so.shard * mpi.size + mpi.rank;
      so.shards = so.shards * mpi.size;
    }
    so.write_csv = mpi.size == 1;
    // The output folder checked before the spec's points are built and checked (which can be long).
    {
      std::error_code ec;
      if (std::filesystem::exists(o->out, ec) && !std::filesystem::is_directory(o->out, ec))
        return input_error("--out: " + o->out + ": not a folder");
    }
    auto spec = load_sweep(o->spec);
    if (!spec) return input_error(spec.error().message());
    return run_and_report(*o, *spec, so, mpi);
  };
}

}  // namespace foresight::app
