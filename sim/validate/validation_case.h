// Published training runs (validation/training, schema foresight-validation-case/1 and /2) turned into a
// model, a cluster and a plan, predicted, and compared with the measured step time.
//
//   Result<ValidationCase> c = load_validation_case("sar22-175b-full.json");
//   CaseResult r = run_validation_case(*c);   // r.error_pct, r.chosen ({"micro_batch": 1, ...})
//
// A null field in a case means the source did not report it; the predictor tries every
// plausible value and keeps the best-performing one that fits in memory, and says which.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sim/analytic/prediction.h"
#include "sim/core/status.h"
#include "sim/spec/hardware.h"
#include "sim/spec/model.h"
#include "sim/spec/plan.h"
#include "sim/validate/collective_case.h"

namespace foresight {

struct ValidationCase {
  std::string id;
  std::string file;
  std::string source;
  int schema = 1;  // foresight-validation-case/1 or /2
  // Version 2: the software stack that ran the case (`software.name`, `software.version`; empty:
  // not reported) and the model facts it may state (absent: the stack's usual value).
  std::string software;
  std::string software_version;
  // software.compile: the run compiled its model (torch.compile), fusing the elementwise chains
  // PyTorch's eager mode runs one operator at a time (Plan::kernel_fusion).
  std::optional<bool> compiled;
  // software.cuda_graphs: the run replayed its layers as CUDA graphs (Plan::cuda_graphs; a dropless
  // MoE layer's experts stay outside them). Absent: eager.
  std::optional<bool> cuda_graphs;
  std::optional<bool> dropout, tied_embeddings;
  ModelSpec model;
  ClusterSpec cluster;
  nlohmann::json parallel;  // as in the file, nulls included
  double measured_step_s = 0;
  // measured.peak_memory_gib: the peak device memory the source reported (GiB; 0: none), with
  // measured.memory_from (required with it, checked, not kept) saying what it measured.
  double measured_memory_gib = 0;
};

struct CaseResult {
  std::string id;
  std::string file;
  std::string source;  // the source's short name ("Narayanan et al.", "mosaicml/llm-foundry")
  // The case's classes, for errors per class: "stack", "precision", "sharding", "scale".
  std::map<std::string, std::string> classes;
  bool ok = false;
  std::string failure;  // why it could not be predicted
  double predicted_step_s = 0;
  double measured_step_s = 0;
  double error_pct = 0;  // (predicted - measured) / measured * 100
  // The peak device memory, where the source reported it: the prediction's (MemoryBreakdown::total
  // of the fullest stage, GiB) against it; measured_memory_gib 0: not reported.
  double predicted_memory_gib = 0, measured_memory_gib = 0, memory_error_pct = 0;
  nlohmann::json chosen = nlohmann::json::object();   // values picked for null fields
  nlohmann::json assumed = nlohmann::json::object();  // facts of the source's software stack
  Plan plan;
  Prediction prediction;
};

enum class Engine { kAnalytic, kDes };

struct ValidationSummary {
  Engine engine = Engine::kAnalytic;
  std::vector<CaseResult> cases;
  double mape_pct = 0;
  double max_abs_error_pct = 0;
  std::string worst_id;
  int failed = 0;
  // Peak memory, over the cases that report it.
  int memory_cases = 0;
  double memory_mape_pct = 0, memory_max_abs_error_pct = 0;
  std::string memory_worst_id;
  // Collective cases (busbw), when any collectives file was given.
  std::vector<CollectiveResult> collectives;
  double collectives_mape_pct = 0;
  double collectives_max_abs_error_pct = 0;
};

Result<ValidationCase> validation_case_from_json(const nlohmann::json& doc, const std::string& file);
Result<ValidationCase> load_validation_case(const std::string& path);
// Fills unreported fields with the analytic model (fast), then predicts the chosen plan with
// `engine`.
CaseResult run_validation_case(const ValidationCase& c, Engine engine = Engine::kAnalytic);

// Expands files and folders (every *.json inside, sorted) into case files.
Result<std::vector<std::string>> collect_case_files(const std::vector<std::string>& paths);
// Loads and runs every case; a case that cannot be loaded or predicted is a failed result.
// A what-if on the hardware: every accelerator named `device.name` in every case is `device`, the
// preset with a JSON merge patch applied (device_patch).
struct DevicePatch {
  DeviceSpec device;
};
// The preset `name` with `patch` (e.g. {"efficiency": {"gemm_fp8": 0.5}}) applied, checked as a
// device file is; an error names the device and the field.
Result<DevicePatch> device_patch(const std::string& name, const nlohmann::json& patch);
ValidationSummary run_validation(const std::vector<std::string>& files, Engine engine = Engine::kAnalytic,
                                 const std::vector<DevicePatch>& patches = {});
nlohmann::json validation_to_json(const ValidationSummary& s);

// Mean and worst absolute error of the predicted cases per group: by source and by each class.
struct GroupError {
  std::string group;  // "source", "stack", "precision", "sharding", "scale"
  std::string name;   // the group's value
  int cases = 0;
  double mape_pct = 0, max_abs_error_pct = 0;
  std::string worst_id;
};
std::vector<GroupError> errors_by_group(const ValidationSummary& s);
nlohmann::json groups_to_json(const std::vector<GroupError>& groups);
// "Narayanan et al., SC'21, arXiv:2104.04473, Table 1" -> "Narayanan et al., SC'21".
std::string short_source(const std::string& source);

}  // namespace foresight
