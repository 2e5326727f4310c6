// Chrome Trace Event JSON (opens in Perfetto and chrome://tracing): one process per simulated rank,
// one thread per stream, one complete event per op with its id, bytes and FLOPs.
//
//   Status s = write_chrome_trace("step.json", workload, result, "predicted");
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "sim/core/status.h"
#include "sim/des/critical_path.h"
#include "sim/des/memory_timeline.h"
#include "sim/des/simulator.h"
#include "sim/workload/workload.h"

namespace foresight {

// `kind` is "predicted" or "measured"; it goes into the trace's metadata with the plan and the
// hardware profile.
Status write_chrome_trace(const std::string& path, const Workload& w, const SimResult& r,
                          const std::string& kind);
// The same with more metadata (the runtime adds backend, host and measured figures).
Status write_chrome_trace(const std::string& path, const Workload& w, const SimResult& r,
                          const std::string& kind, const nlohmann::json& extra_metadata);

// What a trace adds to the op records: the step's critical path and the memory tracks, computed
// once where a caller also prints them. The overloads above add the memory tracks to predicted
// traces only (their bytes are the model's).
struct StepAnnotations {
  CriticalPath critical;
  std::vector<MemoryTrack> memory;
};
StepAnnotations annotate_step(const Workload& w, const SimResult& r);
Status write_chrome_trace(const std::string& path, const Workload& w, const SimResult& r,
                          const std::string& kind, const nlohmann::json& extra_metadata,
                          const StepAnnotations& annotations);

}  // namespace foresight
