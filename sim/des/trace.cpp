// Streams a simulated timeline to Chrome Trace Event JSON.
#include "sim/des/trace.h"

#include <boost/range/iterator_range.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "sim/analytic/analytic_model.h"
#include "sim/core/output_file.h"

namespace foresight {

Status write_chrome_trace(const std::string& path, const Workload& w, const SimResult& r,
                          const std::string& kind) {
  return write_chrome_trace(path, w, r, kind, nlohmann::json::object());
}

Status write_chrome_trace(const std::string& path, const Workload& w, const SimResult& r,
                          const std::string& kind, const nlohmann::json& extra_metadata) {
  // A measured run's trace has no memory track: the track's bytes are the model's, and a measured
  // trace shows what was measured.
  StepAnnotations a{critical_path(w, r), {}};
  if (kind == "predicted") a.memory = memory_tracks(w, r);
  return write_chrome_trace(path, w, r, kind, extra_metadata, a);
}

StepAnnotations annotate_step(const Workload& w, const SimResult& r) {
  return {critical_path(w, r), memory_tracks(w, r)};
}

namespace {

// The trace's metadata: what ran, the step, the critical path's sums, and the caller's extras.
nlohmann::json trace_metadata(const Workload& w, const SimResult& r, const std::string& kind,
                              const nlohmann::json& extra_metadata, const CriticalPath& crit) {
  nlohmann::json meta = {{"kind", kind},
                         {"model", w.model.name},
                         {"cluster", w.cluster.name},
                         {"device", w.cluster.node.accelerator().name},
                         {"plan", plan_to_json(w.plan)},
                         {"step_time_s", r.prediction.step_time_s},
                         {"symmetric", !r.full}};
  if (!crit.ops.empty())
    meta["critical_path"] = {{"ops", crit.ops.size()},
                             {"compute_s", crit.compute_s},
                             {"communication_s", crit.communication_s},
                             {"waiting_s", crit.waiting_s},
                             {"ranks", crit.ranks}};
  for (const auto& [key, value] : extra_metadata.items()) meta[key] = value;
  return meta;
}

// Writes the events one after another, comma-separated.
class EventWriter {
 public:
  explicit EventWriter(std::FILE* f) : f_(f) {}
  std::FILE* next() {
    if (!first_) std::fputs(",\n", f_);
    first_ = false;
    return f_;
  }

 private:
  std::FILE* f_;
  bool first_ = true;
};

// Each simulated rank named as a process, its streams as threads.
void write_names(EventWriter& out, const Workload& w, const SimResult& r) {
  const int g = std::max(1, w.cluster.node.accelerator_slots());
  for (int rank : r.simulated_ranks) {
    std::fprintf(out.next(),
                 "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":\"rank %d (node %d, "
                 "stage %d)\"}}",
                 rank, rank, (rank < static_cast<int>(w.devices.size()) ? w.devices[rank] : rank) / g,
                 w.stage_of(rank));
    for (int s = 0; s < kStreamCount; ++s)
      std::fprintf(out.next(),
                   "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
                   rank, s, std::string(to_string(static_cast<StreamId>(s))).c_str());
  }
}

// One complete event per op: its id, bytes and FLOPs, whether the critical path runs through it,
// its vertex in the rank's program ("op") and the vertices it waited for there ("after": the
// graph's edges; a receive's sender is on another rank and not among them).
void write_ops(EventWriter& out, const Workload& w, const SimResult& r, const std::vector<bool>& on_path) {
  std::string after;  // reused: a trace has millions of ops
  for (std::size_t i = 0; i < r.ops.size(); ++i) {
    const OpRecord& rec = r.ops[i];
    const OpGraph& g = w.stages[rec.stage].graph();
    const Op& op = g[rec.op];
    const std::string id = w.op_id(rec.rank, rec.stage, rec.op);
    const char* cat = op.kind == OpKind::kCompute      ? "compute"
                      : op.kind == OpKind::kCollective ? "collective"
                      : op.kind == OpKind::kCopy       ? "copy"
                                                       : "p2p";
    after.clear();
    for (auto e : boost::make_iterator_range(boost::in_edges(rec.op, g)))
      after.append(after.empty() ? "" : ",").append(std::to_string(boost::source(e, g)));
    std::fprintf(
        out.next(),
        "{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
        "\"args\":{\"id\":\"%s\",\"bytes\":%.0f,\"flops\":%.0f%s,\"op\":%d,\"after\":[%s]}}",
        op.name, cat, rec.rank, static_cast<int>(op.stream), rec.start_s * 1e6,
        (rec.end_s - rec.start_s) * 1e6, id.c_str(), op.bytes, op.flops, on_path[i] ? ",\"critical\":1" : "",
        rec.op, after.c_str());
  }
}

// The critical path as flow arrows (Perfetto draws them): from each op on it to the next, each
// end bound to the op's own slice.
void write_critical_flows(EventWriter& out, const Workload& w, const SimResult& r, const CriticalPath& crit) {
  for (std::size_t k = 0; k + 1 < crit.ops.size(); ++k) {
    const OpRecord& a = r.ops[crit.ops[k]];
    const OpRecord& b = r.ops[crit.ops[k + 1]];
    const int sa = static_cast<int>(w.stages[a.stage].graph()[a.op].stream);
    const int sb = static_cast<int>(w.stages[b.stage].graph()[b.op].stream);
    std::fprintf(out.next(),
                 "{\"ph\":\"s\",\"name\":\"critical path\",\"cat\":\"critical_path\",\"id\":%zu,\"pid\":%d,"
                 "\"tid\":%d,\"ts\":%.3f},\n{\"ph\":\"f\",\"bp\":\"e\",\"name\":\"critical path\",\"cat\":"
                 "\"critical_path\",\"id\":%zu,\"pid\":%d,\"tid\":%d,\"ts\":%.3f}",
                 k, a.rank, sa, a.start_s * 1e6, k, b.rank, sb, b.start_s * 1e6);
  }
}

}  // namespace

Status write_chrome_trace(const std::string& path, const Workload& w, const SimResult& r,
                          const std::string& kind, const nlohmann::json& extra_metadata,
                          const StepAnnotations& annotations) {
  // Written whole or not at all: a full disk leaves no truncated trace under `path`.
  FS_ASSIGN_OR_RETURN(OutputFile out, OutputFile::open(path));
  std::FILE* f = out.stream();
  const CriticalPath& crit = annotations.critical;
  std::vector<bool> on_path(r.ops.size(), false);
  for (std::size_t i : crit.ops) on_path[i] = true;
  std::fprintf(f, "{\"displayTimeUnit\":\"ms\",\"metadata\":%s,\"traceEvents\":[\n",
               trace_metadata(w, r, kind, extra_metadata, crit).dump().c_str());
  EventWriter events(f);
  write_names(events, w, r);
  write_ops(events, w, r, on_path);
  // Memory in use over the step, a counter track per rank (memory_timeline.h).
  for (const MemoryTrack& t : annotations.memory)
    for (const auto& [at, bytes] : t.samples)
      std::fprintf(events.next(),
                   "{\"ph\":\"C\",\"name\":\"memory\",\"pid\":%d,\"ts\":%.3f,\"args\":{\"GiB\":%.4f}}",
                   t.rank, at * 1e6, bytes / (1024.0 * 1024.0 * 1024.0));
  write_critical_flows(events, w, r, crit);
  std::fputs("\n]}\n", f);
  return out.commit();
}

}  // namespace foresight
