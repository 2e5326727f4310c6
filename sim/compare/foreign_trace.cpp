// PyTorch profiler traces, streamed into steps and kinds; compared with a prediction.
#include "sim/compare/foreign_trace.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <unordered_map>

#include "foresight/config.h"
#include "sim/core/stats.h"
#include "sim/spec/json_reader.h"
#include "sim/spec/presets.h"

#if FORESIGHT_HAVE_SQLITE
#include <sqlite3.h>
#endif

namespace foresight {

namespace {

// The arguments' text, one after another.
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool known_kind(const std::string& k) {
  if (k == "step" || k == "layer") return true;
  for (const char* f : kForeignKinds)
    if (k == f) return true;
  return false;
}

}  // namespace

const KindRule* KindTable::rule_of(const std::string& name, std::size_t* at) const {
  const std::string n = lower(name);
  for (const KindRule& r : rules)
    if (const auto p = n.find(r.pattern); p != std::string::npos) {
      if (at) *at = p;
      return &r;
    }
  return nullptr;
}

std::string KindTable::kind_of(const std::string& name) const {
  const KindRule* r = rule_of(name);
  return r ? r->kind : "";
}

Result<KindTable> kind_table_from_json(const nlohmann::json& doc, const std::string& file) {
  if (!doc.is_object() || !doc.contains("rules") || !doc["rules"].is_array())
    return Error(file + ": /rules: expected an array of {\"pattern\", \"kind\"} rules");
  KindTable t;
  const auto& rules = doc["rules"];
  for (std::size_t i = 0; i < rules.size(); ++i) {
    const std::string at = file + ": /rules/" + std::to_string(i);
    const auto& r = rules[i];
    if (!r.is_object() || !r.contains("pattern") || !r["pattern"].is_string() ||
        r["pattern"].get<std::string>().empty())
      return Error(at + "/pattern: expected a non-empty string");
    if (!r.contains("kind") || !r["kind"].is_string()) return Error(at + "/kind: expected a string");
    const std::string kind = r["kind"].get<std::string>();
    if (!known_kind(kind))
      return Error(at + "/kind: \"" + kind +
                   "\" is not a kind (gemm, attention, elementwise, optimizer, communication, memcpy, step, "
                   "layer)");
    t.rules.push_back({lower(r["pattern"].get<std::string>()), kind});
  }
  return t;
}

Result<KindTable> default_kind_table() {
  const auto text = preset_text(PresetKind::kTable, "kernel-kinds");
  if (!text) return Error("the built-in kernel-kinds table is missing from this build");
  FS_ASSIGN_OR_RETURN(nlohmann::json doc, parse_json_text(*text, "compare/kernel-kinds.json"));
  return kind_table_from_json(doc, "compare/kernel-kinds.json");
}

KindTable extend_kind_table(const KindTable& base, const KindTable& extra) {
  KindTable t = extra;
  t.rules.insert(t.rules.end(), base.rules.begin(), base.rules.end());
  return t;
}

namespace {

// kDeviceRange: a host range's span on the device (Kineto's gpu_user_annotation); kModule: the
// profiler's range of an nn.Module's forward (a python_function event "nn.Module: Name_k"). Both
// serve only to find layers.
// kRuntime: a CUDA runtime or driver call on a host thread (Kineto's cuda_runtime, cuda_driver),
// read for the host's issue rate (host_issue).
enum class Where : std::uint8_t { kCpu, kUserRange, kDevice, kDeviceRange, kModule, kRuntime, kSkip };

bool host_op(Where w) { return w == Where::kCpu || w == Where::kUserRange; }

struct RawEvent {
  double ts = 0, dur = 0;  // microseconds
  std::uint32_t name = 0, track = 0;
  Where where = Where::kCpu;
};

// Collects the complete ("X") events of a Chrome trace: the top-level array, or the object's
// "traceEvents" array.
class EventSax {
 public:
  EventSax(std::vector<RawEvent>& out, std::vector<std::string>& names, std::size_t max_events)
      : out_(out), names_(names), max_events_(max_events) {}

  bool null() { return value(); }
  bool boolean(bool) { return value(); }
  bool number_integer(std::int64_t v) { return number(static_cast<double>(v), std::to_string(v)); }
  bool number_unsigned(std::uint64_t v) { return number(static_cast<double>(v), std::to_string(v)); }
  bool number_float(double v, const std::string& s) { return number(v, s); }
  bool string(std::string& s) {
    if (in_event_field()) {
      if (key_ == "name")
        cur_.name = s, has_name_ = true;
      else if (key_ == "ph")
        cur_.ph = s;
      else if (key_ == "cat")
        cur_.cat = s;
      else if (key_ == "pid")
        cur_.pid = s;
      else if (key_ == "tid")
        cur_.tid = s;
      else if (key_ == "ts" || key_ == "dur")
        return fail(key_, "a string \"" + s + "\"");
    }
    return true;
  }
  bool binary(nlohmann::json::binary_t&) { return value(); }
  bool start_object(std::size_t) {
    ++depth_;
    if (events_depth_ > 0 && depth_ == events_depth_ + 1) {
      cur_ = {};
      has_name_ = false;
      ++index_;
    }
    return true;
  }
  bool end_object() {
    if (events_depth_ > 0 && depth_ == events_depth_ + 1) finish();
    --depth_;
    return error_.empty();
  }
  bool start_array(std::size_t) {
    ++depth_;
    if (depth_ == 1)
      events_depth_ = 1, found_events_ = true;
    else if (depth_ == 2 && top_key_ == "traceEvents")
      events_depth_ = 2, found_events_ = true;
    return true;
  }
  bool end_array() {
    if (depth_ == events_depth_) events_depth_ = -1;
    --depth_;
    return true;
  }
  bool key(std::string& k) {
    if (depth_ == 1) top_key_ = k;
    key_ = k;
    return true;
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::json::exception& e) {
    parse_error_ = cat("not JSON at byte ", pos, ": ", e.what());
    return false;
  }

  bool found_events() const { return found_events_; }
  const std::string& error() const { return error_.empty() ? parse_error_ : error_; }
  bool has_cat = false, cpu_functions = false;

 private:
  struct Current {
    std::string name, ph, cat, pid, tid;
    double ts = -1, dur = -1;
  };
  bool in_event_field() const { return events_depth_ > 0 && depth_ == events_depth_ + 1; }
  bool value() { return true; }
  bool number(double v, const std::string& text) {
    if (!in_event_field()) return true;
    if (key_ == "ts")
      cur_.ts = v;
    else if (key_ == "dur")
      cur_.dur = v;
    else if (key_ == "pid")
      cur_.pid = text;
    else if (key_ == "tid")
      cur_.tid = text;
    return true;
  }
  bool fail(const std::string& field, const std::string& got) {
    error_ = cat("event ", index_ - 1, ": \"", field, "\": expected a number of microseconds, got ", got);
    return false;
  }
  std::uint32_t intern(const std::string& s, std::unordered_map<std::string, std::uint32_t>& ids,
                       std::vector<std::string>* keep) {
    const auto [it, added] = ids.emplace(s, static_cast<std::uint32_t>(ids.size()));
    if (added && keep) keep->push_back(s);
    return it->second;
  }
  void finish() {
    if (cur_.ph != "X") return;
    // A time past 1e15 us (31 years) is no profiler's: refused, as its sums would not be finite.
    if (!has_name_ || !(cur_.ts >= 0 && cur_.ts <= 1e15) || !(cur_.dur >= 0 && cur_.dur <= 1e15)) {
      error_ = cat("event ", index_ - 1,
                   ": a complete event (\"ph\": \"X\") needs a name, and ts and dur in microseconds, >= 0 "
                   "and <= 1e15");
      return;
    }
    if (out_.size() >= max_events_) {
      error_ = cat("more than ", max_events_, " complete events: refused (ForeignOptions::max_events)");
      return;
    }
    has_cat = has_cat || !cur_.cat.empty();
    cpu_functions = cpu_functions || cur_.pid == "CPU functions";
    RawEvent e;
    e.ts = cur_.ts;
    e.dur = cur_.dur;
    const std::string& c = cur_.cat;
    if (c == "kernel" || c == "gpu_memcpy" || c == "gpu_memset" || c == "Kernel" || c == "Memcpy" ||
        c == "Memset")
      e.where = Where::kDevice;
    else if (c == "user_annotation")
      e.where = Where::kUserRange;
    else if (c == "gpu_user_annotation")
      e.where = Where::kDeviceRange;
    else if (c == "python_function" && cur_.name.rfind("nn.Module: ", 0) == 0)
      e.where = Where::kModule;
    else if (c.empty() || c == "cpu_op" || c == "Operator")
      e.where = c.empty() && cur_.name.find("::") == std::string::npos ? Where::kUserRange : Where::kCpu;
    else if (c == "cuda_runtime" || c == "cuda_driver")
      e.where = Where::kRuntime;
    else
      e.where = Where::kSkip;  // python frames, GPU-side ranges, flows
    if (e.where == Where::kSkip) return;
    e.name = intern(cur_.name, name_ids_, &names_);
    e.track = intern(cur_.pid + "/" + cur_.tid, track_ids_, nullptr);
    out_.push_back(e);
  }

  std::vector<RawEvent>& out_;
  std::vector<std::string>& names_;
  std::size_t max_events_;
  std::unordered_map<std::string, std::uint32_t> name_ids_, track_ids_;
  int depth_ = 0, events_depth_ = -1;
  std::size_t index_ = 0;
  std::string top_key_, key_, error_, parse_error_;
  Current cur_;
  bool has_name_ = false, found_events_ = false;
};

// Events' indices in time order, an enclosing event before the ones it holds (the longer first
// where two start together).
void sort_by_time(const std::vector<RawEvent>& ev, std::vector<std::size_t>& idx) {
  std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
    return ev[a].ts != ev[b].ts ? ev[a].ts < ev[b].ts : ev[a].dur > ev[b].dur;
  });
}

// The step a time (seconds) falls in, -1 for none. kHost: the step whose range holds it. kDevice:
// the step whose range (on the host) last began before it, since the device runs behind the host,
// up to twice its length after the last step's start.
enum class StepClock : std::uint8_t { kHost, kDevice };
int step_at(const std::vector<ForeignStep>& steps, double ts, StepClock clock) {
  auto it = std::upper_bound(steps.begin(), steps.end(), ts,
                             [](double t, const ForeignStep& s) { return t < s.start_s; });
  if (it == steps.begin()) return -1;
  --it;
  const bool out = clock == StepClock::kHost ? ts >= it->start_s + it->dur_s
                                             : it + 1 == steps.end() && ts > it->start_s + 2 * it->dur_s;
  return out ? -1 : static_cast<int>(it - steps.begin());
}

// The length of the union of [a, b) intervals (sorted in place).
double union_length(std::vector<std::pair<double, double>>& iv) {
  std::sort(iv.begin(), iv.end());
  double total = 0, lo = 0, hi = -1;
  for (const auto& [a, b] : iv) {
    if (a > hi) {
      if (hi > lo) total += hi - lo;
      lo = a, hi = b;
    } else {
      hi = std::max(hi, b);
    }
  }
  if (hi > lo) total += hi - lo;
  return total;
}

// |A \ B| for unions of intervals.
double uncovered(std::vector<std::pair<double, double>> a, std::vector<std::pair<double, double>> b) {
  std::vector<std::pair<double, double>> both = a;
  both.insert(both.end(), b.begin(), b.end());
  return union_length(both) - union_length(b);
}

struct Classified {
  std::vector<std::string> kind;  // per name id
};

// CPU traces: each event's self time (its time less its children's) goes to the outermost user
// range above it that maps, else to its own kind or the innermost mapped op above it; the step's
// own self time is idle; the rest is unmapped under the event's name.
void attribute_cpu(const std::vector<RawEvent>& ev, const std::vector<std::string>& names,
                   const Classified& cls, const std::unordered_map<std::size_t, int>& step_of,
                   std::vector<ForeignStep>& steps, std::map<std::string, double>& unmapped) {
  std::map<std::uint32_t, std::vector<std::size_t>> by_track;
  for (std::size_t i = 0; i < ev.size(); ++i)
    if (host_op(ev[i].where)) by_track[ev[i].track].push_back(i);
  struct Open {
    std::size_t event;
    double end;
    double child_s = 0;
    std::string claim, inherit;  // the outermost user range's kind, the innermost mapped kind
    int step = -1;
  };
  for (auto& [track, idx] : by_track) {
    sort_by_time(ev, idx);
    std::vector<Open> stack;
    auto close = [&](const Open& o) {
      const RawEvent& e = ev[o.event];
      const std::string& own = cls.kind[e.name];
      const double self = std::max(0.0, e.dur - o.child_s) * 1e-6;
      if (o.step < 0) return;
      ForeignStep& st = steps[static_cast<std::size_t>(o.step)];
      if (own == "step" || own == "layer") {  // the host between ops
        st.idle_s += self;
        return;
      }
      const std::string kind = !o.claim.empty() ? o.claim : !own.empty() ? own : o.inherit;
      if (!kind.empty())
        st.kind_s[kind] += self;
      else
        unmapped[names[e.name]] += self;
    };
    for (std::size_t i : idx) {
      const RawEvent& e = ev[i];
      while (!stack.empty() && stack.back().end <= e.ts) {
        close(stack.back());
        stack.pop_back();
      }
      Open o{i, e.ts + e.dur};
      const std::string& own = cls.kind[e.name];
      if (!stack.empty()) {
        Open& parent = stack.back();
        parent.child_s += std::min(e.dur, parent.end - e.ts);
        o.claim = parent.claim;
        o.inherit = parent.inherit;
        o.step = parent.step;
      }
      if (own == "step") {
        o.step = step_of.at(i);
      } else if (!own.empty() && own != "layer") {
        if (e.where == Where::kUserRange && o.claim.empty()) o.claim = own;
        o.inherit = own;
      }
      stack.push_back(std::move(o));
    }
    while (!stack.empty()) {
      close(stack.back());
      stack.pop_back();
    }
  }
  for (ForeignStep& s : steps)
    s.exposed_communication_s = s.kind_s.count("communication") ? s.kind_s["communication"] : 0.0;
}

// Device traces: each kernel's duration to its kind, in the step whose range (on the CPU) last
// began before it (the device runs behind the host); idle is the step's time no kernel covers.
void attribute_device(const std::vector<RawEvent>& ev, const std::vector<std::string>& names,
                      const Classified& cls, std::vector<ForeignStep>& steps,
                      std::map<std::string, double>& unmapped) {
  std::vector<std::vector<std::pair<double, double>>> all(steps.size()), comm(steps.size()),
      compute(steps.size());
  for (const RawEvent& e : ev) {
    if (e.where != Where::kDevice) continue;
    const double ts = e.ts * 1e-6;
    const int at = step_at(steps, ts, StepClock::kDevice);
    if (at < 0) continue;
    const std::size_t s = static_cast<std::size_t>(at);
    const std::string& kind = cls.kind[e.name];
    const double dur = e.dur * 1e-6;
    if (kind.empty() || kind == "step" || kind == "layer")
      unmapped[names[e.name]] += dur;
    else
      steps[s].kind_s[kind] += dur;
    all[s].push_back({ts, ts + dur});
    (kind == "communication" ? comm : compute)[s].push_back({ts, ts + dur});
  }
  for (std::size_t s = 0; s < steps.size(); ++s) {
    steps[s].idle_s = std::max(0.0, steps[s].dur_s - union_length(all[s]));
    steps[s].exposed_communication_s = uncovered(comm[s], compute[s]);
  }
}

// A layer range's layer: the number right after the pattern that made it a layer ("layers.3.mlp"
// -> 3, "nn.Module: Qwen2DecoderLayer_5" -> 5), else the last number in the name, else -1.
int layer_number(const std::string& name, const KindTable& kinds) {
  const std::string n = lower(name);
  std::size_t at = std::string::npos;
  if (const KindRule* r = kinds.rule_of(name, &at); r && r->kind == "layer")
    at += r->pattern.size();
  else
    at = std::string::npos;
  auto digit = [&](std::size_t i) { return i < n.size() && std::isdigit(static_cast<unsigned char>(n[i])); };
  std::size_t first = at, last = at;
  if (!digit(at)) {
    const auto l = n.find_last_of("0123456789");
    if (l == std::string::npos) return -1;
    first = last = l;
    while (first > 0 && digit(first - 1)) --first;
  } else {
    while (digit(last + 1)) ++last;
  }
  if (last - first > 6) return -1;
  return std::stoi(n.substr(first, last - first + 1));
}

// Each layer range's duration to its layer in the step whose range last began before it: the
// device's ranges in a device trace, the host's otherwise. A layer range inside another on its
// track (a layer's sub-module) is not counted again.
void attribute_layers(const std::vector<RawEvent>& ev, const std::vector<std::string>& names,
                      const Classified& cls, const KindTable& kinds, bool device,
                      std::vector<ForeignStep>& steps) {
  std::vector<int> layer(names.size(), -1);
  for (std::size_t n = 0; n < names.size(); ++n)
    if (cls.kind[n] == "layer") layer[n] = layer_number(names[n], kinds);
  std::map<std::uint32_t, std::vector<std::size_t>> by_track;
  for (std::size_t i = 0; i < ev.size(); ++i) {
    const Where w = ev[i].where;
    const bool source = device ? w == Where::kDeviceRange : w == Where::kUserRange || w == Where::kModule;
    if (source && layer[ev[i].name] >= 0) by_track[ev[i].track].push_back(i);
  }
  for (auto& [track, idx] : by_track) {
    sort_by_time(ev, idx);
    double open_until = -1;
    for (std::size_t i : idx) {
      const RawEvent& e = ev[i];
      if (e.ts < open_until) continue;
      open_until = e.ts + e.dur;
      const int at = step_at(steps, e.ts * 1e-6, device ? StepClock::kDevice : StepClock::kHost);
      if (at >= 0) steps[static_cast<std::size_t>(at)].layer_s[layer[e.name]] += e.dur * 1e-6;
    }
  }
}

// A runtime call that waits for the device rather than issuing to it: the synchronising calls
// (cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize, a synchronous cudaMemcpy),
// and a launch that blocked (longer than kBlockedLaunchUs: a launch takes a few microseconds
// unless the device's queue is full and the host waits for a slot).
constexpr double kBlockedLaunchUs = 100;
bool waits_for_device(const std::string& name, double dur_us) {
  if (name.find("Synchronize") != std::string::npos || name == "cudaMemcpy" || name == "cuMemcpyDtoH_v2" ||
      name == "cuMemcpyDtoH")
    return true;
  return name.find("Launch") != std::string::npos && dur_us > kBlockedLaunchUs;
}

// The host's issue of work, per step (ForeignStep::host_kernels, host_busy_s). On each thread that
// launches kernels: its kernel launches, and its time busy issuing them -- its top-level events
// (framework ops, and runtime calls made outside any op: a library's own extension calling CUDA),
// less the runtime calls in them that wait for the device, plus the pauses between consecutive
// events up to kMaxIssueGapUs (the framework's Python; a longer pause is a wait the profiler does
// not show -- the data loader, garbage collection, a thread waiting for work -- not issue).
constexpr double kMaxIssueGapUs = 1000;
void host_issue(const std::vector<RawEvent>& ev, const std::vector<std::string>& names,
                std::vector<ForeignStep>& steps) {
  std::map<std::uint32_t, std::vector<std::size_t>> items, calls;  // per track, in time order
  std::set<std::uint32_t> launching;
  auto launch = [&](const RawEvent& e) { return names[e.name].find("Launch") != std::string::npos; };
  for (std::size_t i = 0; i < ev.size(); ++i) {
    const Where w = ev[i].where;
    if (w == Where::kCpu || w == Where::kRuntime) items[ev[i].track].push_back(i);
    if (w != Where::kRuntime) continue;
    calls[ev[i].track].push_back(i);
    if (launch(ev[i])) launching.insert(ev[i].track);
  }
  for (std::uint32_t track : launching) {
    std::vector<std::size_t>& top = items[track];
    std::vector<std::size_t>& c = calls[track];
    sort_by_time(ev, top);
    sort_by_time(ev, c);
    for (std::size_t i : c)
      if (const int s = step_at(steps, ev[i].ts * 1e-6, StepClock::kHost); s >= 0 && launch(ev[i]))
        steps[static_cast<std::size_t>(s)].host_kernels += 1;
    std::size_t next_call = 0;
    double prev_end = -1;
    int prev_step = -1;
    for (std::size_t i : top) {
      const RawEvent& e = ev[i];
      if (e.ts < prev_end) continue;  // inside the event before: not top-level
      const int step = step_at(steps, e.ts * 1e-6, StepClock::kHost);
      double blocked = 0;
      while (next_call < c.size() && ev[c[next_call]].ts < e.ts) ++next_call;
      for (; next_call < c.size() && ev[c[next_call]].ts < e.ts + e.dur; ++next_call) {
        const RawEvent& r = ev[c[next_call]];
        if (waits_for_device(names[r.name], r.dur)) blocked += std::min(r.dur, e.ts + e.dur - r.ts);
      }
      if (step >= 0) {
        ForeignStep& st = steps[static_cast<std::size_t>(step)];
        st.host_busy_s += std::max(0.0, e.dur - blocked) * 1e-6;
        const double gap = e.ts - prev_end;
        if (step == prev_step && gap > 0 && gap <= kMaxIssueGapUs) st.host_busy_s += gap * 1e-6;
      }
      prev_end = e.ts + e.dur;
      prev_step = step;
    }
  }
}

// The trace's collectives for clock alignment (ForeignTrace::collectives): the communication
// kernels of a GPU trace, the communication ops of a CPU trace, less point-to-point sends and
// receives (one pair of ranks each, ending when the pair does), by their end.
void collect_collectives(const std::vector<RawEvent>& ev, const std::vector<std::string>& names,
                         const Classified& cls, ForeignTrace& t) {
  constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();
  std::vector<std::uint32_t> id(names.size(), kNone);  // the name's place in collective_names
  for (std::size_t n = 0; n < names.size(); ++n) {
    const std::string l = lower(names[n]);
    if (cls.kind[n] != "communication" || l.find("send") != std::string::npos ||
        l.find("recv") != std::string::npos)
      continue;
    id[n] = static_cast<std::uint32_t>(t.collective_names.size());
    t.collective_names.push_back(names[n]);
  }
  for (const RawEvent& e : ev)
    if (id[e.name] != kNone && (t.device ? e.where == Where::kDevice : host_op(e.where)))
      t.collectives.emplace_back(id[e.name], (e.ts + e.dur) * 1e-6);
  std::stable_sort(t.collectives.begin(), t.collectives.end(),
                   [](const auto& a, const auto& b) { return a.second < b.second; });
}

Result<ForeignTrace> finish_trace(std::vector<RawEvent>& ev, const std::vector<std::string>& names,
                                  const std::string& format, const std::string& file,
                                  const KindTable& kinds) {
  ForeignTrace t;
  t.file = file;
  t.events = ev.size();
  t.format = format;
  if (ev.empty())
    return Error(file + (format == "nsys-sqlite"
                             ? ": no kernels, copies or NVTX ranges: nothing to compare"
                             : ": no complete events (\"ph\": \"X\"): not a profiler trace"));
  Classified cls;
  cls.kind.reserve(names.size());
  for (const std::string& n : names) cls.kind.push_back(kinds.kind_of(n));
  std::vector<std::size_t> step_events;  // in time order; step_of: event -> its place in t.steps
  for (std::size_t i = 0; i < ev.size(); ++i) {
    t.device = t.device || ev[i].where == Where::kDevice;
    if (host_op(ev[i].where) && cls.kind[ev[i].name] == "step") step_events.push_back(i);
  }
  std::stable_sort(step_events.begin(), step_events.end(),
                   [&](std::size_t a, std::size_t b) { return ev[a].ts < ev[b].ts; });
  std::unordered_map<std::size_t, int> step_of;
  for (std::size_t i : step_events) {
    step_of[i] = static_cast<int>(t.steps.size());
    t.steps.push_back({names[ev[i].name], ev[i].ts * 1e-6, ev[i].dur * 1e-6, {}, 0, 0});
  }
  if (t.steps.empty() && format == "nsys-sqlite")
    return Error(
        file +
        ": no step ranges: mark each step with an NVTX range (torch.cuda.nvtx.range_push(\"ProfilerStep#N\") "
        "... range_pop(), or nvtx.annotate) or map your ranges' name to \"step\" with --kinds");
  if (t.steps.empty())
    return Error(
        file +
        ": no step ranges (ProfilerStep#N): profile with torch.profiler.schedule and call prof.step() "
        "each step, or wrap each step in record_function(\"ProfilerStep#N\")");
  std::map<std::string, double> unmapped;
  if (t.device)
    attribute_device(ev, names, cls, t.steps, unmapped);
  else
    attribute_cpu(ev, names, cls, step_of, t.steps, unmapped);
  attribute_layers(ev, names, cls, kinds, t.device, t.steps);
  if (t.device) host_issue(ev, names, t.steps);
  collect_collectives(ev, names, cls, t);
  t.unmapped.assign(unmapped.begin(), unmapped.end());
  std::sort(t.unmapped.begin(), t.unmapped.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  return t;
}

}  // namespace

namespace {
// Streams `input` (a stream or text) through the event reader.
template <typename Input>
Result<ForeignTrace> read_trace(Input&& input, const std::string& file, const KindTable& kinds,
                                const ForeignOptions& options) {
  std::vector<RawEvent> ev;
  std::vector<std::string> names;
  EventSax sax(ev, names, options.max_events);
  const bool ok = nlohmann::json::sax_parse(std::forward<Input>(input), &sax);
  if (!ok || !sax.error().empty())
    return Error(file + ": " + (sax.error().empty() ? "unreadable" : sax.error()));
  if (!sax.found_events()) return Error(file + ": no trace events (neither an array nor \"traceEvents\")");
  return finish_trace(ev, names, sax.has_cat ? "kineto" : "chrome-cpu", file, kinds);
}

// Nsight Systems' SQLite export (`nsys export --type sqlite`; its schema reference, "SQLite Schema
// Reference" in the Nsight Systems user guide): kernels from CUPTI_ACTIVITY_KIND_KERNEL (their
// shortName in StringIds), copies and sets from CUPTI_ACTIVITY_KIND_MEMCPY/MEMSET, ranges from
// NVTX_EVENTS (push/pop and start/end ranges, their text inline or in StringIds). Times are
// nanoseconds. One report per rank: a report with several GPUs' kernels is refused.
bool is_sqlite_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[16] = {};
  in.read(head, sizeof head);
  return in.gcount() == 16 && std::string(head, 16) == std::string("SQLite format 3\0", 16);
}

#if FORESIGHT_HAVE_SQLITE
class Sqlite {
 public:
  explicit Sqlite(const std::string& path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
      error_ = db_ ? sqlite3_errmsg(db_) : "cannot open";
    }
  }
  ~Sqlite() {
    if (db_) sqlite3_close(db_);
  }
  Sqlite(const Sqlite&) = delete;
  Sqlite& operator=(const Sqlite&) = delete;
  const std::string& error() const { return error_; }
  // Runs `sql`, calling row(statement) per row; false (and error()) on failure.
  template <typename Row>
  bool each(const std::string& sql, Row row) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
      error_ = sqlite3_errmsg(db_);
      return false;
    }
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
      if (!row(st)) break;
    const bool ok = rc == SQLITE_ROW || rc == SQLITE_DONE;
    if (!ok) error_ = sqlite3_errmsg(db_);
    sqlite3_finalize(st);
    return ok;
  }
  std::set<std::string> tables() {
    std::set<std::string> out;
    each("SELECT name FROM sqlite_master WHERE type = 'table'", [&](sqlite3_stmt* st) {
      const unsigned char* t = sqlite3_column_text(st, 0);
      if (t) out.insert(reinterpret_cast<const char*>(t));
      return true;
    });
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
  std::string error_;
};

Result<ForeignTrace> read_nsys_sqlite(const std::string& path, const KindTable& kinds,
                                      const ForeignOptions& options) {
  Sqlite db(path);
  if (!db.error().empty()) return Error(path + ": cannot open the SQLite file: " + db.error());
  const std::set<std::string> tables = db.tables();
  if (!db.error().empty()) return Error(path + ": not a readable SQLite database: " + db.error());
  const bool kernels = tables.count("CUPTI_ACTIVITY_KIND_KERNEL") > 0, nvtx = tables.count("NVTX_EVENTS") > 0;
  if (!tables.count("StringIds") || (!kernels && !nvtx))
    return Error(path +
                 ": not an Nsight Systems export (no StringIds table, or neither CUPTI_ACTIVITY_KIND_KERNEL "
                 "nor NVTX_EVENTS): export the report with `nsys export --type sqlite`");
  std::vector<RawEvent> ev;
  std::vector<std::string> names;
  std::unordered_map<std::string, std::uint32_t> ids;
  auto id_of = [&](const std::string& name) {
    auto [it, added] = ids.emplace(name, static_cast<std::uint32_t>(names.size()));
    if (added) names.push_back(name);
    return it->second;
  };
  std::string error;
  auto add = [&](sqlite3_stmt* st, int name_col, Where where, std::uint32_t track) {
    if (ev.size() >= options.max_events) {
      error = cat("more than ", options.max_events, " events: refused (ForeignOptions::max_events)");
      return false;
    }
    const unsigned char* text = sqlite3_column_text(st, name_col);
    const double start = static_cast<double>(sqlite3_column_int64(st, 0)),
                 end = static_cast<double>(sqlite3_column_int64(st, 1));
    RawEvent e;
    e.ts = start * 1e-3;  // microseconds, as the Chrome traces
    e.dur = std::max(0.0, end - start) * 1e-3;
    e.name = id_of(text ? reinterpret_cast<const char*>(text) : "(unnamed)");
    e.track = track;
    e.where = where;
    ev.push_back(e);
    return true;
  };
  std::set<long long> devices;
  if (kernels && !db.each("SELECT k.start, k.end, s.value, k.deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL AS k "
                          "LEFT JOIN StringIds AS s ON s.id = k.shortName",
                          [&](sqlite3_stmt* st) {
                            devices.insert(sqlite3_column_int64(st, 3));
                            return add(st, 2, Where::kDevice, 0);
                          }))
    return Error(path + ": CUPTI_ACTIVITY_KIND_KERNEL: " + db.error());
  if (devices.size() > 1)
    return Error(cat(path, ": kernels of ", devices.size(),
                     " GPUs in one report: profile one report per rank (nsys profile -o report.%q{RANK})"));
  // CUPTI's copy kinds (CUpti_ActivityMemcpyKind): 1 host to device, 2 device to host, 8 device to
  // device, 10 peer to peer; the names Kineto gives them.
  if (tables.count("CUPTI_ACTIVITY_KIND_MEMCPY") &&
      !db.each("SELECT start, end, CASE copyKind WHEN 1 THEN 'Memcpy HtoD' WHEN 2 THEN 'Memcpy DtoH' "
               "WHEN 8 THEN 'Memcpy DtoD' WHEN 10 THEN 'Memcpy PtoP' ELSE 'Memcpy' END "
               "FROM CUPTI_ACTIVITY_KIND_MEMCPY",
               [&](sqlite3_stmt* st) { return add(st, 2, Where::kDevice, 0); }))
    return Error(path + ": CUPTI_ACTIVITY_KIND_MEMCPY: " + db.error());
  if (tables.count("CUPTI_ACTIVITY_KIND_MEMSET") &&
      !db.each("SELECT start, end, 'Memset' FROM CUPTI_ACTIVITY_KIND_MEMSET",
               [&](sqlite3_stmt* st) { return add(st, 2, Where::kDevice, 0); }))
    return Error(path + ": CUPTI_ACTIVITY_KIND_MEMSET: " + db.error());
  // NVTX event types 59 (push/pop range) and 60 (start/end range); the text inline or by id.
  if (nvtx && !db.each("SELECT n.start, n.end, COALESCE(n.text, s.value), n.globalTid FROM NVTX_EVENTS AS n "
                       "LEFT JOIN StringIds AS s ON s.id = n.textId "
                       "WHERE n.eventType IN (59, 60) AND n.end IS NOT NULL",
                       [&](sqlite3_stmt* st) {
                         return add(st, 2, Where::kUserRange,
                                    static_cast<std::uint32_t>(sqlite3_column_int64(st, 3) & 0xffffffff) + 1);
                       }))
    return Error(path + ": NVTX_EVENTS: " + db.error());
  if (!error.empty()) return Error(path + ": " + error);
  return finish_trace(ev, names, "nsys-sqlite", path, kinds);
}
#endif
}  // namespace

Result<ForeignTrace> load_foreign_trace(const std::string& path, const KindTable& kinds,
                                        const ForeignOptions& options) {
  if (is_sqlite_file(path)) {
#if FORESIGHT_HAVE_SQLITE
    return read_nsys_sqlite(path, kinds, options);
#else
    return Error(path +
                 ": an SQLite file (an Nsight Systems export?), but this build has no SQLite "
                 "(install libsqlite3-dev and configure again)");
#endif
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error(path + ": cannot open trace");
  return read_trace(in, path, kinds, options);
}

Result<ForeignTrace> foreign_trace_from_text(const std::string& text, const std::string& file,
                                             const KindTable& kinds, const ForeignOptions& options) {
  return read_trace(text, file, kinds, options);
}

bool is_foresight_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string head(64 * 1024, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  const auto meta = head.find("\"metadata\"");
  const auto events = head.find("\"traceEvents\"");
  return meta != std::string::npos && head.find("\"plan\"", meta) != std::string::npos &&
         (events == std::string::npos || meta < events);
}

namespace {

// The measured kind of a predicted op.
std::string predicted_kind(const TraceOp& op) {
  if (op.cat == "collective" || op.cat == "p2p") return "communication";
  if (op.cat == "copy") return "memcpy";
  const std::string k = op_kind(op);
  return k == "lm_head" ? (op.name == "final_norm" ? "elementwise" : "gemm") : k;
}

int plan_ranks(const nlohmann::json& meta) {
  if (!meta.contains("plan") || !meta["plan"].is_object()) return 0;
  const auto& p = meta["plan"];
  int n = 1;
  for (const char* k : {"dp", "tp", "pp", "cp"})
    if (p.contains(k) && p[k].is_number_integer()) n *= p[k].get<int>();
  return n;
}

double pct(double p, double m) { return m > 0 ? (p - m) / m * 100 : 0.0; }

// The layer of a predicted op's id ("r0/L3/mb0/fwd/qkv" -> 3) when it is a forward op, else -1.
int predicted_forward_layer(const std::string& id) {
  const auto l = id.find("/L");
  if (l == std::string::npos || id.find("/fwd/") == std::string::npos) return -1;
  std::size_t end = l + 2;
  while (end < id.size() && std::isdigit(static_cast<unsigned char>(id[end]))) ++end;
  if (end == l + 2 || end - l - 2 > 6 || end >= id.size() || id[end] != '/') return -1;
  return std::stoi(id.substr(l + 2, end - l - 2));
}

// The k-th layer of each rank, measured against predicted, where every measured trace shows the
// same number of layers in each compared step and the prediction gives each rank as many.
void compare_layers(const std::map<int, std::map<int, double>>& predicted,
                    const std::vector<ForeignTrace>& measured, std::size_t first_step, std::size_t nsteps,
                    ForeignCompareReport& r) {
  std::set<std::size_t> counts;
  for (const ForeignTrace& t : measured)
    for (std::size_t s = first_step; s < nsteps; ++s) counts.insert(t.steps[s].layer_s.size());
  const std::size_t shown = *counts.rbegin();
  if (shown == 0) return;
  if (counts.size() > 1) {
    r.notes.push_back(
        "the measured traces show different numbers of layer ranges per step: no per-layer comparison");
    return;
  }
  for (const auto& [rank, layers] : predicted)
    if (layers.size() != shown) {
      r.notes.push_back(cat("the measured traces show ", shown, " layers per rank and step, the plan puts ",
                            layers.size(), " on rank ", rank, ": no per-layer comparison"));
      return;
    }
  if (predicted.empty()) return;
  const double per = 1.0 / (static_cast<double>(measured.size()) * static_cast<double>(nsteps - first_step));
  const double nranks = static_cast<double>(predicted.size());
  std::vector<ForeignLayerComparison> out(shown);
  for (const auto& [rank, layers] : predicted) {
    std::size_t k = 0;
    for (const auto& [layer, s] : layers) {
      out[k].predicted_s += s / nranks;
      if (rank == predicted.begin()->first) out[k].predicted_layer = layer;
      ++k;
    }
  }
  for (const ForeignTrace& t : measured)
    for (std::size_t s = first_step; s < nsteps; ++s) {
      std::size_t k = 0;
      for (const auto& [layer, v] : t.steps[s].layer_s) {
        out[k].measured_s += v * per;
        if (&t == &measured.front() && s == first_step) out[k].measured_layer = layer;
        ++k;
      }
    }
  for (auto& l : out) l.error_pct = pct(l.predicted_s, l.measured_s);
  r.layers = std::move(out);
}

// Each further trace's clock against the first's (ForeignCompareReport::clocks), and with them
// aligned how far apart the ranks start each compared step.
void align_clocks(const std::vector<ForeignTrace>& measured, std::size_t first_step, std::size_t nsteps,
                  ForeignCompareReport& r) {
  if (measured.size() < 2) return;
  // The k-th end of each name in the first trace.
  const ForeignTrace& first = measured.front();
  std::map<std::string, std::vector<double>> ref;
  for (const auto& [name, end] : first.collectives) ref[first.collective_names[name]].push_back(end);
  std::vector<double> offsets{0.0};
  for (std::size_t i = 1; i < measured.size(); ++i) {
    const ForeignTrace& t = measured[i];
    std::vector<const std::vector<double>*> ends(t.collective_names.size(), nullptr);
    for (std::size_t n = 0; n < ends.size(); ++n)
      if (auto it = ref.find(t.collective_names[n]); it != ref.end()) ends[n] = &it->second;
    std::vector<std::size_t> seen(t.collective_names.size(), 0);
    std::vector<double> d;
    for (const auto& [name, end] : t.collectives) {
      const std::size_t k = seen[name]++;
      if (ends[name] && k < ends[name]->size()) d.push_back((*ends[name])[k] - end);
    }
    ForeignCompareReport::Clock c{measured[i].file, 0, 0, static_cast<int>(d.size())};
    if (!d.empty()) {
      const MedianSpread m = median_and_spread(std::move(d));
      c.offset_s = m.median;
      c.spread_s = m.spread;
    }
    offsets.push_back(c.offset_s);
    r.clocks.push_back(c);
  }
  const bool all =
      std::all_of(r.clocks.begin(), r.clocks.end(), [](const auto& c) { return c.collectives > 0; });
  for (const auto& c : r.clocks)
    r.notes.push_back(c.collectives > 0
                          ? cat(c.file, "'s clock ", c.offset_s >= 0 ? "+" : "", c.offset_s * 1e3,
                                " ms against the first trace's (the median over ", c.collectives,
                                " collectives both ran; they end within ", c.spread_s * 1e3, " ms of it)")
                          : cat(c.file, " ran no collective the first trace ran: its clock is not aligned"));
  if (!all || nsteps <= first_step) return;
  for (std::size_t s = first_step; s < nsteps; ++s) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (std::size_t i = 0; i < measured.size(); ++i) {
      const double start = measured[i].steps[s].start_s + offsets[i];
      lo = std::min(lo, start);
      hi = std::max(hi, start);
    }
    r.step_start_skew_s += (hi - lo) / static_cast<double>(nsteps - first_step);
  }
}

}  // namespace

Result<ForeignCompareReport> compare_foreign(const Trace& predicted,
                                             const std::vector<ForeignTrace>& measured, int warmup) {
  if (measured.empty()) return Error("no measured traces");
  ForeignCompareReport r;
  r.predicted_file = predicted.file;
  r.ranks_predicted = plan_ranks(predicted.metadata);
  r.predicted_step_s = predicted.step_s;
  // The prediction per rank.
  std::map<int, std::map<std::string, double>> pk;
  std::map<int, std::vector<std::pair<double, double>>> pcomm, pcompute;
  std::map<int, std::map<int, double>> player;  // rank -> layer -> forward time
  for (const TraceOp& op : predicted.ops) {
    const std::string k = predicted_kind(op);
    if (const int layer = predicted_forward_layer(op.id); layer >= 0) player[op.rank][layer] += op.dur_s;
    pk[op.rank][k] += op.dur_s;
    (k == "communication" ? pcomm : pcompute)[op.rank].push_back({op.start_s, op.start_s + op.dur_s});
  }
  const double nranks = static_cast<double>(pk.size());
  std::map<std::string, double> pred;
  for (auto& [rank, kinds] : pk) {
    for (const auto& [k, s] : kinds) pred[k] += s / nranks;
    pred["idle"] += std::max(0.0, predicted.step_s - union_length(pcompute[rank])) / nranks;
    pred["exposed_communication"] += uncovered(pcomm[rank], pcompute[rank]) / nranks;
  }
  // The measured steps after warm-up, per rank.
  std::size_t nsteps = measured.front().steps.size();
  for (const ForeignTrace& t : measured) nsteps = std::min(nsteps, t.steps.size());
  for (const ForeignTrace& t : measured)
    if (t.steps.size() != nsteps)
      r.notes.push_back(
          cat(t.file, " has ", t.steps.size(), " steps, others fewer: the first ", nsteps, " compared"));
  r.warmup_steps = warmup >= 0 ? warmup : nsteps >= 3 ? 1 : 0;
  if (static_cast<std::size_t>(r.warmup_steps) >= nsteps)
    return Error(cat(nsteps, nsteps == 1 ? " step" : " steps", " measured and ", r.warmup_steps,
                     " of warm-up: none left to compare"));
  r.steps_compared = static_cast<int>(nsteps) - r.warmup_steps;
  std::map<std::string, double> meas;
  std::map<std::string, double> unmapped;
  std::vector<double> step_times;
  const double per = 1.0 / (static_cast<double>(measured.size()) * r.steps_compared);
  double host_busy = 0;
  for (std::size_t s = static_cast<std::size_t>(r.warmup_steps); s < nsteps; ++s) {
    double step = 0;
    for (const ForeignTrace& t : measured) {
      const ForeignStep& st = t.steps[s];
      step += st.dur_s / static_cast<double>(measured.size());
      for (const auto& [k, v] : st.kind_s) meas[k] += v * per;
      meas["idle"] += st.idle_s * per;
      meas["exposed_communication"] += st.exposed_communication_s * per;
      r.host_kernels_per_step += st.host_kernels * per;
      host_busy += st.host_busy_s * per;
    }
    step_times.push_back(step);
  }
  for (const ForeignTrace& t : measured)
    for (const auto& [name, s] : t.unmapped)
      unmapped[name] += s / (static_cast<double>(measured.size()) * static_cast<double>(nsteps));
  r.measured_step_s = median(step_times);
  for (double t : step_times) r.measured_step_mean_s += t / static_cast<double>(step_times.size());
  r.step_time_error_pct = pct(r.predicted_step_s, r.measured_step_s);
  if (r.host_kernels_per_step > 0) r.host_op_s = host_busy / r.host_kernels_per_step;
  std::vector<std::string> order(std::begin(kForeignKinds), std::end(kForeignKinds));
  order.push_back("idle");
  order.push_back("exposed_communication");
  for (const std::string& k : order) {
    if (!pred.count(k) && !meas.count(k)) continue;
    r.kinds.push_back({k, pred[k], meas[k], pct(pred[k], meas[k])});
  }
  r.unmapped.assign(unmapped.begin(), unmapped.end());
  std::sort(r.unmapped.begin(), r.unmapped.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  if (r.unmapped.size() > 10) r.unmapped.resize(10);
  compare_layers(player, measured, static_cast<std::size_t>(r.warmup_steps), nsteps, r);
  align_clocks(measured, static_cast<std::size_t>(r.warmup_steps), nsteps, r);
  for (const ForeignTrace& t : measured) r.measured_files.push_back(t.file);
  if (r.ranks_predicted > 0 && static_cast<int>(measured.size()) != r.ranks_predicted)
    r.notes.push_back(cat("the plan has ", r.ranks_predicted, " ranks and ", measured.size(),
                          measured.size() == 1 ? " measured trace" : " measured traces",
                          " given: the measured means are over those given"));
  const bool pred_comm = pred["communication"] > 0, meas_comm = meas["communication"] > 0;
  if (pred_comm != meas_comm)
    r.notes.push_back(
        pred_comm ? "the plan communicates but the measured trace has no communication: a trace of "
                    "another plan (or of one rank of a single-process run)?"
                  : "the measured trace communicates but the plan does not: a trace of another plan?");
  return r;
}

nlohmann::json foreign_report_to_json(const ForeignCompareReport& r) {
  nlohmann::json kinds = nlohmann::json::array();
  for (const auto& k : r.kinds)
    kinds.push_back({{"kind", k.kind},
                     {"predicted_s", k.predicted_s},
                     {"measured_s", k.measured_s},
                     {"error_pct", k.error_pct}});
  nlohmann::json unmapped = nlohmann::json::array();
  for (const auto& [name, s] : r.unmapped) unmapped.push_back({{"name", name}, {"measured_s", s}});
  nlohmann::json clocks = nlohmann::json::array();
  for (const auto& c : r.clocks)
    clocks.push_back({{"file", c.file},
                      {"offset_s", c.offset_s},
                      {"spread_s", c.spread_s},
                      {"collectives", c.collectives}});
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& l : r.layers)
    layers.push_back({{"measured_layer", l.measured_layer},
                      {"predicted_layer", l.predicted_layer},
                      {"predicted_forward_s", l.predicted_s},
                      {"measured_forward_s", l.measured_s},
                      {"error_pct", l.error_pct}});
  return {{"predicted_file", r.predicted_file},
          {"measured_files", r.measured_files},
          {"ranks_predicted", r.ranks_predicted},
          {"steps_compared", r.steps_compared},
          {"warmup_steps", r.warmup_steps},
          {"predicted_step_s", r.predicted_step_s},
          {"measured_step_s", r.measured_step_s},
          {"measured_step_mean_s", r.measured_step_mean_s},
          {"step_time_error_pct", r.step_time_error_pct},
          {"host", {{"kernels_per_step", r.host_kernels_per_step}, {"per_kernel_s", r.host_op_s}}},
          {"clocks", clocks},
          {"step_start_skew_s", r.step_start_skew_s},
          {"kinds", kinds},
          {"layers", layers},
          {"unmapped", unmapped},
          {"notes", r.notes}};
}

}  // namespace foresight

namespace foresight {

namespace {

// Every rate a GEMM is priced with divided by `r`, every fixed time times `r`.
void scale_gemm(DeviceSpec& d, double r) {
  d.gemm_efficiency /= r;
  d.gemm_fp8_efficiency /= r;
  auto level = [r](CacheLevel& c) {
    c.gemm_efficiency /= r;
    c.gemm_weight_fwd_bandwidth /= r;
    c.gemm_weight_bwd_bandwidth /= r;
  };
  for (CacheLevel& c : d.caches) level(c);
  level(d.shared_memory.alone);
  d.gemm_weight_fwd_bandwidth /= r;
  d.gemm_weight_bwd_bandwidth /= r;
  d.gemm_setup_s *= r;
}

void scale_attention(DeviceSpec& d, double r) {
  d.attention_efficiency /= r;
  d.attention_flash2_efficiency /= r;
  d.attention_setup_s *= r;
  d.attention_score_s *= r;
  d.attention_head_s *= r;
}

void scale_streaming(DeviceSpec& d, double r) {
  d.memory_bandwidth /= r;
  d.activation_element_s *= r;
  auto level = [r](CacheLevel& c) {
    c.memory_bandwidth /= r;
    c.activation_element_s *= r;
  };
  for (CacheLevel& c : d.caches) level(c);
  level(d.shared_memory.alone);
}

// The optimizer runs at optimizer_efficiency x the streaming rate, or a level's own rate.
void scale_optimizer(DeviceSpec& d, double r) {
  d.optimizer_efficiency /= r;
  for (CacheLevel& c : d.caches) c.optimizer_bandwidth /= r;
  d.shared_memory.alone.optimizer_bandwidth /= r;
}

// Efficiencies above 1 (a device faster than its profile's peak) moved into the peak: every
// dtype's peak times the largest, every efficiency of a peak divided by it.
double renormalise_peak(DeviceSpec& d) {
  double m = std::max({d.gemm_efficiency, d.gemm_fp8_efficiency, d.attention_efficiency,
                       d.attention_flash2_efficiency, d.shared_memory.alone.gemm_efficiency});
  for (const CacheLevel& c : d.caches) m = std::max(m, c.gemm_efficiency);
  if (m <= 1.0) return 1.0;
  for (double& p : d.peak_flops) p *= m;
  d.gemm_efficiency /= m;
  d.gemm_fp8_efficiency /= m;
  d.attention_efficiency /= m;
  d.attention_flash2_efficiency /= m;
  d.shared_memory.alone.gemm_efficiency /= m;
  for (CacheLevel& c : d.caches) c.gemm_efficiency /= m;
  return m;
}

void scale_fabric(LinkSpec& f, double r) {
  f.bandwidth /= r;
  f.latency_s *= r;
  f.small_message_latency_s *= r;
  f.cold_bandwidth /= r;
  for (CollectiveOp op : kOwnRateOps) {
    CollectiveRates& c = *f.own_rates(op);
    c.bandwidth /= r;
    c.latency_s *= r;
    c.small_message_latency_s *= r;
    c.cold_bandwidth /= r;
  }
  for (CollectiveOp op : kMeasuredOps)
    for (MeasuredTimes::Point& p : *f.measured.of(op)) p.seconds *= r;
}

}  // namespace

Result<TraceCalibration> calibrate_from_trace(const ClusterSpec& base, const ForeignCompareReport& report) {
  TraceCalibration out;
  out.cluster = base;
  out.sources = nlohmann::json::object();
  DeviceSpec& d = out.cluster.node.devices.front().device;
  const std::string from = cat("fitted: ", report.measured_files.size(), " measured trace(s) (",
                               report.measured_files.empty() ? std::string() : report.measured_files.front(),
                               report.measured_files.size() > 1 ? ", ..." : "", "), ", report.steps_compared,
                               " steps after ", report.warmup_steps, " of warm-up, against ",
                               report.predicted_file, " predicted on ", base.name, ": ");
  for (const ForeignKindComparison& k : report.kinds) {
    if (k.predicted_s <= 0 || k.measured_s <= 0) continue;
    const double r = k.measured_s / k.predicted_s;
    const std::string line = cat(k.kind, ": time x", r, " (predicted ", k.predicted_s * 1e3, " ms, measured ",
                                 k.measured_s * 1e3, " ms per rank and step)");
    const char* key = nullptr;  // the profile's "sources" entry
    if (k.kind == "gemm") {
      scale_gemm(d, r);
      key = "efficiency.gemm";
    } else if (k.kind == "attention") {
      scale_attention(d, r);
      key = "efficiency.attention";
    } else if (k.kind == "elementwise") {
      scale_streaming(d, r);
      d.optimizer_efficiency *= r;  // the optimizer's own time stays until its own kind scales it
      key = "memory_bandwidth";
    } else if (k.kind == "optimizer") {
      scale_optimizer(d, r);
      key = "efficiency.optimizer";
    } else if (k.kind == "communication") {
      scale_fabric(out.cluster.node.fabric, r);
      key = "node.fabric";
    } else {
      continue;  // idle, exposed communication, memcpy: not fitted (fitted_kind)
    }
    out.sources[key] = from + line;
    out.source_lines[key] = line;
    out.fitted.push_back(line);
  }
  if (report.host_op_s > 0) {
    const std::string line = cat("host_op: ", d.host_op_s * 1e6, " us -> ", report.host_op_s * 1e6, " us (",
                                 report.host_kernels_per_step,
                                 " kernel launches per rank and step: the launching threads' busy time "
                                 "less the calls that wait for the device, per launch)");
    d.host_op_s = report.host_op_s;
    out.sources["efficiency.host_op"] = from + line;
    out.fitted.push_back(line);
  }
  if (const double m = renormalise_peak(d); m > 1.0)
    out.fitted.push_back(
        cat("peak: x", m, " (an efficiency passed 1: the device ran faster than its profile's peak)"));
  // A profile keeps the optimizer within kOptimizerEfficiencyMin-Max of the streaming rate: where
  // the streaming kernels were fitted far slower than the optimizer (PyTorch's eager elementwise
  // ops pay a dispatch per small op), the optimizer's efficiency stops at the bound, said so.
  const double opt = std::clamp(d.optimizer_efficiency, DeviceSpec::kOptimizerEfficiencyMin,
                                DeviceSpec::kOptimizerEfficiencyMax);
  if (opt != d.optimizer_efficiency) {
    out.fitted.push_back(cat("optimizer efficiency ", d.optimizer_efficiency, " held at ", opt,
                             " (a profile's bound): its time is predicted x", d.optimizer_efficiency / opt,
                             " of the measured"));
    d.optimizer_efficiency = opt;
  }
  if (out.fitted.empty()) return Error("no kind was both predicted and measured: nothing to fit");
  if (std::min({d.gemm_efficiency, d.attention_efficiency}) < 0.01)
    return Error(cat("a fitted efficiency fell below 0.01 (GEMM ", d.gemm_efficiency, ", attention ",
                     d.attention_efficiency, "): the traces and the prediction are of different work"));
  return out;
}

namespace {
// The kinds calibrate_from_trace fits (its branches).
bool fitted_kind(const std::string& kind) {
  return kind == "gemm" || kind == "attention" || kind == "elementwise" || kind == "optimizer" ||
         kind == "communication";
}
}  // namespace

TraceResidual trace_residual(const ForeignCompareReport& report, int passes) {
  TraceResidual r;
  r.passes = passes;
  for (const ForeignKindComparison& k : report.kinds) {
    if (!fitted_kind(k.kind) || k.predicted_s <= 0 || k.measured_s <= 0) continue;
    r.kinds.push_back(k);
    r.mean_abs_pct += std::abs(k.error_pct);
    r.max_abs_pct = std::max(r.max_abs_pct, std::abs(k.error_pct));
  }
  if (!r.kinds.empty()) r.mean_abs_pct /= static_cast<double>(r.kinds.size());
  return r;
}

Result<TraceCalibration> calibrate_from_trace_passes(const ClusterSpec& base,
                                                     const ForeignCompareReport& report,
                                                     const TraceRepredict& repredict, int max_passes,
                                                     double tolerance_pct) {
  FS_ASSIGN_OR_RETURN(TraceCalibration current, calibrate_from_trace(base, report));
  TraceCalibration best = current;
  double best_mean = std::numeric_limits<double>::infinity();
  for (int pass = 1; pass <= max_passes; ++pass) {
    FS_ASSIGN_OR_RETURN(ForeignCompareReport again, repredict(current.cluster));
    const TraceResidual residual = trace_residual(again, pass);
    if (!(residual.mean_abs_pct < best_mean)) break;  // no better than the pass before: keep that one
    const bool stalled = best_mean - residual.mean_abs_pct < 0.05;  // percentage points
    current.residuals.push_back(residual);
    best = current;
    best_mean = residual.mean_abs_pct;
    if (residual.max_abs_pct <= tolerance_pct || stalled || pass == max_passes) break;
    auto next = calibrate_from_trace(current.cluster, again);
    if (!next) break;  // nothing left to fit, or a fit that is not work: keep what re-predicted best
    // The lines of the kinds still off (the others scale by about 1), and a bound that holds.
    for (const std::string& line : next->fitted) {
      const bool off = std::any_of(residual.kinds.begin(), residual.kinds.end(), [&](const auto& k) {
        return std::abs(k.error_pct) > tolerance_pct && line.rfind(k.kind + ": ", 0) == 0;
      });
      if (off || line.find("held at") != std::string::npos || line.rfind("peak:", 0) == 0)
        current.fitted.push_back(cat("pass ", pass + 1, ": ", line));
    }
    for (const auto& [key, line] : next->source_lines)
      current.sources[key] = cat(current.sources.value(key, std::string()), "; then pass ", pass + 1,
                                 ", against the plan re-predicted on the profile: ", line);
    current.cluster = next->cluster;
    current.passes = pass + 1;
  }
  return best;
}

}  // namespace foresight
