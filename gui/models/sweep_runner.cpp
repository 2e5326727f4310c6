// Sweep points on worker threads, with progress and cancel.
#include "gui/models/sweep_runner.h"

#include <chrono>
#include <thread>

namespace foresight::gui {

Result<SweepSpec> example_sweep() {
  const nlohmann::json doc = {
      {"base",
       {{"model", "llama3-8b"},
        {"cluster", "dgx-h100-ndr"},
        {"gpus", 16},
        {"plan", {{"tp", 2}, {"pp", 2}, {"global_batch", 256}, {"sequence_parallel", true}, {"zero_stage", 1}}}}},
      {"axes", {{"/gpus", {16, 32, 64}}, {"/cluster/node/nic/bandwidth", {"100Gbps", "200Gbps", "400Gbps"}}}}};
  return sweep_from_json(doc, "example sweep");
}

SweepOutcome run_sweep_points(const SweepSpec& spec, const std::function<void(std::uint64_t, std::uint64_t)>& progress,
                              const std::atomic<bool>* cancel, unsigned threads) {
  const auto t0 = std::chrono::steady_clock::now();
  SweepOutcome out;
  out.file = spec.file;
  out.engine = spec.engine;
  for (const auto& [pointer, values] : spec.axes) out.axes.push_back(pointer);
  const std::size_t n = spec.points.size();
  out.rows.assign(n, nlohmann::json());
  std::atomic<std::size_t> next{0}, done{0};
  auto stopped = [&] { return cancel && cancel->load(); };
  auto work = [&] {
    for (;;) {
      if (stopped()) return;
      const std::size_t i = next++;
      if (i >= n) return;
      // evaluate_point is thread-safe (run_sweep runs it in parallel too) and reports failures in
      // its row; an exception escaping a std::thread would end the program, so none may.
      try {
        out.rows[i] = evaluate_point(spec, spec.points[i]);
      } catch (const std::exception& e) {
        out.rows[i] = {{"index", i}, {"axes", spec.points[i].axes}, {"ok", false}, {"error", e.what()}};
      }
      ++done;
    }
  };
  const unsigned k = std::max(1u, std::min<unsigned>(threads ? threads : std::thread::hardware_concurrency(),
                                                     static_cast<unsigned>(std::max<std::size_t>(1, n))));
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < k; ++i) pool.emplace_back(work);
  // Report from this thread while the pool works.
  while (done.load() < n && !stopped()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (progress) progress(done.load(), n);
  }
  for (auto& t : pool) t.join();
  out.cancelled = done.load() < n;
  if (progress && !out.cancelled) progress(n, n);
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

void SweepWorker::run(std::shared_ptr<const SweepSpec> spec) {
  SweepOutcome out = run_sweep_points(
      *spec, [this](std::uint64_t done, std::uint64_t total) { Q_EMIT progress(done, total); }, cancel_.get());
  Q_EMIT finished(out);
}

SweepController::SweepController(QObject* parent) : QObject(parent) {
  qRegisterMetaType<SweepOutcome>();
  qRegisterMetaType<std::shared_ptr<const SweepSpec>>();
  auto* worker = new SweepWorker(cancel_);
  worker->moveToThread(&thread_);
  connect(&thread_, &QThread::finished, worker, &QObject::deleteLater);
  connect(this, &SweepController::run_requested, worker, &SweepWorker::run);
  connect(worker, &SweepWorker::progress, this, &SweepController::progress);
  connect(worker, &SweepWorker::finished, this, [this](const SweepOutcome& out) {
    running_ = false;
    Q_EMIT finished(out);
  });
  thread_.setObjectName(QStringLiteral("foresight sweep"));
  thread_.start();
}

SweepController::~SweepController() {
  cancel_->store(true);
  thread_.quit();
  thread_.wait();
}

bool SweepController::start(const SweepSpec& spec) {
  if (running_) return false;
  running_ = true;
  cancel_->store(false);
  Q_EMIT run_requested(std::make_shared<const SweepSpec>(spec));
  return true;
}

void SweepController::cancel() {
  if (running_) cancel_->store(true);
}

}  // namespace foresight::gui
