// Published NCCL measurements (validation/collectives, schema
// foresight-validation-collectives/1) reproduced with the simulator's network model, compared in
// the nccl-tests convention (busbw).
//
//   auto cases = load_collective_cases("nccl-published.json");
//   CollectiveResult r = run_collective_case(cases->front());   // r.error_pct on busbw
#pragma once

#include <string>
#include <vector>

#include "sim/core/status.h"
#include "sim/net/collective_flows.h"
#include "sim/spec/hardware.h"

namespace foresight {

struct CollectiveCase {
  std::string id, kind, source, file;
  ClusterSpec cluster;
  CollectiveOp op = CollectiveOp::kAllReduce;
  std::optional<Algorithm> algorithm;  // null in the file: chosen as NCCL would
  int gpus = 0;
  double bytes = 0;
  double measured_busbw = 0;  // bytes/s
};

struct CollectiveResult {
  std::string id, kind;
  bool ok = false;
  std::string failure;
  std::string algorithm;       // the one the model used
  double predicted_busbw = 0;  // bytes/s
  double measured_busbw = 0;
  double error_pct = 0;
};

// True when the document is a collectives file (by its "schema").
bool is_collectives_file(const nlohmann::json& doc);
Result<std::vector<CollectiveCase>> collective_cases_from_json(const nlohmann::json& doc,
                                                               const std::string& file);
CollectiveResult run_collective_case(const CollectiveCase& c);

}  // namespace foresight
