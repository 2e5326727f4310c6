// Sweep specs, points, resumable execution and CSV output.
#include "sim/sweep/sweep.h"

#include <fcntl.h>
#include <sys/file.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "sim/analytic/analytic_model.h"
#include "sim/analytic/compression.h"
#include "sim/analytic/economics.h"
#include "sim/analytic/reliability.h"
#include "sim/core/output_file.h"
#include "sim/des/simulator.h"
#include "sim/search/search.h"
#include "sim/spec/json_reader.h"
#include "sim/spec/presets.h"

namespace foresight {

using nlohmann::json;

namespace {

// A preset name or an inline object, expanded to a full JSON object.
Result<json> expand(const json& v, PresetKind kind, const std::string& where) {
  if (v.is_object()) {
    if (kind == PresetKind::kCluster) {  // inline clusters may name a node preset: inline it too
      auto c = cluster_from_json(v, where);
      if (!c) return c.error();
      return cluster_to_json(*c);
    }
    return v;
  }
  if (!v.is_string()) return Error(where + ": expected a preset name or an object");
  if (kind == PresetKind::kCluster) {
    auto c = load_cluster(v.get<std::string>());
    if (!c) return c.error().with_context(where);
    return cluster_to_json(*c);
  }
  auto src = resolve_spec(kind, v.get<std::string>());
  if (!src) return src.error().with_context(where);
  auto m = model_from_text(src->text, src->file);
  if (!m) return m.error().with_context(where);
  return model_to_json(*m);
}

// Resolves a point's document into specs (errors name the point and its axis values).
struct Resolved {
  ModelSpec model;
  ClusterSpec cluster;
  Plan plan;
  bool search = false;
  SearchOptions search_options;
  // /reliability: failures and checkpoints over a long run (the step time comes from the point).
  bool reliability = false;
  ReliabilityInputs reliability_inputs;
  long long checkpoint_every = 0, light_every = 0;  // steps; 0: Daly's optimum / none
};

// Reads /reliability of a point: durations with units, steps as integers.
Status read_reliability(const json& doc, const std::string& where, Resolved& r) {
  JsonReader rr(doc, where, "/reliability");
  rr.reject_unknown_keys({"run", "checkpoint_every_steps", "restart", "failures_per_device_hour",
                          "light_every_steps", "light_write", "soft_fraction", "trials", "seed"});
  ReliabilityInputs& in = r.reliability_inputs;
  in.run_s = rr.quantity("run", Dimension::kSeconds, 90 * 86400.0);
  in.restart_s = rr.quantity("restart", Dimension::kSeconds, 600);
  in.failures_per_device_hour =
      rr.number("failures_per_device_hour", kLlama3FailuresPerDeviceHour, 1e-12, 1.0);
  r.checkpoint_every = rr.integer("checkpoint_every_steps", 0, 0, std::int64_t{1} << 40);
  r.light_every = rr.integer("light_every_steps", 0, 0, std::int64_t{1} << 40);
  in.light_write_s = rr.quantity("light_write", Dimension::kSeconds, -1);  // -1: an in-memory snapshot
  if (doc.contains("light_write") && rr.ok() && in.light_write_s < 0) rr.fail("light_write", "must be >= 0");
  in.soft_fraction = rr.number("soft_fraction", 0, 0, 1);
  in.trials = static_cast<int>(rr.integer("trials", 100, 1, 100000));
  in.seed = static_cast<std::uint64_t>(rr.integer("seed", 1, 0, std::int64_t{1} << 40));
  if (!rr.ok()) return rr.error();
  r.reliability = true;
  return Status::Ok();
}

std::string point_name(const SweepSpec& s, const SweepPoint& p) {
  std::string name = s.file + ": point " + std::to_string(p.index) + " (";
  bool first = true;
  for (const auto& [k, v] : p.axes.items()) {
    if (!first) name += ", ";
    name += k + "=" + v.dump();
    first = false;
  }
  return name + ")";
}

Result<Resolved> resolve_point(const SweepSpec& s, const SweepPoint& p) {
  const std::string where = point_name(s, p);
  Resolved r;
  auto model = model_from_json(p.doc["model"], where + " /model");
  if (!model) return model.error();
  r.model = std::move(model).value();
  auto cluster = cluster_from_json(p.doc["cluster"], where + " /cluster");
  if (!cluster) return cluster.error();
  r.cluster = std::move(cluster).value();
  const json& g = p.doc["gpus"];
  if (!g.is_number_integer() || g.get<long long>() < 1 || g.get<long long>() > (1 << 20))
    return Error(where + ": /gpus: expected a positive integer");
  const int gpus = g.get<int>();
  FS_RETURN_IF_ERROR(resize_cluster(r.cluster, gpus, where + ": /gpus"));
  FS_RETURN_IF_ERROR(check_cluster_shape(r.cluster, where));
  if (p.doc.contains("reliability")) FS_RETURN_IF_ERROR(read_reliability(p.doc["reliability"], where, r));
  const json& plan = p.doc["plan"];
  if (plan.is_string() && plan.get<std::string>() == "search") {
    r.search = true;
    r.search_options.gpus = gpus;
    const json& so = p.doc.contains("search") ? p.doc["search"] : json::object();
    JsonReader sr(so, where, "/search");
    sr.reject_unknown_keys({"global_batch", "objective", "resimulate", "min_headroom"});
    r.search_options.global_batch = sr.integer("global_batch", 1024, 1, std::int64_t{1} << 40);
    const std::string obj = sr.choice("objective", {"time", "cost", "energy"}, "time");
    r.search_options.objective = obj == "cost"     ? Objective::kCost
                                 : obj == "energy" ? Objective::kEnergy
                                                   : Objective::kTime;
    r.search_options.resimulate = static_cast<int>(sr.integer("resimulate", 0, 0, 1000));
    r.search_options.min_headroom = sr.number("min_headroom", kDefaultMinHeadroom, 0, 0.99);
    r.search_options.threads = 1;  // points already run in parallel
    if (!sr.ok()) return sr.error();
    return r;
  }
  if (!plan.is_object()) return Error(where + ": /plan: expected a plan object or \"search\"");
  json pj = plan;
  if (!pj.contains("dp")) {
    // Read as the plan parser will (a wrong type is an error naming the field, not an exception).
    JsonReader pr(pj, where, "/plan");
    const std::int64_t others =
        pr.integer("tp", 1, 1, 1 << 20) * pr.integer("pp", 1, 1, 1 << 20) * pr.integer("cp", 1, 1, 1 << 20);
    if (!pr.ok()) return pr.error();
    if (others < 1 || gpus % others != 0)
      return Error(where + ": /plan: gpus (" + std::to_string(gpus) + ") is not a multiple of tp*pp*cp (" +
                   std::to_string(others) + ")");
    pj["dp"] = gpus / others;
  }
  auto pl = plan_from_json(pj, where + " /plan");
  if (!pl) return pl.error();
  r.plan = std::move(pl).value();
  FS_RETURN_IF_ERROR(validate_plan_on(r.plan, r.model, r.cluster, where + " /plan"));
  return r;
}

// JSON kinds for the axis check: any number is a number; a string may name a preset or "search"
// where the base holds an object, and the other way round.
std::string kind_name(const json& v) {
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

bool same_kind(const json& base, const json& v) {
  if (base.is_null()) return true;
  if (base.is_number()) return v.is_number();
  if (base.is_string() || base.is_object()) return v.is_string() || v.is_object();
  return base.type() == v.type();
}

// The cross product's size, saturating (a spec of many long axes must not wrap around).
std::size_t sweep_points(const std::vector<std::pair<std::string, json>>& axes) {
  std::size_t total = 1;
  for (const auto& a : axes) {
    const std::size_t n = a.second.size();
    if (n != 0 && total > std::numeric_limits<std::size_t>::max() / n)
      return std::numeric_limits<std::size_t>::max();
    total *= n;
  }
  return total;
}

// Refuses an expansion over kSweepMaxPoints points or kSweepMaxBytes of expanded documents, naming
// every axis and its size.
Status check_sweep_budget(const SweepSpec& s) {
  const std::size_t total = sweep_points(s.axes);
  const double bytes = static_cast<double>(total) * sweep_point_bytes(s.base);
  if (total <= kSweepMaxPoints && bytes <= kSweepMaxBytes) return Status::Ok();
  std::string sizes;
  for (const auto& [ptr, values] : s.axes)
    sizes += (sizes.empty() ? "" : " x ") + ptr + " (" + std::to_string(values.size()) + ")";
  const std::string count = total == std::numeric_limits<std::size_t>::max()
                                ? "more than " + std::to_string(total)
                                : std::to_string(total);
  char gib[64];
  std::snprintf(gib, sizeof gib, "about %.1f GiB of point documents; the budget is ", bytes / 1073741824.0);
  char budget[64];
  std::snprintf(budget, sizeof budget, " points and %.0f GiB", kSweepMaxBytes / 1073741824.0);
  return Error(s.file + ": /axes: " + sizes + " expand to " + count + " points, " + gib +
               std::to_string(kSweepMaxPoints) + budget +
               ": split the sweep into several specs or use fewer values");
}

// The spec's /base: its four required fields, the model and cluster presets expanded.
Status read_sweep_base(const json& doc, const std::string& file, SweepSpec& s) {
  if (!doc.contains("base") || !doc["base"].is_object())
    return Error(file + ": /base: missing required object");
  const json& base = doc["base"];
  JsonReader br(base, file, "/base");
  br.reject_unknown_keys({"model", "cluster", "gpus", "plan", "search", "reliability"});
  if (!br.ok()) return br.error();
  for (const char* k : {"model", "cluster", "gpus", "plan"})
    if (!base.contains(k)) return Error(file + ": /base/" + k + ": missing required field");
  s.base = base;
  auto model = expand(base["model"], PresetKind::kModel, file + ": /base/model");
  if (!model) return model.error();
  s.base["model"] = *model;
  auto cluster = expand(base["cluster"], PresetKind::kCluster, file + ": /base/cluster");
  if (!cluster) return cluster.error();
  s.base["cluster"] = *cluster;
  return Status::Ok();
}

// One axis: a JSON pointer to a field of the base (or a new key of one of its objects), apart
// from the other axes, and values of the kind the base holds there.
Status check_axis(const SweepSpec& s, const std::string& file, const std::string& ptr, const json& values) {
  const std::string where = file + ": /axes/" + json_pointer_escape(ptr);
  if (!values.is_array()) return Error(where + ": expected an array of values");
  if (values.empty()) return Error(where + ": empty axis (give at least one value)");
  json::json_pointer jp;
  try {
    jp = json::json_pointer(ptr);
  } catch (const std::exception& e) {
    return Error(where + ": \"" + ptr + "\" is not a JSON pointer (" + e.what() + ")");
  }
  if (jp.empty())
    return Error(where + ": \"\" names the whole base; an axis names a field inside it (e.g. /plan/tp)");
  // The pointer must name an existing field, or a new key of an existing object.
  if (!s.base.contains(jp)) {
    const json::json_pointer parent = jp.parent_pointer();
    if (jp.empty() || !s.base.contains(parent) || !s.base[parent].is_object())
      return Error(where + ": \"" + ptr +
                   "\" names no field of the base (presets are expanded; see the model/cluster JSON)");
  }
  // An axis under another axis's pointer would be overwritten by it (or fail to be set).
  for (const auto& axis : s.axes)
    if (const std::string& other = axis.first;
        ptr.rfind(other + "/", 0) == 0 || other.rfind(ptr + "/", 0) == 0)
      return Error(where + ": lies " + (ptr.size() > other.size() ? "under" : "over") + " axis " + other +
                   ": one would overwrite the other (give whole values on one axis)");
  // Each value of the kind the base holds there (a preset name may stand for an object).
  if (s.base.contains(jp)) {
    const json& was = s.base.at(jp);
    JsonReader ar(values, file, "/axes/" + json_pointer_escape(ptr));
    for (std::size_t i = 0; i < values.size(); ++i)
      if (!same_kind(was, values[i]))
        ar.fail(std::to_string(i), "expected " + kind_name(was) + " like the base's " + ptr + ", got " +
                                       kind_name(values[i]) + " " + values[i].dump());
    if (!ar.ok()) return ar.error();
  }
  return Status::Ok();
}

// Point `i` of the cross product (the last axis varies fastest), its presets expanded.
Result<SweepPoint> sweep_point(const SweepSpec& s, std::size_t i) {
  SweepPoint p;
  p.index = i;
  p.doc = s.base;
  p.axes = json::object();
  std::size_t rest = i;
  for (auto it = s.axes.rbegin(); it != s.axes.rend(); ++it) {
    const std::size_t n = it->second.size();
    const std::size_t k = rest % n;
    const json& v = it->second[k];
    rest /= n;
    const json::json_pointer jp(it->first);
    try {  // another axis may have made a parent of this pointer a string or a number
      p.doc[jp] = v;
    } catch (const json::exception&) {
      json::json_pointer parent = jp.parent_pointer();
      while (!parent.empty() && !p.doc.contains(parent)) parent = parent.parent_pointer();
      std::string held = p.doc.at(parent).dump();
      if (held.size() > 60) held = held.substr(0, 57) + "...";
      return Error(s.file + ": /axes/" + json_pointer_escape(it->first) + "/" + std::to_string(k) +
                   ": cannot set " + it->first + " at point " + std::to_string(i) + ": " +
                   (parent.empty() ? "/" : parent.to_string()) + " is " + held +
                   " there (set by another axis), not an object");
    }
    p.axes[it->first] = v;
  }
  // An axis may name presets ("/model": ["llama3-8b", "llama3-70b"]): expand them per point.
  for (const auto& [key, kind] :
       {std::pair{"model", PresetKind::kModel}, std::pair{"cluster", PresetKind::kCluster}}) {
    if (!p.doc[key].is_string()) continue;
    auto expanded = expand(p.doc[key], kind, point_name(s, p) + ": /" + key);
    if (!expanded) return expanded.error();
    p.doc[key] = *expanded;
  }
  return p;
}

// FNV-1a over the resolved spec (presets expanded: editing a preset changes it too), in hex.
std::string sweep_id(const SweepSpec& s) {
  json canonical = {{"base", s.base}, {"engine", s.engine}, {"axes", json::array()}};
  for (const auto& [ptr, values] : s.axes) canonical["axes"].push_back({ptr, values});
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : canonical.dump()) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

}  // namespace

double sweep_point_bytes(const json& base) {
  // A parsed JSON document takes about kJsonBytesPerTextByte bytes of memory per byte of its text
  // (nodes, maps, strings; measured: see sweep.h); each point holds the base plus its axis values.
  return static_cast<double>(base.dump().size()) * kJsonBytesPerTextByte + 512;
}

Result<SweepSpec> sweep_from_json(const json& doc, const std::string& file) {
  JsonReader r(doc, file);
  r.reject_unknown_keys({"base", "axes", "engine"});
  SweepSpec s;
  s.file = file;
  s.engine = r.choice("engine", {"analytic", "des"}, "analytic");
  if (!r.ok()) return r.error();
  FS_RETURN_IF_ERROR(read_sweep_base(doc, file, s));
  if (doc.contains("axes")) {
    if (!doc["axes"].is_object()) return Error(file + ": /axes: expected an object of pointer -> values");
    for (const auto& [ptr, values] : doc["axes"].items()) {
      FS_RETURN_IF_ERROR(check_axis(s, file, ptr, values));
      s.axes.emplace_back(ptr, values);
    }
  }
  // The expansion's budget, checked before anything is allocated for it.
  FS_RETURN_IF_ERROR(check_sweep_budget(s));
  const std::size_t total = sweep_points(s.axes);
  s.points.reserve(total);
  for (std::size_t i = 0; i < total; ++i) {
    FS_ASSIGN_OR_RETURN(SweepPoint p, sweep_point(s, i));
    s.points.push_back(std::move(p));
  }
  s.id = sweep_id(s);
  // Check every point before any work: units, layouts, pointers into the right types.
  for (const SweepPoint& p : s.points) {
    auto resolved = resolve_point(s, p);
    if (!resolved) return resolved.error();
  }
  return s;
}

Result<SweepSpec> load_sweep(const std::string& path) {
  FS_ASSIGN_OR_RETURN(json doc, read_json_file(path));
  return sweep_from_json(doc, path);
}

namespace {

// The point's plan (the search's best under "search") and its prediction by the spec's engine;
// an error message when the search finds nothing.
struct PointRun {
  Plan plan;
  Prediction pred;
};
Result<PointRun> run_point(const SweepSpec& s, const Resolved& r) {
  PointRun run{r.plan, {}};
  if (r.search) {
    auto found = search(r.model, r.cluster, r.search_options);
    if (!found || found->plans.empty()) return Error(found ? "no plan fits" : found.error().message());
    run.plan = found->plans.front().plan;
    run.pred = found->plans.front().prediction;
  } else {
    AnalyticModel am(r.model, r.cluster);
    run.pred = am.evaluate(run.plan);
  }
  if (s.engine == "des") {
    auto w = lower(r.model, r.cluster, run.plan);
    if (w) {
      Simulator sim(*w, SimOptions{});
      if (auto sr = sim.run()) run.pred = sr->prediction;
    }
  }
  return run;
}

// The row's figures of a plan that fits: time, memory, communication, cost.
void add_point_figures(const Resolved& r, const PointRun& run, json& row) {
  const Plan& plan = run.plan;
  const Prediction& pred = run.pred;
  const Economics e = economics(pred, r.cluster, plan, effective_seq_len(plan, r.model), CostOptions{});
  row["ok"] = true;
  row["plan"] = plan_to_json(plan);
  row["step_time_s"] = pred.step_time_s;
  row["tokens_per_s"] = pred.tokens_per_s;
  row["mfu"] = pred.mfu;
  row["memory_gib"] = pred.memory.total / 1073741824.0;
  row["compute_s"] = pred.time.compute;
  row["recompute_s"] = pred.time.recompute;
  row["activations_gib"] = pred.memory.activations / 1073741824.0;
  row["exposed_comm_s"] =
      pred.time.tp_comm + pred.time.cp_comm + pred.time.ep_comm + pred.time.pp_comm + pred.time.dp_comm;
  row["bubble_s"] = pred.time.bubble;
  row["dp_comm_s"] = pred.time.dp_comm;
  row["compression_ratio"] =
      compression_cost(plan, r.model, 1.0, grad_bytes(plan), plan.dp * plan.cp).ratio;  // per rank
  row["cost_per_mtok_usd"] = e.cost_per_mtok_usd;
  row["energy_per_mtok_kwh"] = e.energy_per_mtok_kwh;
  row["offload_s"] = pred.time.offload;
  row["data_stall_s"] = pred.time.data;
  row["data_load_s"] = pred.data_load_s;
  row["host_memory_gib"] = pred.memory.host / 1073741824.0;
}

// The row's reliability figures (the base's "reliability"): checkpoints and the effective time.
Status add_point_reliability(const Resolved& r, const PointRun& run, json& row) {
  const Plan& plan = run.plan;
  const double step_s = run.pred.step_time_s;
  ReliabilityInputs in = reliability_inputs(r.model, r.cluster, plan, step_s);
  const ReliabilityInputs& given = r.reliability_inputs;
  in.run_s = given.run_s;
  in.restart_s = given.restart_s;
  in.failures_per_device_hour = given.failures_per_device_hour;
  in.interval_s = static_cast<double>(r.checkpoint_every) * step_s;
  in.light_interval_s = static_cast<double>(r.light_every) * step_s;
  in.light_write_s = given.light_write_s >= 0 ? given.light_write_s
                                              : in_memory_snapshot_s(r.cluster, plan, in.checkpoint_bytes);
  in.soft_fraction = given.soft_fraction;
  in.trials = given.trials;
  in.seed = given.seed;
  FS_ASSIGN_OR_RETURN(const ReliabilityResult rel, reliability(in));
  row["mtbf_h"] = rel.mtbf_s / 3600;
  row["checkpoint_write_s"] = rel.write_s;
  row["checkpoint_interval_s"] = rel.interval_s;
  row["effective_time"] = rel.efficiency;  // Monte-Carlo, or the closed form beyond its event budget
  row["effective_time_method"] = rel.monte_carlo ? "monte-carlo" : "closed-form";
  row["effective_time_model"] = rel.efficiency_model;
  row["failures_per_run"] = rel.failures_mean;
  return Status::Ok();
}

}  // namespace

json evaluate_point(const SweepSpec& s, const SweepPoint& p) {
  json row = {{"index", p.index}, {"spec", s.id}, {"axes", p.axes}};
  auto fail = [&row](const std::string& message) {
    row["ok"] = false;
    row["error"] = message;
    return row;
  };
  auto r = resolve_point(s, p);
  if (!r) return fail(r.error().message());
  auto run = run_point(s, *r);
  if (!run) return fail(run.error().message());
  if (!run->pred.fits()) {
    fail("plan does not fit in memory: " + describe_memory(run->pred.memory));
    row["plan"] = plan_to_json(run->plan);
    return row;
  }
  add_point_figures(*r, *run, row);
  if (r->reliability)
    if (Status st = add_point_reliability(*r, *run, row); !st) return fail(st.error().message());
  return row;
}

namespace {
// A results file read back: the rows by index, and the lines a kill left torn (or that are not
// rows at all), which reading skips.
struct ResultsFile {
  std::map<std::size_t, json> rows;
  std::size_t torn = 0;
  std::string kept;  // the file without its torn lines
};

ResultsFile read_results(const std::string& path) {
  ResultsFile f;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("index") || !j["index"].is_number_unsigned()) {
      ++f.torn;
      continue;
    }
    f.kept += line + "\n";
    const std::size_t index = j["index"].get<std::size_t>();  // before j is moved from
    f.rows[index] = std::move(j);
  }
  return f;
}

// The rows already in a results file, by index (a partial last line from a kill is ignored).
std::map<std::size_t, json> read_rows(const std::string& path) { return read_results(path).rows; }

// flock()s held on the output folder's lock files until destruction or the process's end.
class FolderLock {
 public:
  FolderLock() = default;
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  ~FolderLock() {
    for (int fd : fds_) ::close(fd);
  }
  bool exclusive = false;  // the folder's lock is held exclusively (no other writer)

  // Opens `path` and takes the lock `op` (LOCK_EX or LOCK_SH) without waiting; false if another
  // process holds a conflicting one. Errors: the file cannot be opened or locked at all.
  Result<bool> take(const std::string& path, int op) {
    int fd = open_lock(path);
    if (fd < 0) return Error(path + ": cannot open the sweep's lock file: " + std::strerror(errno));
    if (::flock(fd, op | LOCK_NB) == 0) {
      fds_.push_back(fd);
      return true;
    }
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) return false;
    return Error(path + ": cannot lock: " + std::strerror(err));
  }
  // Turns the held exclusive lock on the folder (fds_[0]) into a shared one, waiting a few seconds
  // for a shard that holds it exclusively while it cleans the results file.
  Result<bool> share(const std::string& path) {
    if (fds_.empty()) return take_shared(path);
    for (int i = 0; i < 100; ++i) {
      if (::flock(fds_[0], LOCK_SH | LOCK_NB) == 0) return true;
      if (errno != EWOULDBLOCK) return Error(path + ": cannot lock: " + std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  Result<bool> take_shared(const std::string& path) {
    for (int i = 0; i < 100; ++i) {
      FS_ASSIGN_OR_RETURN(bool got, take(path, LOCK_SH));
      if (got) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

 private:
  static int open_lock(const std::string& path) {
    return ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  }
  std::vector<int> fds_;
};

// Locks out_dir for this run (see sweep.h): exclusively for an unsharded run, shared plus the
// shard's own lock for a shard.
Status lock_output(FolderLock& lock, const std::string& dir, int shard, int shards) {
  const std::string path = dir + "/" + kSweepLockFile;
  const std::string busy = dir + ": another sweep is writing this folder (it holds " + path +
                           "); wait for it to finish or give another --out";
  FS_ASSIGN_OR_RETURN(bool alone, lock.take(path, LOCK_EX));
  lock.exclusive = alone;
  if (shards == 1) return alone ? Status::Ok() : Status(Error(busy));
  if (!alone) {
    FS_ASSIGN_OR_RETURN(bool shared, lock.take_shared(path));
    if (!shared) return Error(busy);
  }
  const std::string mine = path + "." + std::to_string(shard) + "-of-" + std::to_string(shards);
  FS_ASSIGN_OR_RETURN(bool got, lock.take(mine, LOCK_EX));
  if (!got)
    return Error(dir + ": another sweep is writing shard " + std::to_string(shard) + "/" +
                 std::to_string(shards) + " of this folder (it holds " + mine +
                 "); wait for it to finish or give another --out");
  return Status::Ok();
}
}  // namespace

Status write_sweep_csv(const SweepSpec& s, const std::string& out_dir) {
  const std::string jsonl = out_dir + "/results.jsonl", csv = out_dir + "/results.csv";
  const auto rows = read_rows(jsonl);
  std::ostringstream out;
  out << "index";
  for (const auto& a : s.axes) out << "," << a.first;
  const char* metrics[] = {"step_time_s",
                           "tokens_per_s",
                           "mfu",
                           "memory_gib",
                           "compute_s",
                           "exposed_comm_s",
                           "bubble_s",
                           "dp_comm_s",
                           "compression_ratio",
                           "cost_per_mtok_usd",
                           "energy_per_mtok_kwh",
                           "offload_s",
                           "data_stall_s",
                           "data_load_s",
                           "host_memory_gib",
                           "mtbf_h",
                           "checkpoint_write_s",
                           "checkpoint_interval_s",
                           "effective_time",
                           "effective_time_model",
                           "failures_per_run",
                           "recompute_s",
                           "activations_gib"};
  for (const char* m : metrics) out << "," << m;
  out << ",tp,pp,dp,cp,ep,micro_batch,zero_stage,recompute,sequence_parallel,virtual_stages,global_batch,"
         "error\n";
  auto cell = [](const json& v) {
    std::string t = v.is_string() ? v.get<std::string>() : v.dump();
    if (t.find_first_of(",\"\n") != std::string::npos) {
      std::string q = "\"";
      for (char c : t) {
        if (c == '"') q += '"';
        q += c;
      }
      return q + "\"";
    }
    return t;
  };
  for (const auto& [i, row] : rows) {
    out << i;
    for (const auto& a : s.axes)
      out << "," << (row["axes"].contains(a.first) ? cell(row["axes"][a.first]) : "");
    for (const char* m : metrics) out << "," << (row.contains(m) ? cell(row[m]) : "");
    const json plan = row.value("plan", json::object());
    for (const char* k : {"tp", "pp", "dp", "cp", "ep", "micro_batch", "zero_stage"})
      out << "," << (plan.contains(k) ? cell(plan[k]) : "");
    // The recompute policy as tables show it (recompute_string): "full x10", "full /5".
    std::string rc = plan.contains("recompute") ? plan["recompute"].get<std::string>() : "";
    if (plan.contains("recompute_layers"))
      rc += (plan.value("recompute_method", "block") == "uniform" ? " /" : " x") +
            plan["recompute_layers"].dump();
    out << "," << cell(rc);
    for (const char* k : {"sequence_parallel", "virtual_stages", "global_batch"})
      out << "," << (plan.contains(k) ? cell(plan[k]) : "");
    out << "," << (row.contains("error") ? cell(row["error"]) : "") << "\n";
  }
  return write_file_atomically(csv, out.str());
}

namespace {

// The output folder made and locked (one writer per point: a second sweep into it, of the same
// shard, is refused), and the rows it already holds for this spec: an error where it holds
// another spec's. Lines a kill left torn are dropped from the file (not only skipped), while no
// other shard appends to it: rewritten whole, synced and renamed into place.
Result<std::map<std::size_t, json>> open_output(const SweepSpec& s, const SweepOptions& o,
                                                const SweepStatus& st, FolderLock& folder) {
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) return Error(o.out_dir + ": cannot create output folder: " + ec.message());
  if (!std::filesystem::is_directory(o.out_dir, ec)) return Error(o.out_dir + ": not a folder (--out)");
  FS_RETURN_IF_ERROR(lock_output(folder, o.out_dir, o.shard, o.shards));
  // The outputs can be written, before any work.
  if (o.write_csv) FS_RETURN_IF_ERROR(check_output_path(st.csv, "--out"));
  ResultsFile results = read_results(st.jsonl);
  for (const auto& [index, row] : results.rows)
    if (row.value("spec", std::string()) != s.id)
      return Error(st.jsonl + ": holds results of a different sweep spec (row " + std::to_string(index) +
                   "; this spec is " + s.id + "): give another --out or remove the folder");
  if (results.torn > 0 && folder.exclusive) FS_RETURN_IF_ERROR(write_file_atomically(st.jsonl, results.kept));
  if (folder.exclusive && o.shards > 1) {  // let the other shards in
    FS_ASSIGN_OR_RETURN(bool shared, folder.share(o.out_dir + "/" + kSweepLockFile));
    if (!shared)
      return Error(o.out_dir +
                   ": another sweep is writing this folder; wait for it to finish or give another --out");
  }
  return std::move(results.rows);
}

// The results file opened for appending. One write() per line on an O_APPEND descriptor: a kill
// leaves at most one partial line, which reading skips; several shards can append to the same
// file. A partial line left by a kill must not glue onto the next one.
Result<int> open_for_append(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return Error(path + ": cannot open for appending");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (in && in.tellg() > 0) {
    in.seekg(-1, std::ios::end);
    char last = '\n';
    in.get(last);
    if (last != '\n' && ::write(fd, "\n", 1) != 1) {
      ::close(fd);
      return Error(path + ": write error");
    }
  }
  return fd;
}

// Evaluates the points in parallel (o.threads), appending each row as it comes; the number that
// failed, or a write error.
Result<std::size_t> evaluate_points(const SweepSpec& s, const SweepOptions& o,
                                    const std::vector<const SweepPoint*>& todo, const std::string& jsonl,
                                    std::atomic<std::size_t>* done) {
  if (done) *done = 0;
  FS_ASSIGN_OR_RETURN(const int fd, open_for_append(jsonl));
  std::unique_ptr<tbb::global_control> limit;
  if (o.threads > 0)
    limit = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, o.threads);
  std::mutex mu;
  bool write_failed = false;
  std::atomic<std::size_t> failed{0};
  tbb::parallel_for(std::size_t{0}, todo.size(), [&](std::size_t i) {
    const json row = evaluate_point(s, *todo[i]);
    if (!row.value("ok", false)) ++failed;
    const std::string line = row.dump() + "\n";
    {
      std::lock_guard<std::mutex> lock(mu);
      if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) write_failed = true;
    }
    if (done) ++*done;
  });
  ::close(fd);
  if (write_failed) return Error(jsonl + ": write error");
  return failed.load();
}

}  // namespace

Result<SweepStatus> run_sweep(const SweepSpec& s, const SweepOptions& o, std::atomic<std::size_t>* done) {
  if (o.shards < 1 || o.shard < 0 || o.shard >= o.shards)
    return Error("--shard: " + std::to_string(o.shard) + "/" + std::to_string(o.shards) +
                 " is not i/N with 0 <= i < N");
  SweepStatus st;
  st.jsonl = o.out_dir + "/results.jsonl";
  st.csv = o.out_dir + "/results.csv";
  FolderLock folder;
  FS_ASSIGN_OR_RETURN(const auto existing, open_output(s, o, st, folder));
  // This shard's points not yet in the results.
  std::vector<const SweepPoint*> todo;
  for (const SweepPoint& p : s.points) {
    if (p.index % static_cast<std::size_t>(o.shards) != static_cast<std::size_t>(o.shard)) continue;
    ++st.total;
    if (existing.count(p.index)) {
      ++st.skipped;
      continue;
    }
    todo.push_back(&p);
  }
  FS_ASSIGN_OR_RETURN(st.failed, evaluate_points(s, o, todo, st.jsonl, done));
  st.computed = todo.size();
  if (o.write_csv) FS_RETURN_IF_ERROR(write_sweep_csv(s, o.out_dir));
  return st;
}

}  // namespace foresight
