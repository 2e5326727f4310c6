// The one step from what a user asks for to a job every engine takes: a model, a cluster sized to
// the job, and a plan read, completed and checked against both. The CLI, the GUI and the runtime
// resolve through it, so a plan is read by one reader, checked by one validator and described by
// one set of messages, and derived values (the data-parallel size, the device count, the default
// global batch) are computed once.
//
//   JobRequest r = default_job_request();        // Llama 3 70B on 64 H100s, tp8 pp2 dp4, sp, ZeRO-1
//   r.overrides["tp"] = 4;                         // plan fields in the plan file's form
//   Result<Job> job = resolve_job(r);              // job->plan.dp == 8, job->cluster.nodes == 8
//
// Resolution, in order:
//   1. the model and the cluster (preset names or files);
//   2. the plan: the plan file, then `overrides` over it (each read alone first, so a bad value is
//      reported against its own source), or a Plan already built (`plan`);
//   3. derived values: interleaved 1F1B when virtual_stages > 1 and no schedule is given; the
//      device count (`gpus`, else tp*pp*dp*cp when dp is known, else the whole cluster); the
//      cluster resized to it; dp = devices / (tp*pp*cp) when not given; the default global batch
//      (at least 4 micro-batches per stage, never below 256 sequences) when not given;
//      recompute_layers "auto" (the fewest that fit, through `fit_recompute_layers`);
//   4. the plan validated against the model and the cluster.
// The cluster's shape (a torus's dims against the node count) is not checked: the analytic model
// does not depend on it; the simulator and the GUI's topology check it (check_cluster_shape).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "sim/core/status.h"
#include "sim/spec/hardware.h"
#include "sim/spec/model.h"
#include "sim/spec/plan.h"

namespace foresight {

struct JobRequest {
  std::string model = "llama3-70b";      // preset name, model JSON or Hugging Face config.json
  std::string cluster = "dgx-h100-ndr";  // preset name or cluster JSON
  std::optional<int> gpus;               // accelerators the job uses (see step 3 above)
  std::string plan_file;                 // a plan JSON ("" for none)
  // Plan fields in the plan file's form ({"tp": 8, "data": {"prefetch": 4}}), over the file's.
  // "recompute_layers": "auto" asks for the fewest recomputed layers that fit.
  nlohmann::json overrides = nlohmann::json::object();
  std::optional<Plan> plan;  // a plan already built (instead of plan_file and overrides)
  // How errors name the sources: "command line: /tp: ...", "--model: ...".
  std::string overrides_source = "command line";
  std::string model_label = "model";
  std::string cluster_label = "cluster";
  std::string gpus_label = "gpus";
  // The fewest recomputed layers that fit, -1 if none do (the analytic model's memory; the spec
  // layer cannot compute it). Needed only for "recompute_layers": "auto".
  std::function<int(const ModelSpec&, const ClusterSpec&, const Plan&)> fit_recompute_layers;
};

struct Job {
  ModelSpec model;
  ClusterSpec cluster;      // sized to the job
  Plan plan;                // complete and valid on model and cluster
  std::string plan_source;  // the plan file, else overrides_source: how errors name the plan
};

// The built-in example every front end starts from: Llama 3 70B on 64 H100s (8 DGX nodes), TP 8
// with sequence parallelism inside each node, 2 pipeline stages, the optimizer state sharded over
// the 4 data-parallel replicas (ZeRO-1), 256 sequences per step.
JobRequest default_job_request();

Result<Job> resolve_job(const JobRequest& request);

}  // namespace foresight
