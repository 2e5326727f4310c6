// Command-line options shared by the subcommands that take a model, a cluster and a plan
// (predict now; simulate, run and search later), and their resolution into specs.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "sim/core/status.h"
#include "sim/spec/hardware.h"
#include "sim/spec/model.h"
#include "sim/spec/plan.h"

namespace foresight::app {

struct PlanOptions {
  std::string model = "llama3-70b";
  std::string cluster = "dgx-h100-ndr";
  std::optional<int> gpus;
  std::string plan_file;
  std::optional<int> tp, pp, dp, ep, cp, virtual_stages, micro_batch, zero, seq_len;
  std::optional<long long> global_batch;
  std::optional<std::string> schedule, recompute, precision;
  std::optional<bool> sp, flash, overlap_grad, overlap_tp, offload_optimizer, offload_params,
      offload_activations, offload_embeddings, kernel_fusion, cuda_graphs;
  std::vector<int> layer_split;
  std::vector<std::string> stage_devices;
  std::vector<int> stage_tp;
  std::optional<std::string> grad_compression;
  std::optional<double> compression_topk, compression_penalty;
  std::optional<int> compression_rank;
  std::optional<std::string> recompute_layers;  // a count or "auto"
  std::optional<std::string> recompute_method;
  std::optional<std::string> data_sample_bytes, data_compression;
  std::optional<int> data_prefetch, data_loader_cores;
  std::optional<double> data_cached_fraction;
  std::optional<std::string> rank_order, node_order, attention_device;
};

// Adds --model, --cluster, --gpus, --plan and the per-field plan overrides to `cmd`.
void add_plan_options(CLI::App& cmd, PlanOptions& o);

struct ResolvedInputs {
  ModelSpec model;
  ClusterSpec cluster;
  Plan plan;
  std::string plan_source;  // "plan.json", "command line", ...
};

// Fills in the built-in example layout when the user gave the default model and cluster and no
// layout at all (the quick start's `foresight predict`).
void apply_default_job(PlanOptions& o);

// "15T", "2.5e12", "300B" -> tokens (errors name --tokens).
Result<double> parse_tokens(const std::string& text);

// Loads model and cluster, sizes the cluster, builds the plan (file, then overrides; dp derived
// from the device count when not given) and validates it.
Result<ResolvedInputs> resolve_inputs(const PlanOptions& o);

}  // namespace foresight::app
