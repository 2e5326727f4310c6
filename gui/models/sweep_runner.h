// What-if sweeps off the GUI thread: the points of a sweep spec (sim/sweep/sweep.h) evaluated in
// parallel, with progress and cancel, results kept in memory for the Sweep view (no output folder:
// `foresight sweep` is the tool for resumable runs that write JSONL/CSV).
//
//   auto spec = load_sweep("scenarios/ethernet-vs-infiniband.json");
//   SweepOutcome out = run_sweep_points(*spec);       // out.rows[i]: evaluate_point's JSON
//   SweepController c;  c.start(*spec);               // the same on a worker thread
#pragma once

#include <QObject>
#include <QThread>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/core/status.h"
#include "sim/sweep/sweep.h"

namespace foresight::gui {

struct SweepOutcome {
  std::string file;
  std::vector<std::string> axes;     // JSON pointers, in the spec's order
  std::vector<nlohmann::json> rows;  // one per point, by index: evaluate_point's result
  std::string engine;                // analytic or des
  bool cancelled = false;            // rows of points not evaluated are null
  double wall_s = 0;
  bool ok() const { return !cancelled; }
};

// Reads a sweep's results file (`foresight sweep`'s results.jsonl, or its results.csv): rows by
// index, the axes from the rows' axis values (the CSV's "/..." columns). A partial last JSONL line
// (a killed run) is skipped; any other bad line is an error naming the file and the line.
Result<SweepOutcome> load_sweep_results(const std::string& jsonl);

// What a chart of one metric against one axis shows: the axis' values as categories (in the
// points' order), one series per combination of the other axes' values, NaN where a point has no
// value. `metric` is a row key such as "step_time_s".
// When every value of the axis is a number or a quantity ("100Gbps", "80GiB"), the chart is
// `numeric`: `x` holds each category's number (SI base units) and the categories are in its order,
// for a line chart; otherwise (preset names, for instance) the categories keep the points' order.
struct SweepChart {
  std::vector<std::string> categories;
  std::vector<double> x;  // per category: its number, NaN where it is none
  bool numeric = false;
  std::string x_unit;                       // the unit the labels share ("Gbps"), "" for none or SI
  std::string series_title;                 // the other axes' titles: "gpus, nic/bandwidth"
  std::vector<std::string> series;          // "gpus 16, nic/bandwidth 100Gbps"; "" with one axis
  std::vector<std::vector<double>> values;  // [series][category]
};
SweepChart sweep_chart(const SweepOutcome& out, const std::string& metric, int axis);

// An axis value as a number: a JSON number, or a string that reads as a number or as a quantity
// with its unit (in SI base units: "100Gbps" is 1.25e10 bytes/s); NaN otherwise.
double axis_number(const nlohmann::json& v);

// The base of a sweep in a line: "llama3-8b on dgx-h100-ndr, 16 GPUs, global batch 256, tp2 pp2 sp,
// ZeRO-1" (model and cluster by name, expanded presets included; "searched plan" for a search).
std::string sweep_base_text(const nlohmann::json& base);

// The GUI's built-in example: Llama 3 8B on 16, 32 and 64 H100s with 100, 200 and 400 Gb/s NICs
// (tp 2, pp 2, sequence parallel, ZeRO-1, 256 sequences per step).
Result<SweepSpec> example_sweep();

// Evaluates every point on `threads` threads (0: all cores). `progress(done, total)` is called from
// the calling thread every few tens of milliseconds; `cancel` is polled before each point.
SweepOutcome run_sweep_points(const SweepSpec& spec,
                              const std::function<void(std::uint64_t, std::uint64_t)>& progress = {},
                              const std::atomic<bool>* cancel = nullptr, unsigned threads = 0);

// Lives on SweepController's thread; use the controller.
class SweepWorker : public QObject {
  Q_OBJECT
 public:
  explicit SweepWorker(std::shared_ptr<const std::atomic<bool>> cancel) : cancel_(std::move(cancel)) {}

 public Q_SLOTS:
  void run(std::shared_ptr<const foresight::SweepSpec> spec);

 Q_SIGNALS:
  void progress(quint64 done, quint64 total);
  void finished(const foresight::gui::SweepOutcome& outcome);

 private:
  std::shared_ptr<const std::atomic<bool>> cancel_;
};

class SweepController : public QObject {
  Q_OBJECT
 public:
  explicit SweepController(QObject* parent = nullptr);
  ~SweepController() override;  // cancels and waits

  bool start(const SweepSpec& spec);  // false while a sweep is running
  void cancel();
  bool running() const { return running_; }

 Q_SIGNALS:
  void progress(quint64 done, quint64 total);
  void finished(const foresight::gui::SweepOutcome& outcome);
  void run_requested(std::shared_ptr<const foresight::SweepSpec> spec);  // internal: to the worker thread

 private:
  QThread thread_;
  std::shared_ptr<std::atomic<bool>> cancel_ = std::make_shared<std::atomic<bool>>(false);
  bool running_ = false;
};

}  // namespace foresight::gui

Q_DECLARE_METATYPE(foresight::gui::SweepOutcome)
Q_DECLARE_METATYPE(std::shared_ptr<const foresight::SweepSpec>)
