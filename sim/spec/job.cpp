// Resolution of a job request: specs loaded, plan read and completed, cluster sized, checked.
#include "sim/spec/job.h"

#include <algorithm>
#include <string>
#include <vector>

#include "sim/spec/json_reader.h"
#include "sim/spec/presets.h"

namespace foresight {

namespace {

using nlohmann::json;

constexpr long long kMaxDevices = plan_range::kDegree.max;

std::string labelled(const std::string& label, const std::string& rest) {
  return label.empty() ? rest : label + ": " + rest;
}

Status load_specs(const JobRequest& r, Job& job) {
  auto src = resolve_spec(PresetKind::kModel, r.model);
  if (!src) return src.error().with_context(r.model_label);
  auto model = model_from_text(src->text, src->file);
  if (!model) return model.error().with_context(r.model_label);
  job.model = std::move(*model);
  auto cluster = load_cluster(r.cluster);
  if (!cluster)
    return r.cluster_label.empty() ? cluster.error() : cluster.error().with_context(r.cluster_label);
  job.cluster = std::move(*cluster);
  return Status::Ok();
}

// The plan file's document with the overrides merged over it (objects merged key by key, so
// {"data": {"prefetch": 4}} keeps the file's other data fields).
void merge_into(json& doc, const json& overrides) {
  for (const auto& [key, value] : overrides.items()) {
    if (value.is_object() && doc.contains(key) && doc[key].is_object())
      merge_into(doc[key], value);
    else
      doc[key] = value;
  }
}

// Reads the plan from the file and the overrides: each source alone first, so that a bad value is
// reported against the source that holds it, then the merged document (whose cross-field checks,
// such as the device count, may involve both). "recompute_layers": "auto" is taken out and
// reported through `auto_layers`; a missing global_batch is left 0 for derive_defaults.
Result<Plan> read_plan(const JobRequest& r, std::string& source, bool& auto_layers, bool& dp_given) {
  json overrides = r.overrides.is_null() ? json::object() : r.overrides;
  if (!overrides.is_object()) return Error(r.overrides_source + ": expected plan fields (a JSON object)");
  auto_layers = overrides.contains("recompute_layers") && overrides["recompute_layers"] == "auto";
  if (auto_layers) overrides.erase("recompute_layers");
  json doc = json::object();
  source = r.overrides_source;
  if (!r.plan_file.empty()) {
    FS_ASSIGN_OR_RETURN(doc, read_json_file(r.plan_file));
    if (doc.is_object() && doc.contains("recompute_layers") && doc["recompute_layers"] == "auto") {
      if (!overrides.contains("recompute_layers")) auto_layers = true;
      doc.erase("recompute_layers");
    }
    FS_RETURN_IF_ERROR(plan_from_json(doc, r.plan_file, /*require_global_batch=*/true));
    source = r.plan_file;
  }
  FS_RETURN_IF_ERROR(plan_from_json(overrides, r.overrides_source, /*require_global_batch=*/false));
  const bool schedule_given = doc.contains("schedule") || overrides.contains("schedule");
  dp_given = doc.contains("dp") || overrides.contains("dp");
  merge_into(doc, overrides);
  FS_ASSIGN_OR_RETURN(Plan plan, plan_from_json(doc, source, !r.plan_file.empty()));
  if (plan.virtual_stages > 1 && !schedule_given) plan.schedule = Schedule::kInterleaved1F1B;
  return plan;
}

// The device count: asked for, else the plan's degrees when dp is given or a plan file is (dp 1
// when it says none), else the whole cluster (every accelerator of every group when stages name
// their devices).
Result<int> device_count(const JobRequest& r, const Job& job, bool dp_known) {
  const Plan& p = job.plan;
  if (r.gpus && (*r.gpus < 1 || *r.gpus > kMaxDevices))
    return Error(labelled(r.gpus_label, std::to_string(*r.gpus) +
                                            " is out of range; expected an integer in [1, " +
                                            std::to_string(kMaxDevices) + "]"));
  if (r.gpus) return *r.gpus;
  if (dp_known) return p.gpus();
  if (!p.stage_devices.empty()) return job.cluster.nodes * job.cluster.node.accelerator_slots();
  return job.cluster.total_accelerators();
}

// Sizes the cluster to the job: whole nodes for `gpus` devices; with stages on different
// accelerator groups, as many nodes as the busiest group needs (the devices a plan leaves unused
// stay idle), or the cluster as it is when the device count was not asked for.
Status size_cluster(const JobRequest& r, Job& job, int gpus, bool dp_known) {
  const Plan& p = job.plan;
  ClusterSpec& c = job.cluster;
  if (p.stage_devices.empty()) return resize_cluster(c, gpus, r.gpus_label);
  if (!r.gpus && !dp_known) return Status::Ok();
  const int per_stage = gpus / std::max(1, p.pp);
  std::vector<long long> need(c.node.devices.size(), 0);
  for (const std::string& name : p.stage_devices) {
    const int g = c.node.accelerator_group(name);
    if (g >= 0) need[g] += per_stage;
  }
  int nodes = 1;
  for (std::size_t g = 0; g < need.size(); ++g)
    if (need[g] > 0) {
      const int count = std::max(1, c.node.devices[g].count);
      nodes = std::max<int>(nodes, static_cast<int>((need[g] + count - 1) / count));
    }
  c.nodes = nodes;
  return Status::Ok();
}

// dp from the device count when not given (so a plan file without dp takes --gpus), and the
// default global batch: at least 4
// micro-batches per pipeline stage, never below 256 sequences, a multiple of dp*micro_batch.
Status derive_batch(const JobRequest& r, Plan& p, int gpus, bool dp_given) {
  if (!dp_given) {
    const int others = p.tp * p.pp * p.cp;
    if (gpus % others != 0)
      return Error(labelled(
          r.gpus_label, std::to_string(gpus) + " is not a multiple of tp*pp*cp = " + std::to_string(others)));
    p.dp = gpus / others;
  }
  if (p.global_batch <= 0) {
    p.global_batch = std::max<long long>(256, 4LL * p.pp * p.dp * p.micro_batch);
    p.global_batch -= p.global_batch % (static_cast<long long>(p.dp) * p.micro_batch);
  }
  return Status::Ok();
}

Status fit_recompute_layers(const JobRequest& r, Job& job) {
  Plan& p = job.plan;
  const std::string where = job.plan_source + ": /recompute_layers: auto";
  if (p.recompute_method != RecomputeMethod::kBlock)
    return Error(where + " needs the block method (uniform takes a group size)");
  if (!r.fit_recompute_layers)
    return Error(where + " needs the analytic model's memory (not available here)");
  if (p.recompute == Recompute::kNone) p.recompute = Recompute::kFull;
  const int k = r.fit_recompute_layers(job.model, job.cluster, p);
  if (k < 0) return Error(where + ": the plan does not fit even when every layer recomputes");
  p.recompute_layers = k;
  return Status::Ok();
}

}  // namespace

JobRequest default_job_request() {
  JobRequest r;
  r.model = "llama3-70b";
  r.cluster = "dgx-h100-ndr";
  r.gpus = 64;
  r.overrides = {{"tp", 8}, {"pp", 2}, {"sequence_parallel", true}, {"zero_stage", 1}};
  return r;
}

Result<Job> resolve_job(const JobRequest& r) {
  Job job;
  FS_RETURN_IF_ERROR(load_specs(r, job));
  bool auto_layers = false;
  bool dp_given = true;
  bool dp_known = true;  // dp given, or a plan file that says none (dp 1)
  if (r.plan) {
    job.plan = *r.plan;
    job.plan_source = r.overrides_source;
    for (int d : {job.plan.tp, job.plan.pp, job.plan.dp, job.plan.cp})
      if (d < 1) return Error(job.plan_source + ": tp, pp, dp and cp must be >= 1");
    if (1LL * job.plan.tp * job.plan.pp * job.plan.dp * job.plan.cp > kMaxDevices)
      return Error(labelled(r.gpus_label, "tp*pp*dp*cp exceeds " + std::to_string(kMaxDevices) + " devices"));
  } else {
    FS_ASSIGN_OR_RETURN(job.plan, read_plan(r, job.plan_source, auto_layers, dp_given));
    dp_known = dp_given || !r.plan_file.empty();
  }
  FS_ASSIGN_OR_RETURN(const int gpus, device_count(r, job, dp_known));
  FS_RETURN_IF_ERROR(size_cluster(r, job, gpus, dp_known));
  FS_RETURN_IF_ERROR(derive_batch(r, job.plan, gpus, dp_given));
  if (auto_layers) FS_RETURN_IF_ERROR(fit_recompute_layers(r, job));
  FS_RETURN_IF_ERROR(validate_plan_on(job.plan, job.model, job.cluster, job.plan_source));
  return job;
}

}  // namespace foresight
