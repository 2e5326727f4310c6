// Streams a simulated timeline to Chrome Trace Event JSON.
#include "sim/des/trace.h"

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
  // Written whole or not at all: a full disk leaves no truncated trace under `path`.
  FS_ASSIGN_OR_RETURN(OutputFile out, OutputFile::open(path));
  std::FILE* f = out.stream();
  nlohmann::json meta = {{"kind", kind},
                         {"model", w.model.name},
                         {"cluster", w.cluster.name},
                         {"device", w.cluster.node.accelerator().name},
                         {"plan", plan_to_json(w.plan)},
                         {"step_time_s", r.prediction.step_time_s},
                         {"symmetric", !r.full}};
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
  for (const OpRecord& rec : r.ops) {
    const Op& op = w.stages[rec.stage].graph()[rec.op];
    sep();
    const std::string id = w.op_id(rec.rank, rec.stage, rec.op);
    const char* cat = op.kind == OpKind::kCompute      ? "compute"
                      : op.kind == OpKind::kCollective ? "collective"
                      : op.kind == OpKind::kCopy       ? "copy"
                                                       : "p2p";
    std::fprintf(
        f,
        "{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
        "\"args\":{\"id\":\"%s\",\"bytes\":%.0f,\"flops\":%.0f}}",
        op.name, cat, rec.rank, static_cast<int>(op.stream), rec.start_s * 1e6,
        (rec.end_s - rec.start_s) * 1e6, id.c_str(), op.bytes, op.flops);
  }
  std::fputs("\n]}\n", f);
  return out.commit();
}

}  // namespace foresight
