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

Status write_chrome_trace(const std::string& path, const Workload& w, const SimResult& r,
                          const std::string& kind, const nlohmann::json& extra_metadata,
                          const StepAnnotations& annotations) {
  // Written whole or not at all: a full disk leaves no truncated trace under `path`.
  FS_ASSIGN_OR_RETURN(OutputFile out, OutputFile::open(path));
  std::FILE* f = out.stream();
  const CriticalPath& crit = annotations.critical;
  std::vector<bool> on_path(r.ops.size(), false);
  for (std::size_t i : crit.ops) on_path[i] = true;
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
  std::fprintf(f, "{\"displayTimeUnit\":\"ms\",\"metadata\":%s,\"traceEvents\":[\n", meta.dump().c_str());
  bool first = true;
  auto sep = [&] {
    if (!first) std::fputs(",\n", f);
    first = false;
  };
  const int g = std::max(1, w.cluster.node.accelerator_slots());
  for (int rank : r.simulated_ranks) {
    sep();
    std::fprintf(f,
                 "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":\"rank %d (node %d, "
                 "stage %d)\"}}",
                 rank, rank, (rank < static_cast<int>(w.devices.size()) ? w.devices[rank] : rank) / g,
                 w.stage_of(rank));
    for (int s = 0; s < kStreamCount; ++s) {
      sep();
      std::fprintf(f,
                   "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
                   rank, s, std::string(to_string(static_cast<StreamId>(s))).c_str());
    }
  }
  for (std::size_t i = 0; i < r.ops.size(); ++i) {
    const OpRecord& rec = r.ops[i];
    const Op& op = w.stages[rec.stage].graph()[rec.op];
    sep();
    const std::string id = w.op_id(rec.rank, rec.stage, rec.op);
    const char* cat = op.kind == OpKind::kCompute      ? "compute"
                      : op.kind == OpKind::kCollective ? "collective"
                      : op.kind == OpKind::kCopy       ? "copy"
                                                       : "p2p";
    // "op": its vertex in the rank's program; "after": the vertices it waited for on that rank
    // (the graph's edges; a receive's sender is on another rank and not among them).
    std::string after;
    for (auto e : boost::make_iterator_range(boost::in_edges(rec.op, w.stages[rec.stage].graph())))
      after.append(after.empty() ? "" : ",")
          .append(std::to_string(boost::source(e, w.stages[rec.stage].graph())));
    std::fprintf(
        f,
        "{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
        "\"args\":{\"id\":\"%s\",\"bytes\":%.0f,\"flops\":%.0f%s,\"op\":%d,\"after\":[%s]}}",
        op.name, cat, rec.rank, static_cast<int>(op.stream), rec.start_s * 1e6,
        (rec.end_s - rec.start_s) * 1e6, id.c_str(), op.bytes, op.flops, on_path[i] ? ",\"critical\":1" : "",
        rec.op, after.c_str());
  }
  // Memory in use over the step, a counter track per rank (memory_timeline.h).
  for (const MemoryTrack& t : annotations.memory)
    for (const auto& [at, bytes] : t.samples) {
      sep();
      std::fprintf(f, "{\"ph\":\"C\",\"name\":\"memory\",\"pid\":%d,\"ts\":%.3f,\"args\":{\"GiB\":%.4f}}",
                   t.rank, at * 1e6, bytes / (1024.0 * 1024.0 * 1024.0));
    }
  // The critical path as flow arrows (Perfetto draws them): from each op on it to the next, each
  // end bound to the op's own slice.
  for (std::size_t k = 0; k + 1 < crit.ops.size(); ++k) {
    const OpRecord& a = r.ops[crit.ops[k]];
    const OpRecord& b = r.ops[crit.ops[k + 1]];
    const int sa = static_cast<int>(w.stages[a.stage].graph()[a.op].stream);
    const int sb = static_cast<int>(w.stages[b.stage].graph()[b.op].stream);
    sep();
    std::fprintf(f,
                 "{\"ph\":\"s\",\"name\":\"critical path\",\"cat\":\"critical_path\",\"id\":%zu,\"pid\":%d,"
                 "\"tid\":%d,\"ts\":%.3f},\n{\"ph\":\"f\",\"bp\":\"e\",\"name\":\"critical path\",\"cat\":"
                 "\"critical_path\",\"id\":%zu,\"pid\":%d,\"tid\":%d,\"ts\":%.3f}",
                 k, a.rank, sa, a.start_s * 1e6, k, b.rank, sb, b.start_s * 1e6);
  }
  std::fputs("\n]}\n", f);
  return out.commit();
}

}  // namespace foresight
