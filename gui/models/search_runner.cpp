// Plan search on a worker thread, with progress and cancellation.
#include "gui/models/search_runner.h"

#include <fmt/core.h>

#include "sim/spec/presets.h"

namespace foresight::gui {

namespace {
// Thrown from the progress callback to stop search(). search() calls progress only from the
// calling thread between waves of parallel work, and holds its state in RAII objects, so the
// exception unwinds it cleanly. (search() has no cancellation parameter of its own.)
struct SearchCancelled {};
}  // namespace

SearchOutcome run_search(const SearchRequest& request,
                         const std::function<void(std::uint64_t, std::uint64_t)>& progress,
                         const std::atomic<bool>* cancel) {
  SearchOutcome out;
  out.request = request;
  auto src = resolve_spec(PresetKind::kModel, request.model);
  if (!src) {
    out.error = src.error().with_context("model").message();
    return out;
  }
  auto model = model_from_text(src->text, src->file);
  if (!model) {
    out.error = model.error().with_context("model").message();
    return out;
  }
  auto cluster = load_cluster(request.cluster);
  if (!cluster) {
    out.error = cluster.error().with_context("cluster").message();
    return out;
  }
  if (request.gpus < 1) {
    out.error = "GPUs: must be >= 1";
    return out;
  }
  if (request.global_batch < 1) {
    out.error = "global batch: must be >= 1";
    return out;
  }
  SearchOptions o;
  o.gpus = request.gpus;
  o.global_batch = request.global_batch;
  o.objective = request.objective;
  o.top_k = std::max(1, request.top_k);
  o.resimulate = std::max(0, request.resimulate);
  o.min_headroom = request.min_headroom;
  o.threads = request.threads;
  auto report = [&](std::uint64_t done, std::uint64_t total) {
    if (cancel && cancel->load()) throw SearchCancelled{};
    if (progress) progress(done, total);
  };
  if (cancel && cancel->load()) {
    out.cancelled = true;
    return out;
  }
  try {
    auto r = search(*model, *cluster, o, report);
    if (!r) {
      out.error = r.error().message();
      return out;
    }
    out.result = std::move(*r);
  } catch (const SearchCancelled&) {
    out.cancelled = true;
    return out;
  }
  if (out.result.plans.empty()) {
    std::string why;
    for (const auto& [reason, count] : out.result.rejected) why += fmt::format("; {} {}", count, reason);
    out.error = fmt::format("no plan of the {} candidates fits or is valid (rejected{})",
                            out.result.candidates, why.empty() ? std::string(": none") : why);
  }
  return out;
}

void SearchWorker::run(const SearchRequest& request) {
  SearchOutcome out = run_search(
      request, [this](std::uint64_t done, std::uint64_t total) { Q_EMIT progress(done, total); },
      cancel_.get());
  Q_EMIT finished(out);
}

SearchController::SearchController(QObject* parent) : QObject(parent) {
  qRegisterMetaType<SearchRequest>();
  qRegisterMetaType<SearchOutcome>();
  auto* worker = new SearchWorker(cancel_);
  worker->moveToThread(&thread_);
  connect(&thread_, &QThread::finished, worker, &QObject::deleteLater);
  connect(this, &SearchController::run_requested, worker, &SearchWorker::run);  // queued: other thread
  connect(worker, &SearchWorker::progress, this, &SearchController::progress);
  connect(worker, &SearchWorker::finished, this, [this](const SearchOutcome& out) {
    running_ = false;
    Q_EMIT finished(out);
  });
  thread_.setObjectName(QStringLiteral("foresight search"));
  thread_.start();
}

SearchController::~SearchController() {
  cancel_->store(true);
  thread_.quit();
  thread_.wait();
}

bool SearchController::start(const SearchRequest& request) {
  if (running_) return false;
  running_ = true;
  cancel_->store(false);
  Q_EMIT run_requested(request);
  return true;
}

void SearchController::cancel() {
  if (running_) cancel_->store(true);
}

}  // namespace foresight::gui
