// foresight-gui-stall-bench: how long the window's event loop stalls while a plan search runs on
// the GUI's worker (SearchController), including the GUI-thread work of showing the outcome (the
// ranked table and the Pareto scatter). A 5 ms QTimer on the GUI thread (StallProbe) records the
// longest gap between its ticks; an idle loop is measured first as the baseline.
//
//   foresight-gui-stall-bench                                     # llama3-70b, 1024 H100s, 3 runs
//   foresight-gui-stall-bench --model llama3-8b --gpus 64 --gb 256 --repeat 5
//
// Off-screen by default (no display needed). The figure depends on the core count: on a machine
// with few cores the search's threads compete with the GUI thread.
#include <QApplication>
#include <QCommandLineParser>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QTimer>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>

#include "gui/models/search_runner.h"
#include "gui/models/stall_probe.h"
#include "gui/views/main_window.h"
#include "gui/views/search_view.h"

using foresight::gui::StallProbe;

namespace {

struct BenchOptions {
  QString model, cluster;
  int gpus = 0;
  long long global_batch = 0;
  int repeat = 1;
  std::chrono::milliseconds tick{5};
  std::optional<unsigned> threads;  // search threads; nullopt: the GUI's own
};

BenchOptions parse_options(const QApplication& app) {
  QCommandLineParser cli;
  cli.setApplicationDescription(
      QStringLiteral("Longest GUI event-loop stall while a plan search runs on the worker."));
  cli.addHelpOption();
  const QCommandLineOption model(QStringLiteral("model"), QStringLiteral("model preset"),
                                 QStringLiteral("NAME"), QStringLiteral("llama3-70b"));
  const QCommandLineOption cluster(QStringLiteral("cluster"), QStringLiteral("cluster preset"),
                                   QStringLiteral("NAME"), QStringLiteral("dgx-h100-ndr"));
  const QCommandLineOption gpus(QStringLiteral("gpus"), QStringLiteral("devices"), QStringLiteral("N"),
                                QStringLiteral("1024"));
  const QCommandLineOption gb(QStringLiteral("gb"), QStringLiteral("global batch (sequences)"),
                              QStringLiteral("N"), QStringLiteral("1024"));
  const QCommandLineOption repeat(QStringLiteral("repeat"), QStringLiteral("searches"), QStringLiteral("N"),
                                  QStringLiteral("3"));
  const QCommandLineOption interval(QStringLiteral("interval-ms"), QStringLiteral("probe timer"),
                                    QStringLiteral("MS"), QStringLiteral("5"));
  const QCommandLineOption threads(
      QStringLiteral("threads"), QStringLiteral("search threads (default: the GUI's)"), QStringLiteral("N"));
  for (const auto& o : {model, cluster, gpus, gb, repeat, interval, threads}) cli.addOption(o);
  cli.process(app);
  BenchOptions o;
  o.model = cli.value(model);
  o.cluster = cli.value(cluster);
  o.gpus = cli.value(gpus).toInt();
  o.global_batch = cli.value(gb).toLongLong();
  o.repeat = std::max(1, cli.value(repeat).toInt());
  o.tick = std::chrono::milliseconds(std::max(1, cli.value(interval).toInt()));
  if (cli.isSet(threads)) o.threads = static_cast<unsigned>(std::max(1, cli.value(threads).toInt()));
  return o;
}

// Baseline: the idle loop for one second.
void measure_idle_loop(std::chrono::milliseconds tick) {
  StallProbe probe(tick);
  probe.start();
  QEventLoop idle;
  QTimer::singleShot(1000, &idle, &QEventLoop::quit);
  idle.exec();
  probe.stop();
  std::printf("idle loop: %lld ticks in %.0f ms, max gap %.1f ms (timer %.0f ms)\n",
              static_cast<long long>(probe.ticks()), probe.elapsed_ms(), probe.max_gap_ms(),
              probe.interval_ms());
}

// One search while the probe runs; prints the run's line and returns its longest stall (nullopt
// when the search failed, said on stderr).
std::optional<double> timed_search(foresight::gui::SearchView* view, const foresight::gui::SearchRequest& req,
                                   const BenchOptions& o, int run) {
  StallProbe probe(o.tick);
  QEventLoop loop;
  foresight::gui::SearchOutcome outcome;
  // Connected after the view's own slot, so this runs once the outcome is on screen.
  auto done = QObject::connect(view->controller(), &foresight::gui::SearchController::finished, &loop,
                               [&](const foresight::gui::SearchOutcome& out) {
                                 outcome = out;
                                 QTimer::singleShot(0, &loop, &QEventLoop::quit);  // after pending repaints
                               });
  probe.start();
  // The view's Run button; with --threads, its controller with the request above (the view
  // still shows the outcome).
  if (o.threads)
    view->controller()->start(req);
  else
    view->start();
  loop.exec();
  probe.stop();
  QObject::disconnect(done);
  if (!outcome.ok()) {
    std::fprintf(stderr, "error: search: %s\n", outcome.cancelled ? "cancelled" : outcome.error.c_str());
    return std::nullopt;
  }
  // The part of it that is GUI-thread work: filling the table and the scatter once more.
  QElapsedTimer show;
  show.start();
  view->show_outcome(outcome);
  QApplication::processEvents();
  const double show_ms = show.nsecsElapsed() / 1e6;
  std::printf(
      "run %d: %llu candidates, %zu plans, %.0f ms; GUI loop %lld ticks, max gap %.1f ms "
      "(showing the outcome: %.1f ms)\n",
      run + 1, static_cast<unsigned long long>(outcome.result.candidates), outcome.result.plans.size(),
      probe.elapsed_ms(), static_cast<long long>(probe.ticks()), probe.max_gap_ms(), show_ms);
  return probe.max_gap_ms();
}

}  // namespace

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  const BenchOptions o = parse_options(app);
  measure_idle_loop(o.tick);

  foresight::gui::MainWindow window;
  window.resize(1280, 860);
  foresight::gui::PlanInputs in;
  in.model = o.model.toStdString();
  in.cluster = o.cluster.toStdString();
  in.plan.dp = o.gpus;
  in.plan.global_batch = o.global_batch;
  window.set_inputs(in);
  window.show_view(foresight::gui::View::kSearch);
  window.show();
  QApplication::processEvents();
  foresight::gui::SearchView* view = window.search();
  foresight::gui::SearchRequest req = view->request();
  if (o.threads) req.threads = *o.threads;
  std::printf(
      "search: %s on %d x %s, global batch %lld, top %d, re-simulate %d, %s search threads of %u hardware\n",
      req.model.c_str(), req.gpus, req.cluster.c_str(), static_cast<long long>(req.global_batch), req.top_k,
      req.resimulate, req.threads ? std::to_string(req.threads).c_str() : "all",
      std::thread::hardware_concurrency());

  double worst = 0;
  for (int run = 0; run < o.repeat; ++run) {
    const std::optional<double> gap = timed_search(view, req, o, run);
    if (!gap) return 1;
    worst = std::max(worst, *gap);
  }
  std::printf("max stall over %d runs: %.1f ms (timer %lld ms)\n", o.repeat, worst,
              static_cast<long long>(o.tick.count()));
  return 0;
}
