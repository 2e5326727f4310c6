// In-process simulation to Chrome traces.
#include "gui/models/traces.h"

#include <nlohmann/json.hpp>

#include "sim/des/simulator.h"
#include "sim/des/trace.h"
#include "sim/workload/workload.h"

namespace foresight::gui {

namespace {

Result<SimulatedTrace> simulate_resolved(const ResolvedPlan& r, const std::string& path, bool full,
                                         const std::string& kind, const nlohmann::json& metadata) {
  FS_ASSIGN_OR_RETURN(Workload w, lower(r.model, r.cluster, r.plan));
  SimOptions so;
  so.full = full;
  so.record = true;
  Simulator sim(w, so);
  FS_ASSIGN_OR_RETURN(SimResult result, sim.run());
  if (!result.prediction.fits())
    return Error("plan: does not fit in memory: " + describe_memory(result.prediction.memory));
  FS_RETURN_IF_ERROR(write_chrome_trace(path, w, result, kind, metadata));
  SimulatedTrace t;
  t.path = path;
  t.ops = result.ops.size();
  t.ranks = result.simulated_ranks.size();
  t.step_s = result.prediction.step_time_s;
  t.cluster = r.cluster;
  t.busiest_links = std::move(result.busiest_links);
  return t;
}

}  // namespace

Result<SimulatedTrace> simulate_to_trace(const PlanInputs& in, const std::string& path, bool full) {
  FS_ASSIGN_OR_RETURN(ResolvedPlan r, resolve_plan(in));
  FS_ASSIGN_OR_RETURN(SimulatedTrace t,
                      simulate_resolved(r, path, full, "predicted", nlohmann::json::object()));
  t.inputs = in;
  return t;
}

Result<ExampleTraces> write_example_traces(const PlanInputs& in, const std::string& dir) {
  FS_ASSIGN_OR_RETURN(ResolvedPlan r, resolve_plan(in));
  ExampleTraces out{dir + "/predicted.json", dir + "/measured.json"};
  FS_RETURN_IF_ERROR(simulate_resolved(r, out.predicted, false, "predicted", nlohmann::json::object()));
  // The stand-in "measurement": a device that sustains less of its peak than the profile says and
  // a network a little below its calibrated efficiency -- the kind of gap calibration closes.
  // Illustrative factors, not measurements.
  constexpr double kGemm = 0.85, kAttention = 0.80, kMemory = 0.90, kLaunch = 1.5, kLinks = 0.85;
  ResolvedPlan slow = r;
  for (DeviceGroup& g : slow.cluster.node.devices) {
    g.device.gemm_efficiency *= kGemm;
    g.device.attention_efficiency *= kAttention;
    g.device.memory_efficiency *= kMemory;
    g.device.kernel_overhead_s *= kLaunch;
  }
  slow.cluster.node.fabric.efficiency *= kLinks;
  slow.cluster.node.nic.efficiency *= kLinks;
  const nlohmann::json note = {
      {"synthetic",
       "not a measurement: the plan simulated with GEMM efficiency x0.85, attention x0.80, "
       "memory x0.90, kernel launch x1.5, fabric and NIC efficiency x0.85 (foresight-gui example)"}};
  FS_RETURN_IF_ERROR(simulate_resolved(slow, out.measured, false, "measured", note));
  return out;
}

}  // namespace foresight::gui
