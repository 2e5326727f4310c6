// Sweep points on worker threads, with progress and cancel.
#include "gui/models/sweep_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "gui/models/sweep_model.h"
#include "sim/core/units.h"
#include "sim/spec/plan.h"

namespace foresight::gui {

Result<SweepSpec> example_sweep() {
  const nlohmann::json doc = {
      {"base",
       {{"model", "llama3-8b"},
        {"cluster", "dgx-h100-ndr"},
        {"gpus", 16},
        {"plan",
         {{"tp", 2}, {"pp", 2}, {"global_batch", 256}, {"sequence_parallel", true}, {"zero_stage", 1}}}}},
      {"axes",
       {{"/gpus", {16, 32, 64}}, {"/cluster/node/nic/bandwidth", {"100Gbps", "200Gbps", "400Gbps"}}}}};
  return sweep_from_json(doc, "example sweep");
}

SweepOutcome run_sweep_points(const SweepSpec& spec,
                              const std::function<void(std::uint64_t, std::uint64_t)>& progress,
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
      *spec, [this](std::uint64_t done, std::uint64_t total) { Q_EMIT progress(done, total); },
      cancel_.get());
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

namespace {

// One CSV record as `foresight sweep` writes it (fields with commas or quotes are quoted, quotes
// doubled).
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"')
        quoted = false;
      else
        out.back() += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

// A CSV cell as JSON: a number when it reads as one, else the text.
nlohmann::json cell_value(const std::string& text) {
  if (text.empty()) return nullptr;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end && *end == '\0') return v;
  return text;
}

// The CSV's plan columns (tp ... zero_stage, recompute as tables show it: "full x10", "full /5",
// sequence_parallel, virtual_stages, global_batch)
// moved into the row's "plan" object, as results.jsonl holds it, so both files show the layout.
void gather_plan(nlohmann::json& row) {
  nlohmann::json plan = nlohmann::json::object();
  for (const char* k :
       {"tp", "pp", "dp", "cp", "ep", "micro_batch", "zero_stage", "virtual_stages", "global_batch"}) {
    if (!row.contains(k)) continue;
    const nlohmann::json v = row[k];
    row.erase(k);
    if (v.is_number() && std::floor(v.get<double>()) == v.get<double>())
      plan[k] = static_cast<long long>(v.get<double>());
  }
  if (row.contains("sequence_parallel")) {
    plan["sequence_parallel"] = row["sequence_parallel"] == "true";
    row.erase("sequence_parallel");
  }
  if (row.contains("recompute") && row["recompute"].is_string()) {
    const std::string rc = row["recompute"].get<std::string>();
    row.erase("recompute");
    const std::size_t space = rc.find(' ');
    plan["recompute"] = rc.substr(0, space);
    if (space != std::string::npos && space + 2 < rc.size()) {
      plan["recompute_method"] = rc[space + 1] == '/' ? "uniform" : "block";
      plan["recompute_layers"] = std::atoi(rc.c_str() + space + 2);
    }
  }
  if (plan.contains("tp") && plan.contains("pp") && plan.contains("dp")) row["plan"] = std::move(plan);
}

// results.csv -> the rows results.jsonl would hold (axis values, metrics, the error).
Result<SweepOutcome> load_sweep_csv(const std::string& csv) {
  std::ifstream in(csv);
  if (!in) return Error(csv + ": cannot open");
  std::string line;
  if (!std::getline(in, line)) return Error(csv + ": empty");
  const std::vector<std::string> header = csv_fields(line);
  if (header.empty() || header[0] != "index")
    return Error(csv + ":1: not a sweep results CSV (no index column)");
  SweepOutcome out;
  out.file = csv;
  for (const std::string& h : header)
    if (!h.empty() && h[0] == '/') out.axes.push_back(h);
  int number = 1;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    const std::vector<std::string> f = csv_fields(line);
    if (f.size() != header.size())
      return Error(csv + ":" + std::to_string(number) + ": " + std::to_string(f.size()) +
                   " fields, the header has " + std::to_string(header.size()));
    nlohmann::json row = {{"axes", nlohmann::json::object()}};
    for (std::size_t k = 0; k < f.size(); ++k) {
      const std::string& h = header[k];
      if (h == "index")
        row["index"] = std::stoull(f[k]);
      else if (!h.empty() && h[0] == '/')
        row["axes"][h] = cell_value(f[k]);
      else if (h == "error") {
        if (!f[k].empty()) row["error"] = f[k];
      } else if (!f[k].empty())
        row[h] = cell_value(f[k]);
    }
    row["ok"] = !row.contains("error");
    gather_plan(row);
    const std::size_t i = row["index"].get<std::size_t>();
    if (out.rows.size() <= i) out.rows.resize(i + 1);
    out.rows[i] = std::move(row);
  }
  if (out.rows.empty()) return Error(csv + ": no result rows");
  return out;
}

}  // namespace

Result<SweepOutcome> load_sweep_results(const std::string& jsonl) {
  if (jsonl.size() > 4 && jsonl.compare(jsonl.size() - 4, 4, ".csv") == 0) {
    try {
      return load_sweep_csv(jsonl);
    } catch (const std::exception&) {
      return Error(jsonl + ": a bad index column");
    }
  }
  std::ifstream in(jsonl);
  if (!in) return Error(jsonl + ": cannot open");
  std::vector<std::pair<std::size_t, nlohmann::json>> rows;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    auto row = nlohmann::json::parse(line, nullptr, false);
    if (row.is_discarded() || !row.is_object() || !row.contains("index") ||
        !row["index"].is_number_unsigned()) {
      if (in.peek() == EOF) break;  // a kill mid-write leaves a partial last line
      return Error(jsonl + ":" + std::to_string(number) + ": not a sweep result row");
    }
    rows.emplace_back(row["index"].get<std::size_t>(), std::move(row));
  }
  if (rows.empty()) return Error(jsonl + ": no result rows");
  SweepOutcome out;
  out.file = jsonl;
  std::size_t most = 0;
  for (const auto& [i, row] : rows) most = std::max(most, i);
  out.rows.assign(most + 1, nlohmann::json());
  for (auto& [i, row] : rows) {
    if (out.axes.empty() && row.contains("axes") && row["axes"].is_object())
      for (const auto& [key, value] : row["axes"].items()) out.axes.push_back(key);
    out.rows[i] = std::move(row);
  }
  return out;
}

double axis_number(const nlohmann::json& v) {
  if (v.is_number()) return v.get<double>();
  if (!v.is_string()) return std::nan("");
  const std::string t = v.get<std::string>();
  char* end = nullptr;
  const double plain = std::strtod(t.c_str(), &end);
  if (!t.empty() && end && *end == '\0') return plain;
  for (Dimension d : {Dimension::kBandwidth, Dimension::kBytes, Dimension::kSeconds, Dimension::kFlopRate,
                      Dimension::kFlop, Dimension::kPower})
    if (auto q = parse_quantity(t, d)) return *q;
  return std::nan("");
}

std::string sweep_base_text(const nlohmann::json& base) {
  auto name = [](const nlohmann::json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("name") && v["name"].is_string()) return v["name"].get<std::string>();
    return std::string("?");
  };
  std::string s =
      name(base.value("model", nlohmann::json())) + " on " + name(base.value("cluster", nlohmann::json()));
  if (base.contains("gpus")) s += ", " + base["gpus"].dump() + " GPUs";
  const nlohmann::json plan = base.value("plan", nlohmann::json());
  if (plan.is_string()) {
    const nlohmann::json search = base.value("search", nlohmann::json::object());
    s += ", searched plan";
    if (search.contains("global_batch")) s += ", global batch " + search["global_batch"].dump();
  } else if (plan.is_object()) {
    if (plan.contains("global_batch")) s += ", global batch " + plan["global_batch"].dump();
    nlohmann::json full = plan;
    if (!full.contains("dp")) full["dp"] = 1;  // the layout text needs a dp; the points set theirs
    if (auto p = plan_from_json(full, "base")) {
      std::string layout = layout_string(*p);
      if (const auto at = layout.find(" dp1"); !plan.contains("dp") && at != std::string::npos)
        layout.erase(at, 4);
      s += ", " + layout + ", ZeRO-" + std::to_string(p->zero_stage);
    }
  }
  return s;
}

SweepChart sweep_chart(const SweepOutcome& out, const std::string& metric, int axis) {
  SweepChart c;
  if (axis < 0 || axis >= static_cast<int>(out.axes.size())) return c;
  const std::string& x = out.axes[static_cast<std::size_t>(axis)];
  auto label = [](const nlohmann::json& v) {
    if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
        std::abs(v.get<double>()) < 1e15)
      return std::to_string(static_cast<long long>(v.get<double>()));  // a CSV's 16 reads as 16.0
    return v.is_string() ? v.get<std::string>() : v.dump();
  };
  for (const std::string& a : out.axes)
    if (a != x) c.series_title += (c.series_title.empty() ? "" : ", ") + axis_title(a).toStdString();
  auto index_of = [](std::vector<std::string>& list, const std::string& v) {
    auto it = std::find(list.begin(), list.end(), v);
    if (it != list.end()) return static_cast<std::size_t>(it - list.begin());
    list.push_back(v);
    return list.size() - 1;
  };
  struct Cell {
    std::size_t series, category;
    double value;
  };
  std::vector<Cell> cells;
  for (const auto& row : out.rows) {
    if (!row.is_object() || !row.contains("axes")) continue;
    const auto& axes = row["axes"];
    if (!axes.contains(x)) continue;
    std::string rest;  // "gpus 16, nic/bandwidth 100Gbps": the other axes' values, named
    for (const std::string& a : out.axes)
      if (a != x && axes.contains(a))
        rest += (rest.empty() ? "" : ", ") + axis_title(a).toStdString() + " " + label(axes[a]);
    const double v = row.value("ok", false) && row.contains(metric) && row[metric].is_number()
                         ? row[metric].get<double>()
                         : std::nan("");
    const std::size_t category = index_of(c.categories, label(axes[x]));
    if (category == c.x.size()) c.x.push_back(NAN);
    cells.push_back({index_of(c.series, rest), category, v});
  }
  c.values.assign(c.series.size(), std::vector<double>(c.categories.size(), std::nan("")));
  for (const Cell& cell : cells) c.values[cell.series][cell.category] = cell.value;
  // Numbers in the labels' own unit when they share one ("100Gbps", "400Gbps": 100 and 400 Gbps),
  // else in SI base units.
  std::vector<std::string> units(c.categories.size());
  for (std::size_t j = 0; j < c.categories.size(); ++j) {
    char* end = nullptr;
    const double v = std::strtod(c.categories[j].c_str(), &end);
    if (end != c.categories[j].c_str()) {
      c.x[j] = v;
      units[j] = end;
    }
  }
  const bool one_unit =
      std::all_of(c.x.begin(), c.x.end(), [](double v) { return std::isfinite(v); }) &&
      std::all_of(units.begin(), units.end(), [&](const std::string& u) { return u == units.front(); });
  if (one_unit) {
    c.x_unit = units.empty() ? "" : units.front();
  } else {
    for (std::size_t j = 0; j < c.categories.size(); ++j) c.x[j] = axis_number(c.categories[j]);
  }
  c.numeric = !c.x.empty() && std::all_of(c.x.begin(), c.x.end(), [](double v) { return std::isfinite(v); });
  if (!c.numeric) c.x_unit.clear();
  if (c.numeric) {  // categories in the order of their numbers (a line chart's x)
    std::vector<std::size_t> order(c.x.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return c.x[a] < c.x[b]; });
    SweepChart sorted = c;
    for (std::size_t j = 0; j < order.size(); ++j) {
      sorted.categories[j] = c.categories[order[j]];
      sorted.x[j] = c.x[order[j]];
      for (std::size_t i = 0; i < c.values.size(); ++i) sorted.values[i][j] = c.values[i][order[j]];
    }
    c = std::move(sorted);
  }
  return c;
}

}  // namespace foresight::gui
