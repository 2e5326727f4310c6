// NCCL validation cases: build the reference system, run the collective on the flow model.
#include "sim/validate/collective_case.h"

#include <nlohmann/json.hpp>

#include "sim/des/network_run.h"
#include "sim/spec/json_reader.h"

namespace foresight {

using nlohmann::json;

bool is_collectives_file(const json& doc) {
  return doc.is_object() && doc.value("schema", "") == "foresight-validation-collectives/1";
}

Result<std::vector<CollectiveCase>> collective_cases_from_json(const json& doc, const std::string& file) {
  JsonReader top(doc, file);
  top.reject_unknown_keys({"about", "cases"});
  std::vector<CollectiveCase> out;
  for (JsonReader r : top.array("cases")) {
    if (!top.ok()) break;
    r.reject_unknown_keys({"id", "kind", "gpu", "gpus", "gpus_per_node", "nics_per_node", "nic_gbps",
                           "fabric", "collective", "algorithm", "bytes", "measured"});
    CollectiveCase c;
    c.file = file;
    c.id = r.required_string("id");
    c.kind = r.string("kind", "");
    c.source = r.string("source", "");
    const std::string gpu = r.required_string("gpu");
    c.gpus = static_cast<int>(r.required_integer("gpus", 2, 1 << 24));
    const auto per_node = r.optional_integer("gpus_per_node", 1, 1024);
    const auto nics = r.optional_integer("nics_per_node", 0, 1024);
    const auto nic_gbps = r.optional_number("nic_gbps", 0.001, 1e6);
    const std::string coll =
        r.choice("collective", {"all_reduce", "all_gather", "reduce_scatter"}, "all_reduce");
    c.op = coll == "all_gather"       ? CollectiveOp::kAllGather
           : coll == "reduce_scatter" ? CollectiveOp::kReduceScatter
                                      : CollectiveOp::kAllReduce;
    const std::string algo = r.choice("algorithm", {"ring", "tree", "nvls"}, "");
    if (algo == "ring") c.algorithm = Algorithm::kRing;
    if (algo == "tree") c.algorithm = Algorithm::kTree;
    if (algo == "nvls") c.algorithm = Algorithm::kInSwitch;
    c.bytes = static_cast<double>(r.required_integer("bytes", 1, std::int64_t{1} << 50));
    JsonReader m = r.object("measured");
    c.measured_busbw = m.number("busbw_GBps", 0, 1e-9, 1e9) * 1e9;
    if (r.ok() && c.measured_busbw <= 0) m.fail("busbw_GBps", "missing required field");
    if (!r.ok()) return r.error();
    auto device = load_device(gpu);
    if (!device) return Error(file + ": " + r.pointer() + "/gpu: unknown GPU \"" + gpu + "\"");
    auto cluster = load_cluster(device->reference_cluster);
    if (!cluster) return cluster.error().with_context(file + ": " + r.pointer() + "/gpu");
    c.cluster = std::move(cluster).value();
    if (per_node)
      for (auto& g : c.cluster.node.devices)
        if (g.device.kind != DeviceKind::kCpu) {
          g.count = static_cast<int>(*per_node);
          break;
        }
    if (nics) c.cluster.node.nics = static_cast<int>(*nics);
    if (nic_gbps) c.cluster.node.nic.bandwidth = *nic_gbps * 1e9 / 8;
    FS_RETURN_IF_ERROR(resize_cluster(c.cluster, c.gpus, file + ": " + r.pointer() + "/gpus"));
    out.push_back(std::move(c));
  }
  if (!top.ok()) return top.error();
  return out;
}

CollectiveResult run_collective_case(const CollectiveCase& c) {
  CollectiveResult out;
  out.id = c.id;
  out.kind = c.kind;
  out.measured_busbw = c.measured_busbw;
  std::vector<int> all(c.gpus);
  for (int i = 0; i < c.gpus; ++i) all[i] = i;
  CollectiveRun run{c.op, {all}, c.bytes, c.algorithm};
  auto t = run_collectives(c.cluster, {run});
  if (!t) {
    out.failure = t.error().message();
    return out;
  }
  // Which algorithm the model picked (re-planned for the report; cheap).
  MaxMinSystem system;
  Topology topo(c.cluster, system);
  out.algorithm = std::string(to_string(plan_collective(topo, c.op, {all}, c.bytes, c.algorithm).algorithm));
  out.predicted_busbw = bus_bandwidth(c.op, c.gpus, c.bytes, t->front());
  out.error_pct = (out.predicted_busbw - c.measured_busbw) / c.measured_busbw * 100;
  out.ok = true;
  return out;
}

}  // namespace foresight
