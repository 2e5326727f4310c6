// Shared model/cluster/plan options and their resolution.
#include "app/plan_options.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "app/cli_checks.h"
#include "sim/analytic/capacity.h"
#include "sim/core/units.h"
#include "sim/spec/presets.h"

namespace foresight::app {

void add_plan_options(CLI::App& cmd, PlanOptions& o) {
  using namespace plan_range;  // each option holds to its plan field's range
  cmd.add_option("--model,-m", o.model, "model preset name, model JSON, or Hugging Face config.json")
      ->capture_default_str();
  cmd.add_option("--cluster,-c", o.cluster, "cluster preset name or cluster JSON")->capture_default_str();
  cmd.add_option("--gpus,-g", o.gpus, "accelerators to use (default: tp*pp*dp*cp, else the whole cluster)")
      ->check(int_in(plan_range::kDegree));
  cmd.add_option("--plan,-p", o.plan_file, "plan JSON; the options below override its fields");
  cmd.add_option("--tp", o.tp, "tensor-parallel degree")->check(int_in(kDegree))->group("Plan");
  cmd.add_option("--pp", o.pp, "pipeline-parallel degree")->check(int_in(kDegree))->group("Plan");
  cmd.add_option("--dp", o.dp, "data-parallel degree (default: gpus / (tp*pp*cp))")
      ->check(int_in(kDegree))
      ->group("Plan");
  cmd.add_option("--ep", o.ep, "expert-parallel degree (carved out of dp)")
      ->check(int_in(kDegree))
      ->group("Plan");
  cmd.add_option("--cp", o.cp, "context-parallel degree")->check(int_in(kDegree))->group("Plan");
  cmd.add_option("--sp", o.sp, "sequence parallelism (true/false)")->group("Plan");
  cmd.add_option("--virtual-stages,--vp", o.virtual_stages,
                 "model chunks per pipeline rank (interleaved 1F1B)")
      ->check(int_in(kVirtualStages))
      ->group("Plan");
  cmd.add_option("--micro-batch,--mb", o.micro_batch, "sequences per micro-batch")
      ->check(int_in(kMicroBatch))
      ->group("Plan");
  cmd.add_option("--global-batch,--gb", o.global_batch, "sequences per optimizer step")
      ->check(int_in(kGlobalBatch))
      ->group("Plan");
  cmd.add_option("--schedule", o.schedule, "gpipe, 1f1b, interleaved-1f1b, zero-bubble, dualpipe")
      ->group("Plan");
  cmd.add_option("--recompute", o.recompute,
                 "none, selective, full, optimal (per layer: the recompute modules that fit memory at the "
                 "least time)")
      ->group("Plan");
  cmd.add_option(
         "--recompute-method", o.recompute_method,
         "block (with --recompute-layers N: the first N layers of each stage) or uniform (full recompute, "
         "keeping only the input of each group of N layers)")
      ->group("Plan");
  cmd.add_option("--zero", o.zero, "ZeRO stage 0-3 (3 = FSDP full shard)")
      ->check(int_in(kZeroStage))
      ->group("Plan");
  cmd.add_option("--precision", o.precision, "fp32, bf16, fp16, fp8")->group("Plan");
  cmd.add_option("--flash-attention", o.flash, "fused attention kernels (true/false)")->group("Plan");
  cmd.add_option("--overlap-grad-reduce", o.overlap_grad, "overlap DP gradient reduction with backward")
      ->group("Plan");
  cmd.add_option("--overlap-tp-comm", o.overlap_tp, "overlap TP collectives with GEMMs")->group("Plan");
  cmd.add_option("--offload-optimizer", o.offload_optimizer, "optimizer state and step on the host")
      ->group("Plan");
  cmd.add_option(
         "--kernel-fusion", o.kernel_fusion,
         "fused elementwise chains (true, as Megatron) or one kernel per operator (false, PyTorch eager)")
      ->group("Plan");
  cmd.add_option("--cuda-graphs", o.cuda_graphs,
                 "replay each layer's kernels as a CUDA graph (less launch cost)")
      ->group("Plan");
  cmd.add_option("--offload-params", o.offload_params,
                 "parameters and gradients in host memory, streamed per layer (ZeRO-Infinity; needs "
                 "--offload-optimizer)")
      ->group("Plan");
  cmd.add_option("--offload-activations", o.offload_activations,
                 "saved activations to host memory after each layer's forward, back before its backward")
      ->group("Plan");
  cmd.add_option("--offload-embeddings", o.offload_embeddings, "the input embedding table in host memory")
      ->group("Plan");
  cmd.add_option(
         "--rank-order", o.rank_order,
         "parallel dimensions from fastest- to slowest-varying along the devices (default tp-cp-dp-pp)")
      ->group("Plan");
  cmd.add_option("--node-order", o.node_order,
                 "linear (topology order) or shuffled (as a scheduler might hand out nodes)")
      ->group("Plan");
  cmd.add_option(
         "--attention-device", o.attention_device,
         "run each layer's attention core on this other accelerator of the node (or auto: where faster)")
      ->group("Plan");
  cmd.add_option(
         "--data-sample-bytes", o.data_sample_bytes,
         "bytes of one sample on storage, uncompressed, e.g. 150KB (default: the sequence's token ids)")
      ->group("Data loading");
  cmd.add_option("--data-compression", o.data_compression, "none or lz4")->group("Data loading");
  cmd.add_option("--data-prefetch", o.data_prefetch,
                 "batches loaded ahead (0: loading in the training loop; default 2)")
      ->check(int_in(kPrefetch))
      ->group("Data loading");
  cmd.add_option("--data-loader-cores", o.data_loader_cores, "CPU cores per node for loading (default 8)")
      ->check(int_in(kLoaderCores))
      ->group("Data loading");
  cmd.add_option("--data-cached-fraction", o.data_cached_fraction,
                 "share of reads served by a node-local cache (incremental loading), 0..1")
      ->check(number_in(0, 1))
      ->group("Data loading");
  cmd.add_option("--seq-len", o.seq_len, "training sequence length (default: the model's)")
      ->check(int_in(kSeqLen))
      ->group("Plan");
  cmd.add_option("--layer-split", o.layer_split, "layers per pipeline stage, e.g. --layer-split 9,10,10,9")
      ->delimiter(',')
      ->check(int_in(1, 100000))
      ->group("Plan");
  cmd.add_option(
         "--stage-devices", o.stage_devices,
         "the accelerator of each pipeline stage on nodes that mix them, e.g. h100-sxm5-80gb,ascend-910b")
      ->delimiter(',')
      ->group("Plan");
  cmd.add_option(
         "--stage-tp", o.stage_tp,
         "tensor-parallel degree of each pipeline stage, e.g. --stage-tp 1,4,4,1 (each keeps tp*dp ranks)")
      ->delimiter(',')
      ->check(int_in(kDegree))
      ->group("Plan");
  cmd.add_option("--recompute-layers", o.recompute_layers,
                 "block method: recompute only the first N layers of each stage (or chunk), auto: the fewest "
                 "that fit; "
                 "uniform method: the group size N")
      ->group("Plan");
  cmd.add_option("--grad-compression", o.grad_compression, "none, int8, topk, powersgd, four-stage")
      ->group("Plan");
  cmd.add_option("--compression-topk", o.compression_topk,
                 "fraction of gradient elements top-k keeps (default 0.01)")
      ->check(number_in(1e-9, 1))
      ->group("Plan");
  cmd.add_option("--compression-rank", o.compression_rank, "PowerSGD rank (default 4)")
      ->check(int_in(kCompressionRank))
      ->group("Plan");
  cmd.add_option("--compression-penalty", o.compression_penalty,
                 "extra steps to converge with compression, e.g. 0.03 (time to train)")
      ->check(number_in(0, 100))
      ->group("Plan");
}

Result<ResolvedInputs> resolve_inputs(const PlanOptions& o) {
  ResolvedInputs in;
  auto model_src = resolve_spec(PresetKind::kModel, o.model);
  if (!model_src) return model_src.error().with_context("--model");
  FS_ASSIGN_OR_RETURN(in.model, model_from_text(model_src->text, model_src->file));
  FS_ASSIGN_OR_RETURN(in.cluster, load_cluster(o.cluster));

  Plan plan;
  in.plan_source = "command line";
  bool have_file = !o.plan_file.empty();
  if (have_file) {
    FS_ASSIGN_OR_RETURN(plan, load_plan_file(o.plan_file));
    in.plan_source = o.plan_file;
  } else {
    plan.global_batch = 0;  // filled below
  }
  auto set = [](auto& field, const auto& opt) {
    if (opt) field = *opt;
  };
  set(plan.tp, o.tp);
  set(plan.pp, o.pp);
  set(plan.ep, o.ep);
  set(plan.cp, o.cp);
  set(plan.virtual_stages, o.virtual_stages);
  set(plan.micro_batch, o.micro_batch);
  set(plan.zero_stage, o.zero);
  set(plan.seq_len, o.seq_len);
  set(plan.sequence_parallel, o.sp);
  set(plan.flash_attention, o.flash);
  set(plan.overlap_grad_reduce, o.overlap_grad);
  set(plan.overlap_tp_comm, o.overlap_tp);
  set(plan.offload_optimizer, o.offload_optimizer);
  set(plan.offload_params, o.offload_params);
  set(plan.kernel_fusion, o.kernel_fusion);
  set(plan.cuda_graphs, o.cuda_graphs);
  set(plan.offload_activations, o.offload_activations);
  set(plan.offload_embeddings, o.offload_embeddings);
  if (!o.layer_split.empty()) plan.layer_split = o.layer_split;
  if (!o.stage_devices.empty()) plan.stage_devices = o.stage_devices;
  if (!o.stage_tp.empty()) plan.stage_tp = o.stage_tp;
  if (o.grad_compression) {
    auto c = parse_grad_compression(*o.grad_compression);
    if (!c) return c.error().with_context("--grad-compression");
    plan.grad_compression = *c;
  }
  set(plan.compression_topk, o.compression_topk);
  set(plan.compression_rank, o.compression_rank);
  set(plan.compression_penalty, o.compression_penalty);
  if (o.rank_order) {
    if (auto s = check_rank_order(*o.rank_order); !s.ok()) return s.error().with_context("--rank-order");
    plan.rank_order = *o.rank_order;
  }
  if (o.node_order) {
    if (*o.node_order != "linear" && *o.node_order != "shuffled")
      return Error("--node-order: \"" + *o.node_order + "\" is not one of: linear, shuffled");
    plan.node_order = *o.node_order;
  }
  if (o.attention_device) plan.attention_device = *o.attention_device;
  if (o.data_sample_bytes) {
    auto q = parse_quantity(*o.data_sample_bytes, Dimension::kBytes);
    if (!q) return q.error().with_context("--data-sample-bytes");
    if (Status r = check_physical_range(*q, Dimension::kBytes, *o.data_sample_bytes); !r)
      return r.error().with_context("--data-sample-bytes");
    if (*q <= 0) return Error("--data-sample-bytes: must be > 0");
    plan.data.sample_bytes = *q;
  }
  if (o.data_compression && !plan.data.set_compression(*o.data_compression))
    return Error("--data-compression: \"" + *o.data_compression + "\" is not one of: none, lz4");
  set(plan.data.prefetch, o.data_prefetch);
  set(plan.data.loader_cores, o.data_loader_cores);
  set(plan.data.cached_fraction, o.data_cached_fraction);
  set(plan.global_batch, o.global_batch);
  if (o.schedule) {
    auto s = parse_schedule(*o.schedule);
    if (!s) return s.error().with_context("--schedule");
    plan.schedule = *s;
  }
  if (o.recompute) {
    auto r = parse_recompute(*o.recompute);
    if (!r) return r.error().with_context("--recompute");
    plan.recompute = *r;
  }
  if (o.recompute_method) {
    auto r = parse_recompute_method(*o.recompute_method);
    if (!r) return r.error().with_context("--recompute-method");
    plan.recompute_method = *r;
  }
  if (o.precision) {
    auto p = parse_precision(*o.precision);
    if (!p) return p.error().with_context("--precision");
    plan.precision = *p;
  }
  if (plan.virtual_stages > 1 && !o.schedule) plan.schedule = Schedule::kInterleaved1F1B;

  // Degrees multiply: check the products in 64 bits before any int arithmetic on them.
  constexpr long long kMaxDevices = 1 << 20;
  const long long others64 = 1LL * plan.tp * plan.pp * plan.cp;
  const long long with_dp = others64 * (o.dp ? *o.dp : plan.dp);
  if (others64 > kMaxDevices || with_dp > kMaxDevices || (o.gpus && *o.gpus > kMaxDevices))
    return Error("--tp/--pp/--dp/--cp/--gpus: tp*pp*dp*cp exceeds " + std::to_string(kMaxDevices) +
                 " devices");

  // Device count: --gpus, else the plan's degrees when dp is known, else the whole cluster.
  int gpus = 0;
  if (o.gpus) {
    gpus = *o.gpus;
  } else if (o.dp || have_file) {
    gpus = plan.tp * plan.pp * (o.dp ? *o.dp : plan.dp) * plan.cp;
  } else if (!plan.stage_devices.empty()) {
    gpus = in.cluster.nodes * in.cluster.node.accelerator_slots();  // every accelerator, all groups
  } else {
    gpus = in.cluster.total_accelerators();
  }
  if (gpus < 1) return Error("--gpus: must be >= 1");
  if (plan.stage_devices.empty()) {
    FS_RETURN_IF_ERROR(resize_cluster(in.cluster, gpus, "--gpus"));
  } else if (o.gpus || o.dp || have_file) {
    // Stages on different accelerator groups: as many nodes as the busiest group needs (the
    // devices a plan leaves unused stay idle). Otherwise the cluster keeps its node count.
    const int per_stage = gpus / std::max(1, plan.pp);
    std::vector<long long> need(in.cluster.node.devices.size(), 0);
    for (const std::string& name : plan.stage_devices) {
      const int g = in.cluster.node.accelerator_group(name);
      if (g >= 0) need[g] += per_stage;
    }
    int nodes = 1;
    for (std::size_t g = 0; g < need.size(); ++g)
      if (need[g] > 0) {
        const int count = std::max(1, in.cluster.node.devices[g].count);
        nodes = std::max<int>(nodes, static_cast<int>((need[g] + count - 1) / count));
      }
    in.cluster.nodes = nodes;
  }
  if (o.dp) {
    plan.dp = *o.dp;
  } else if (!have_file) {
    const int others = plan.tp * plan.pp * plan.cp;
    if (gpus % others != 0)
      return Error("--gpus: " + std::to_string(gpus) +
                   " is not a multiple of tp*pp*cp = " + std::to_string(others));
    plan.dp = gpus / others;
  }
  if (plan.dp < 1) return Error("--dp: must be >= 1");
  if (plan.global_batch <= 0) {
    // Default: at least 4 micro-batches per pipeline stage, and never below 256 sequences.
    plan.global_batch = std::max<long long>(256, 4LL * plan.pp * plan.dp * plan.micro_batch);
    plan.global_batch -= plan.global_batch % (static_cast<long long>(plan.dp) * plan.micro_batch);
  }
  if (o.recompute_layers) {
    if (*o.recompute_layers == "auto") {
      if (plan.recompute_method != RecomputeMethod::kBlock)
        return Error("--recompute-layers auto: needs the block method (uniform takes a group size)");
      if (plan.recompute == Recompute::kNone) plan.recompute = Recompute::kFull;
      const int k = fewest_recompute_layers(in.model, in.cluster, plan);
      if (k < 0)
        return Error("--recompute-layers auto: the plan does not fit even when every layer recomputes");
      plan.recompute_layers = k;
    } else {
      try {
        std::size_t used = 0;
        const int k = std::stoi(*o.recompute_layers, &used);
        if (used != o.recompute_layers->size() || k < 0) throw std::invalid_argument("");
        plan.recompute_layers = k;
      } catch (const std::exception&) {
        return Error("--recompute-layers: \"" + *o.recompute_layers + "\" is not a layer count or auto");
      }
    }
  }
  FS_RETURN_IF_ERROR(validate_plan_on(plan, in.model, in.cluster, in.plan_source));
  in.plan = plan;
  return in;
}

// "15T", "2.5e12", "300B" -> tokens.
Result<double> parse_tokens(const std::string& text) {
  if (text.empty()) return Error("--tokens: empty");
  double mult = 1;
  std::string num = text;
  switch (text.back()) {
    case 'K':
    case 'k':
      mult = 1e3;
      num.pop_back();
      break;
    case 'M':
      mult = 1e6;
      num.pop_back();
      break;
    case 'B':
    case 'G':
      mult = 1e9;
      num.pop_back();
      break;
    case 'T':
      mult = 1e12;
      num.pop_back();
      break;
    default:
      break;
  }
  try {
    std::size_t used = 0;
    const double v = std::stod(num, &used);
    if (used != num.size() || !(v > 0) || !std::isfinite(v)) throw std::invalid_argument(text);
    return v * mult;
  } catch (const std::exception&) {
    return Error("--tokens: \"" + text + "\" is not a token count such as 15T, 300B or 2e12");
  }
}

}  // namespace foresight::app
