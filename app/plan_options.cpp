// Shared model/cluster/plan options and their resolution through resolve_job.
#include "app/plan_options.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/cli_checks.h"
#include "sim/analytic/capacity.h"

namespace foresight::app {

namespace {

using nlohmann::json;

// What a plan option's text stands for in the plan file.
enum class Kind { kInteger, kNumber, kFlag, kText, kIntegers, kTexts, kLayersOrAuto };

struct PlanFlag {
  const char* names;    // CLI11 names; the first is the one errors use
  const char* pointer;  // the plan file field it overrides
  Kind kind;
  const char* group;
  const char* help;
};

// Every plan override, in --help's order. The plan reader checks each value's range.
constexpr PlanFlag kPlanFlags[] = {
    {"--tp", "/tp", Kind::kInteger, "Plan", "tensor-parallel degree"},
    {"--pp", "/pp", Kind::kInteger, "Plan", "pipeline-parallel degree"},
    {"--dp", "/dp", Kind::kInteger, "Plan", "data-parallel degree (default: gpus / (tp*pp*cp))"},
    {"--ep", "/ep", Kind::kInteger, "Plan", "expert-parallel degree (carved out of dp)"},
    {"--expert-tp", "/expert_tp", Kind::kInteger, "Plan",
     "experts' tensor-parallel degree: tp (default) or 1 (ep carved out of tp*cp*dp, MoE parallel folding)"},
    {"--cp", "/cp", Kind::kInteger, "Plan", "context-parallel degree"},
    {"--sp", "/sequence_parallel", Kind::kFlag, "Plan", "sequence parallelism (true/false)"},
    {"--virtual-stages,--vp", "/virtual_stages", Kind::kInteger, "Plan",
     "model chunks per pipeline rank (interleaved 1F1B)"},
    {"--micro-batch,--mb", "/micro_batch", Kind::kInteger, "Plan", "sequences per micro-batch"},
    {"--global-batch,--gb", "/global_batch", Kind::kInteger, "Plan", "sequences per optimizer step"},
    {"--schedule", "/schedule", Kind::kText, "Plan", "gpipe, 1f1b, interleaved-1f1b, zero-bubble, dualpipe"},
    {"--recompute", "/recompute", Kind::kText, "Plan",
     "none, selective, full, optimal (per layer: the recompute modules that fit memory at the least time), "
     "selective-op (torchtitan's op policy: every second matmul and the elementwise ops re-run)"},
    {"--recompute-modules", "/recompute_modules", Kind::kTexts, "Plan",
     "with --recompute selective: the modules each layer drops and rebuilds, by Megatron-Core's "
     "--recompute-modules names (core_attn, layernorm, mlp, moe_act, mla_up_proj), e.g. "
     "layernorm,mla_up_proj,moe_act as DeepSeek-V3 (default: core_attn)"},
    {"--recompute-method", "/recompute_method", Kind::kText, "Plan",
     "block (with --recompute-layers N: the first N layers of each stage) or uniform (full recompute, "
     "keeping only the input of each group of N layers)"},
    {"--cp-comm", "/cp_comm", Kind::kText, "Plan",
     "context parallelism's K/V exchange: ring (overlapped with attention) or all-gather (exposed, as Llama "
     "3 "
     "and torchtitan)"},
    {"--zero", "/zero_stage", Kind::kInteger, "Plan",
     "ZeRO stage 0-3 (3 = FSDP full shard; with --pp > 1 as FSDP2 under PyTorch's pipelining: gathered once "
     "a step, parameters and gradients held whole, reduce-scattered after a stage's last backward)"},
    {"--precision", "/precision", Kind::kText, "Plan", "fp32, bf16, fp16, fp8"},
    {"--fp8-recipe", "/fp8_recipe", Kind::kText, "Plan",
     "an fp8 plan's scaling: delayed (amax history), current (each tensor's own amax, one more read), "
     "blockwise, mxfp8 or rowwise (torchao's per-row scales: each operand cast along both axes)"},
    {"--fp8-weight-recast", "/fp8_weight_recast", Kind::kFlag, "Plan",
     "an fp8 plan's weights cast from 16 bits in every forward and backward (torchao's Float8Linear), "
     "not once a step (Transformer Engine)"},
    {"--flash-attention", "/flash_attention", Kind::kFlag, "Plan", "fused attention kernels (true/false)"},
    {"--attention-kernel", "/attention_kernel", Kind::kText, "Plan",
     "best (the device's fastest fused attention: cuDNN/FlashAttention-3 on Hopper), flash2 "
     "(FlashAttention-2 class, PyTorch SDPA's default) or flash1 (FlashAttention-1 class: its CUDA kernels "
     "or "
     "their Triton port, at half the flash2 rate)"},
    {"--overlap-grad-reduce", "/overlap_grad_reduce", Kind::kFlag, "Plan",
     "overlap DP gradient reduction with backward"},
    {"--overlap-tp-comm", "/overlap_tp_comm", Kind::kFlag, "Plan", "overlap TP collectives with GEMMs"},
    {"--overlap-tp-dgrad", "/overlap_tp_dgrad", Kind::kFlag, "Plan",
     "the backward's all-reduce (with SP reduce-scatter) of the QKV and MLP-up input gradients runs "
     "beside their weight gradients (Megatron-LM from 2021-09, Transformer Engine); default: in line"},
    {"--overlap-param-gather", "/overlap_param_gather", Kind::kFlag, "Plan",
     "ZeRO-1/2: overlap the parameter all-gather with the next forward"},
    {"--overlap-p2p-comm", "/overlap_p2p_comm", Kind::kFlag, "Plan",
     "interleaved 1F1B: overlap the pipeline's sends and receives with the chunks' compute"},
    {"--overlap-ep-comm", "/overlap_ep_comm", Kind::kFlag, "Plan",
     "MoE: hide the expert all-to-alls behind a second micro-batch's compute (merged forward/backward "
     "pairs; interleaved 1F1B, dualpipe or pp 1)"},
    {"--grad-reduce-precision", "/grad_reduce_precision", Kind::kText, "Plan",
     "type of the gradient buffer and its DP reduction: fp32, bf16, fp16 (default fp32; fp16 runs: fp16)"},
    {"--optimizer-state-precision", "/optimizer_state_precision", Kind::kText, "Plan",
     "type of the optimizer's state (Adam's moments, master weights): fp32 (default) or bf16 (Apex's "
     "DistributedFusedAdam with dtype bf16)"},
    {"--offload-optimizer", "/offload_optimizer", Kind::kFlag, "Plan",
     "optimizer state and step on the host"},
    {"--kernel-fusion", "/kernel_fusion", Kind::kFlag, "Plan",
     "fused elementwise chains (true, as Megatron) or one kernel per operator (false, PyTorch eager)"},
    {"--cross-entropy", "/cross_entropy", Kind::kText, "Plan",
     "the loss's kernels over the fp32 logits: one-pass (Transformer Engine's, flash-attn's, Liger's), "
     "jit-fused (Megatron-Core's --cross-entropy-loss-fusion native: four kernels) or unfused (Megatron's "
     "default: a pass per step, nine kernels)"},
    {"--recompute-early-stop", "/recompute_early_stop", Kind::kFlag, "Plan",
     "full recompute stops once the backward's tensors exist again, before the MLP's down "
     "projection (PyTorch's non-reentrant checkpoint from 2.1, torch.compile); default: the whole "
     "forward again (Megatron, DeepSpeed)"},
    {"--repeat-kv", "/repeat_kv", Kind::kFlag, "Plan",
     "K and V repeated to every query head before the attention (PyTorch SDPA after Llama's repeat_kv, "
     "torchtitan before 2026): copy kernels, and context parallelism exchanges the repeated K and V"},
    {"--fsdp-copies", "/fsdp_copies", Kind::kFlag, "Plan",
     "ZeRO-3 as PyTorch's FSDP2 runs it: each gathered layer copied out of the all-gather buffer and "
     "its gradients copied into the reduce-scatter buffer, on the compute stream"},
    {"--expert-gemm", "/expert_gemm", Kind::kText, "Plan",
     "how MoE expert GEMMs launch: grouped (one kernel over the rank's experts) or per_expert (one GEMM "
     "and fp8 quantisation per expert, as Transformer Engine's GroupedLinear; the host issues each)"},
    {"--moe-capacity-factor", "/moe_capacity_factor", Kind::kNumber, "Plan",
     "MoE token drop: each expert takes at most this times its even share of the tokens, padded to "
     "it (Megatron's moe_expert_capacity_factor with padding): fixed shapes, no host synchronisation; "
     "0 (the default): dropless"},
    {"--grad-bucket-params", "/grad_bucket_params", Kind::kInteger, "Plan",
     "with --overlap-grad-reduce: Megatron-Core's gradient buckets, in parameters (e.g. 40000000): the "
     "first stage's first model chunk in buckets of this size, every other chunk in one; 0 (the "
     "default): a bucket per layer"},
    {"--cuda-graphs", "/cuda_graphs", Kind::kFlag, "Plan",
     "replay each layer's kernels as a CUDA graph (less launch cost)"},
    {"--offload-params", "/offload_params", Kind::kFlag, "Plan",
     "parameters and gradients in host memory, streamed per layer (ZeRO-Infinity; needs "
     "--offload-optimizer)"},
    {"--offload-activations", "/offload_activations", Kind::kFlag, "Plan",
     "saved activations to host memory after each layer's forward, back before its backward"},
    {"--offload-embeddings", "/offload_embeddings", Kind::kFlag, "Plan",
     "the input embedding table in host memory"},
    {"--rank-order", "/rank_order", Kind::kText, "Plan",
     "parallel dimensions from fastest- to slowest-varying along the devices (default tp-cp-dp-pp)"},
    {"--node-order", "/node_order", Kind::kText, "Plan",
     "linear (topology order) or shuffled (as a scheduler might hand out nodes)"},
    {"--attention-device", "/attention_device", Kind::kText, "Plan",
     "run each layer's attention core on this other accelerator of the node (or auto: where faster)"},
    {"--data-sample-bytes", "/data/sample_bytes", Kind::kText, "Data loading",
     "bytes of one sample on storage, uncompressed, e.g. 150KB (default: the sequence's token ids)"},
    {"--data-compression", "/data/compression", Kind::kText, "Data loading", "none or lz4"},
    {"--data-prefetch", "/data/prefetch", Kind::kInteger, "Data loading",
     "batches loaded ahead (0: loading in the training loop; default 2)"},
    {"--data-loader-cores", "/data/loader_cores", Kind::kInteger, "Data loading",
     "CPU cores per node for loading (default 8)"},
    {"--data-cached-fraction", "/data/cached_fraction", Kind::kNumber, "Data loading",
     "share of reads served by a node-local cache (incremental loading), 0..1"},
    {"--seq-len", "/seq_len", Kind::kInteger, "Plan", "training sequence length (default: the model's)"},
    {"--layer-split", "/layer_split", Kind::kIntegers, "Plan",
     "layers per pipeline stage, e.g. --layer-split 9,10,10,9; with --vp one per model chunk "
     "(pp*vp entries, chunk c of stage s at c*pp+s)"},
    {"--stage-devices", "/stage_devices", Kind::kTexts, "Plan",
     "the accelerator of each pipeline stage on nodes that mix them, e.g. h100-sxm5-80gb,ascend-910b"},
    {"--stage-tp", "/stage_tp", Kind::kIntegers, "Plan",
     "tensor-parallel degree of each pipeline stage, e.g. --stage-tp 1,4,4,1 (each keeps tp*dp ranks)"},
    {"--recompute-layers", "/recompute_layers", Kind::kLayersOrAuto, "Plan",
     "block method: recompute only the first N layers of each stage (or chunk), auto: the fewest that fit; "
     "uniform method: the group size N"},
    {"--grad-compression", "/grad_compression", Kind::kText, "Plan",
     "none, int8, topk, powersgd, four-stage"},
    {"--compression-topk", "/compression_topk", Kind::kNumber, "Plan",
     "fraction of gradient elements top-k keeps (default 0.01)"},
    {"--compression-rank", "/compression_rank", Kind::kInteger, "Plan", "PowerSGD rank (default 4)"},
    {"--compression-penalty", "/compression_penalty", Kind::kNumber, "Plan",
     "extra steps to converge with compression, e.g. 0.03 (time to train)"},
};

std::optional<long long> parse_integer(const std::string& text) {
  long long v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<double> parse_number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<bool> parse_flag(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (text == "true" || text == "1" || text == "yes" || text == "on") return true;
  if (text == "false" || text == "0" || text == "no" || text == "off") return false;
  return std::nullopt;
}

// The text as the plan file would hold it; the validator below has checked its form.
json to_json(Kind kind, const std::string& text) {
  switch (kind) {
    case Kind::kInteger:
    case Kind::kIntegers:
      return *parse_integer(text);
    case Kind::kNumber:
      return *parse_number(text);
    case Kind::kFlag:
      return *parse_flag(text);
    case Kind::kLayersOrAuto:
      return text == "auto" ? json("auto") : json(*parse_integer(text));
    case Kind::kText:
    case Kind::kTexts:
      break;
  }
  return text;
}

// The form check of one value (its range is the plan reader's to check).
CLI::Validator form_of(Kind kind) {
  static const char* const kNames[] = {"INT", "NUMBER", "BOOL", "TEXT", "INT", "TEXT", "INT|auto"};
  return CLI::Validator(
      [kind](std::string& input) -> std::string {
        switch (kind) {
          case Kind::kInteger:
          case Kind::kIntegers:
            return parse_integer(input) ? "" : quote_excerpt(input) + " is not an integer";
          case Kind::kNumber:
            return parse_number(input) ? "" : quote_excerpt(input) + " is not a finite number";
          case Kind::kFlag:
            return parse_flag(input) ? "" : quote_excerpt(input) + " is not true or false";
          case Kind::kLayersOrAuto:
            return input == "auto" || parse_integer(input)
                       ? ""
                       : quote_excerpt(input) + " is not a layer count or auto";
          case Kind::kText:
          case Kind::kTexts:
            break;
        }
        return "";
      },
      kNames[static_cast<int>(kind)]);
}

void add_plan_flag(CLI::App& cmd, PlanOptions& o, const PlanFlag& f) {
  CLI::Option* opt = nullptr;
  if (f.kind == Kind::kIntegers || f.kind == Kind::kTexts) {
    opt = cmd.add_option_function<std::vector<std::string>>(
                 f.names,
                 [&o, f](const std::vector<std::string>& items) {
                   json list = json::array();
                   for (const std::string& item : items) list.push_back(to_json(f.kind, item));
                   o.set(f.pointer, std::move(list));
                 },
                 f.help)
              ->delimiter(',');
  } else {
    opt = cmd.add_option_function<std::string>(
        f.names, [&o, f](const std::string& text) { o.set(f.pointer, to_json(f.kind, text)); }, f.help);
  }
  opt->check(form_of(f.kind))->group(f.group);
}

// "command line: /global_batch: 0 is out of range" -> "--global-batch: 0 is out of range";
// "command line: /stage_tp/1: ..." -> "--stage-tp[1]: ...".
Error name_options(const Error& e) {
  const std::string& m = e.message();
  const std::string source = JobRequest{}.overrides_source + ": ";
  if (m.rfind(source, 0) != 0) return e;
  for (const PlanFlag& f : kPlanFlags) {
    const std::string field = source + f.pointer;
    if (m.rfind(field, 0) != 0) continue;
    std::string rest = m.substr(field.size());
    std::string name = f.names;
    name = name.substr(0, name.find(','));
    if (rest.rfind(":", 0) == 0) return Error(name + rest);
    if (rest.rfind("/", 0) == 0 && rest.find(':') != std::string::npos) {
      const std::size_t colon = rest.find(':');
      return Error(name + "[" + rest.substr(1, colon - 1) + "]" + rest.substr(colon));
    }
  }
  return e;
}

}  // namespace

bool PlanOptions::has(std::string_view pointer) const {
  return overrides.contains(json::json_pointer(std::string(pointer)));
}

std::optional<long long> PlanOptions::integer(std::string_view pointer) const {
  const json::json_pointer p{std::string(pointer)};
  if (!overrides.contains(p) || !overrides.at(p).is_number_integer()) return std::nullopt;
  return overrides.at(p).get<long long>();
}

std::optional<std::string> PlanOptions::text(std::string_view pointer) const {
  const json::json_pointer p{std::string(pointer)};
  if (!overrides.contains(p) || !overrides.at(p).is_string()) return std::nullopt;
  return overrides.at(p).get<std::string>();
}

void PlanOptions::set(std::string_view pointer, json value) {
  overrides[json::json_pointer(std::string(pointer))] = std::move(value);
}

void add_plan_options(CLI::App& cmd, PlanOptions& o) {
  cmd.add_option("--model,-m", o.model, "model preset name, model JSON, or Hugging Face config.json")
      ->capture_default_str();
  cmd.add_option("--cluster,-c", o.cluster, "cluster preset name or cluster JSON")->capture_default_str();
  cmd.add_option("--gpus,-g", o.gpus, "accelerators to use (default: tp*pp*dp*cp, else the whole cluster)")
      ->check(int_in(plan_range::kDegree));
  cmd.add_option("--plan,-p", o.plan_file, "plan JSON; the options below override its fields");
  for (const PlanFlag& f : kPlanFlags) add_plan_flag(cmd, o, f);
}

void apply_default_job(PlanOptions& o) {
  const PlanOptions untouched;
  const bool no_layout = o.plan_file.empty() && !o.gpus && !o.has("/tp") && !o.has("/pp") && !o.has("/dp") &&
                         !o.has("/cp") && !o.has("/ep");
  if (!no_layout || o.model != untouched.model || o.cluster != untouched.cluster) return;
  const JobRequest example = default_job_request();
  o.gpus = example.gpus;
  for (const auto& [field, value] : example.overrides.items())
    if (!o.overrides.contains(field)) o.overrides[field] = value;
}

Result<ResolvedInputs> resolve_inputs(const PlanOptions& o) {
  JobRequest r;
  r.model = o.model;
  r.cluster = o.cluster;
  r.gpus = o.gpus;
  r.plan_file = o.plan_file;
  r.overrides = o.overrides;
  r.model_label = "--model";
  r.cluster_label = "";
  r.gpus_label = "--gpus";
  r.fit_recompute_layers = [](const ModelSpec& m, const ClusterSpec& c, const Plan& p) {
    return fewest_recompute_layers(m, c, p);
  };
  auto job = resolve_job(r);
  if (!job) return name_options(job.error());
  return job;
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
