// Command-line options shared by the subcommands that take a model, a cluster and a plan, and
// their resolution into a job. Every plan option is an override of the plan file field it stands
// for ("--gb 512" is {"global_batch": 512}): the plan reader checks it, and sim/spec/job.h's
// resolve_job completes and validates the job, so the command line and plan files share one
// reader, one validator and one set of messages (an error names the option: "--tp: 0 is out of
// range; expected an integer in [1, 1048576]").
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "sim/core/status.h"
#include "sim/spec/job.h"

namespace foresight::app {

struct PlanOptions {
  std::string model = default_job_request().model;
  std::string cluster = default_job_request().cluster;
  std::optional<int> gpus;
  std::string plan_file;
  // The plan fields given on the command line, in the plan file's form.
  nlohmann::json overrides = nlohmann::json::object();

  // Whether the command line set the field at `pointer` ("/tp", "/data/prefetch").
  bool has(std::string_view pointer) const;
  // The integer, text or flag it set there, if any.
  std::optional<long long> integer(std::string_view pointer) const;
  std::optional<std::string> text(std::string_view pointer) const;
  void set(std::string_view pointer, nlohmann::json value);
};

// Adds --model, --cluster, --gpus, --plan and the per-field plan overrides to `cmd`.
void add_plan_options(CLI::App& cmd, PlanOptions& o);

using ResolvedInputs = Job;

// Fills in the built-in example job (default_job_request()) when the user gave the default model
// and cluster and no layout at all (the quick start's `foresight predict`).
void apply_default_job(PlanOptions& o);

// "15T", "2.5e12", "300B" -> tokens (errors name --tokens).
Result<double> parse_tokens(const std::string& text);

// Loads model and cluster, sizes the cluster, builds the plan (file, then overrides; dp derived
// from the device count when not given) and validates it: resolve_job, with errors naming options.
Result<ResolvedInputs> resolve_inputs(const PlanOptions& o);

}  // namespace foresight::app
