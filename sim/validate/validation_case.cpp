// Validation cases: load, fill unreported fields by the best-performing plan that fits, compare.
#include "sim/validate/validation_case.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>

#include "sim/analytic/analytic_model.h"
#include "sim/analytic/capacity.h"
#include "sim/des/simulator.h"
#include "sim/spec/interleavings.h"
#include "sim/spec/json_reader.h"
#include "sim/validate/error_band.h"
#include "sim/workload/workload.h"

namespace foresight {

using nlohmann::json;

namespace {

// /model: the architecture (version 2 adds norm, dropout and tied embeddings).
void read_case_model(JsonReader& r, ValidationCase& c) {
  JsonReader mr = r.object("model");
  if (c.schema == 2)
    mr.reject_unknown_keys({"name", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "mlp",
                            "vocab", "seq_len", "moe", "mla", "norm", "dropout", "tied_embeddings", "rope",
                            "parallel_block", "sliding_window"});
  else
    mr.reject_unknown_keys({"name", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "mlp",
                            "vocab", "seq_len", "moe"});
  ModelSpec& m = c.model;
  m.name = mr.string("name", c.id);
  m.layers = static_cast<int>(mr.required_integer("layers", 1, 100000));
  m.hidden = mr.required_integer("hidden", 1, 1 << 22);
  m.heads = static_cast<int>(mr.required_integer("heads", 1, 1 << 16));
  m.kv_heads = static_cast<int>(mr.integer("kv_heads", m.heads, 1, 1 << 16));
  m.head_dim = static_cast<int>(mr.integer("head_dim", m.heads > 0 ? m.hidden / m.heads : 1, 1, 1 << 16));
  m.ffn_hidden = mr.integer("ffn_hidden", 4 * m.hidden, 1, 1 << 24);
  const std::string mlp = mr.choice("mlp", {"gelu", "swiglu", "squared-relu"}, "gelu");
  m.mlp = mlp == "swiglu" ? MlpKind::kSwiglu : mlp == "squared-relu" ? MlpKind::kSquaredRelu : MlpKind::kGelu;
  m.norm = mr.choice("norm", {"layernorm", "rmsnorm"}, "layernorm") == "rmsnorm" ? NormKind::kRmsNorm
                                                                                 : NormKind::kLayerNorm;
  c.dropout = mr.optional_boolean("dropout");
  c.tied_embeddings = mr.optional_boolean("tied_embeddings");
  m.vocab = mr.required_integer("vocab", 1, 1 << 24);
  m.seq_len = static_cast<int>(mr.required_integer("seq_len", 1, 1 << 24));
  m.rope = mr.boolean("rope", false);
  m.parallel_block = mr.boolean("parallel_block", false);
  m.sliding_window = static_cast<int>(mr.integer("sliding_window", 0, 0, 1 << 24));
  if (mr.has("moe")) {
    JsonReader moe = mr.object("moe");
    m.moe.experts = static_cast<int>(moe.required_integer("experts", 1, 1 << 16));
    m.moe.top_k = static_cast<int>(moe.required_integer("top_k", 1, 1 << 16));
    m.moe.shared_experts = static_cast<int>(moe.integer("shared_experts", 0, 0, 1 << 10));
    m.moe.expert_ffn_hidden = moe.integer("expert_ffn_hidden", m.ffn_hidden, 1, 1 << 24);
    m.moe.dense_layers = static_cast<int>(moe.integer("dense_layers", 0, 0, 100000));
  }
  if (c.schema == 2 && mr.has("mla")) {  // DeepSeek's latent attention, as in model files
    JsonReader mla = mr.object("mla");
    m.mla = read_mla(mla);
  }
}

// /hardware as read: the GPU and what the case says of its system (null: the reference's).
struct CaseHardware {
  std::string gpu;
  int gpus = 0;
  std::optional<std::int64_t> per_node, nics;
  std::optional<double> nic_gbps;
  std::string fabric;
};

CaseHardware read_case_hardware(JsonReader& r) {
  JsonReader hr = r.object("hardware");
  hr.reject_unknown_keys({"gpu", "gpus", "gpus_per_node", "nics_per_node", "nic_gbps", "fabric"});
  CaseHardware h;
  h.gpu = hr.required_string("gpu");
  h.gpus = static_cast<int>(hr.required_integer("gpus", 1, 1 << 24));
  h.per_node = hr.optional_integer("gpus_per_node", 1, 1024);
  h.nics = hr.optional_integer("nics_per_node", 0, 1024);
  h.nic_gbps = hr.optional_number("nic_gbps", 0.001, 1e6);
  h.fabric = hr.choice("fabric", {"infiniband", "roce", "omnipath", "ethernet"}, "");
  return h;
}

// The GPU's reference system, adjusted to what the case reports and sized to its GPUs.
Status build_case_cluster(const CaseHardware& h, const std::string& file, ValidationCase& c) {
  auto device = load_device(h.gpu);
  if (!device)
    return Error(file + ": /hardware/gpu: unknown GPU \"" + h.gpu + "\" (" + device.error().message() + ")");
  if (device->reference_cluster.empty())
    return Error(file + ": /hardware/gpu: device \"" + h.gpu + "\" names no reference_cluster");
  auto cluster = load_cluster(device->reference_cluster);
  if (!cluster) return cluster.error().with_context(file + ": /hardware/gpu");
  c.cluster = std::move(cluster).value();
  NodeSpec& node = c.cluster.node;
  // The case's GPU in its reference system's node (a variant shares its reference's system).
  for (auto& g : node.devices)
    if (g.device.kind != DeviceKind::kCpu) {
      g.device = *device;
      if (h.per_node) g.count = static_cast<int>(*h.per_node);
      break;
    }
  if (h.nics) node.nics = static_cast<int>(*h.nics);
  if (h.nic_gbps) node.nic.bandwidth = *h.nic_gbps * 1e9 / 8;
  if (!h.fabric.empty()) {
    node.nic.kind = h.fabric;
    for (auto& t : c.cluster.tiers) t.kind = h.fabric == "ethernet" ? "ethernet" : h.fabric;
  }
  return resize_cluster(c.cluster, h.gpus, file + ": /hardware/gpus");
}

}  // namespace

Result<ValidationCase> validation_case_from_json(const json& doc, const std::string& file) {
  JsonReader r(doc, file);
  ValidationCase c;
  c.file = file;
  const std::string schema = r.string("schema", "foresight-validation-case/1");
  if (schema == "foresight-validation-case/2")
    c.schema = 2;
  else if (schema != "foresight-validation-case/1")
    r.fail("schema", "\"" + schema + "\" is not foresight-validation-case/1 or /2");
  if (c.schema == 2)
    r.reject_unknown_keys({"id", "model", "hardware", "parallel", "measured", "software"});
  else
    r.reject_unknown_keys({"id", "model", "hardware", "parallel", "measured"});
  c.id = r.required_string("id");
  c.source = r.string("source", "");
  if (c.schema == 2 && r.has("software")) {
    JsonReader sw = r.object("software");
    sw.reject_unknown_keys({"name", "version", "compile", "cuda_graphs"});
    c.software = sw.choice("name",
                           {"megatron-lm", "megatron-core", "megatron-deepspeed", "deepspeed", "nemo",
                            "megatron-bridge", "pytorch-fsdp", "torchtitan", "llm-foundry", "other"},
                           "");
    c.software_version = sw.string("version", "");
    c.compiled = sw.optional_boolean("compile");
    c.cuda_graphs = sw.optional_boolean("cuda_graphs");
  }
  read_case_model(r, c);
  const CaseHardware hardware = read_case_hardware(r);
  c.parallel = r.node().contains("parallel") ? r.node()["parallel"] : json::object();
  if (r.ok() && !c.parallel.is_object()) r.fail("parallel", "expected an object");
  JsonReader meas = r.object("measured");
  c.measured_step_s = meas.number("step_time_s", 0.0, 1e-9, 1e12);
  if (r.ok() && !meas.has("step_time_s")) meas.fail("step_time_s", "missing required field");
  c.measured_memory_gib = meas.number("peak_memory_gib", 0.0, 1e-3, 1e6);
  if (meas.string("memory_from", "").empty() && r.ok() && c.measured_memory_gib > 0)
    meas.fail("memory_from", "required with peak_memory_gib: what the source measured");
  if (!r.ok()) return r.error();
  FS_RETURN_IF_ERROR(validate_model(c.model, file));
  FS_RETURN_IF_ERROR(build_case_cluster(hardware, file, c));
  return c;
}

Result<ValidationCase> load_validation_case(const std::string& path) {
  FS_ASSIGN_OR_RETURN(json doc, read_json_file(path));
  return validation_case_from_json(doc, path);
}

namespace {

// What the software stack behind a published run could do, by its source. These are facts about
// the frameworks (not fitted numbers): a kernel that did not exist yet cannot have been used.
// Whether a stack overlaps a communication: never, always (by design), or as an option (an
// unreported option is chosen like any unreported field).
// What a stack could do with an option the case does not report: never, always, either (chosen
// like an unreported field), or only when asked for (off unless the case reports it: an opt-in
// that needs its own setup, which a run that does not mention it is taken not to have done).
enum class Can { kNo, kAlways, kOption, kOptIn };
struct SoftwareStack {
  std::string_view source_prefix;
  std::string_view name;
  bool flash_attention;        // fused attention kernel used
  bool sequence_parallel;      // Megatron sequence parallelism available
  bool dropout;                // dropout layers present in the trained model
  bool distributed_optimizer;  // ZeRO-1 style optimizer sharding available
  bool tied_embeddings;        // the output head is the input embedding's table
  // Schema version 2 only (version-1 cases keep the behaviour they were validated with):
  Can overlap_grad_reduce = Can::kNo;   // DP gradient reduction behind the backward
  Can overlap_param_gather = Can::kNo;  // ZeRO-1/2 parameter all-gather behind the next forward
  Can overlap_tp_comm = Can::kNo;       // TP collectives behind the GEMMs (userbuffers, async TP)
  bool fully_sharded = false;           // data parallelism is FSDP unless the case says otherwise
  bool uneven_stages = false;           // first/last stage layer counts and embedding/loss accounting
  // What the stack's "selective" recompute is: Megatron's attention core, or torchtitan's
  // op-level policy (selective_ac_option "op", the default of its selective mode's configs).
  Recompute selective = Recompute::kSelective;
  // Interleaved 1F1B's sends and receives overlapped with the chunks (Megatron's overlap_p2p_comm).
  bool overlap_p2p = false;
  // A pipelined run that reports no schedule ran 1F1B or interleaved 1F1B, whichever its
  // --num-layers-per-virtual-pipeline-stage made it (Megatron-LM since the SC'21 paper
  // introduced the interleaving, Megatron-Core, NeMo, Megatron-Bridge): both are offered, every
  // chunk count the layers allow. Not DeepSpeed's pipeline engine (1F1B only), nor torchtitan
  // (its own default, SoftwareStack::two_stages_per_rank).
  bool interleaving_option = false;
  // Full recompute of only the first N layers of each stage (Megatron's --recompute-num-layers
  // with the block method), which the Megatron family's recipes use where full recompute of
  // every layer is not needed to fit.
  bool partial_recompute = false;
  // Flash attention an option of the release (chosen like an unreported field), not fixed.
  bool flash_optional = false;
  // PyTorch eager unless the case says it compiled (torch.compile): the elementwise chains one
  // kernel per operator (Plan::kernel_fusion false). The Megatron family fuses its own.
  bool eager_unless_compiled = false;
  // With pipeline parallelism the gradients are reduced after the last backward, not beside it.
  bool pipeline_reduces_at_end = false;
  // Context parallelism gathers K and V whole (Plan::cp_comm): torchtitan's default
  // context_parallel_rotate_method, "allgather".
  bool cp_all_gather = false;
  // The published runs reduce (and keep) the gradients of a bf16/fp8 plan in bf16: NeMo's
  // launcher configs set optim.grad_sync_dtype: bf16 (e.g. conf/training/nemotron/
  // nemotron_340b.yaml), NeMo 2.x performance recipes set plugins.grad_reduce_in_fp32 = False, and
  // Megatron-Bridge's performance configs ddp.grad_reduce_in_fp32 = False. Megatron-LM itself
  // accumulates bf16 gradients in fp32 (--accumulate-allreduce-grads-in-fp32 forced with --bf16),
  // and torchtitan's FSDP2 reduces in fp32 (training.mixed_precision_reduce).
  bool grad_reduce_bf16 = false;
  // The attention kernel's class (Plan::attention_kernel). kFlash2: PyTorch SDPA's flash backend,
  // which PyTorch prefers to cuDNN's fused attention since 2.5.1 (pytorch/pytorch#138522 made
  // cuDNN opt-in; its default preference returns only with cuDNN newer than 9.15), and
  // llm-foundry's attn_impl "flash" (flash-attn 2). kFlash1: llm-foundry's attn_impl "triton"
  // (FlashAttention's Triton port, llmfoundry/models/layers/flash_attn_triton.py), the MPT yamls'
  // and the benchmark script's (scripts/train/benchmarking/submit_benchmarks.py, --attn_impl
  // default) setting until llm-foundry removed it (#1041, 2024-03-18); a case without a version
  // is taken to be of those 2023 tables. kBest: Hopper-native kernels
  // (cuDNN, FlashAttention-3) are Transformer Engine's, which the Megatron family runs.
  AttentionKernel attention = AttentionKernel::kBest;
  // Grouped-query K and V repeated to every query head before PyTorch SDPA (Plan::repeat_kv):
  // torchtitan's Llama attention called repeat_kv on them until pytorch/torchtitan#2259
  // ("GQA without kv repeats", 2026-01-27).
  bool repeat_kv = false;
  // ZeRO-3 as FSDP2 runs it (Plan::fsdp_copies): torchtitan shards with fully_shard (FSDP2) since
  // its first release; PyTorch FSDP scripts and llm-foundry (Composer) wrap with FSDP1's
  // FlatParameter, whose parameters are views of the gathered buffer.
  bool fsdp_copies = false;
  // The pipeline splits each step's local batch into as many micro-batches as it has ranks:
  // torchtitan's experimental.pipeline_parallel_microbatches defaulted to the pipeline degree
  // (torchtitan/parallelisms/pipeline_llama.py, 2024) before its 2025 configuration set a
  // micro-batch size instead.
  bool pp_microbatches_are_ranks = false;
  // An interleaved schedule whose stages per rank are not given runs 2 of them, the layers split
  // by torchtitan's generate_split_points: the first stage the quotient, the middle ones one
  // more while the remainder lasts, the last what is left.
  bool two_stages_per_rank = false;
  // MoE experts as Transformer Engine's GroupedLinear runs them (Plan::expert_gemm kPerExpert): a
  // cuBLAS GEMM and, in fp8, a quantisation per expert, each issued by the host. Megatron-Core's
  // TEGroupedMLP (moe_grouped_gemm with Transformer Engine, core 0.7 of 2024-06 on), which NeMo 2
  // and Megatron-Bridge run.
  bool per_expert_gemm = false;
  // Full activation checkpointing stops re-running once the backward's tensors exist
  // (Plan::recompute_early_stop): PyTorch's non-reentrant torch.utils.checkpoint from 2.1
  // (torch/utils/checkpoint.py, set_checkpoint_early_stop, on by default) and torch.compile (the
  // backward graph re-runs only what it reads). torchtitan (2024 on, PyTorch 2.3 and later);
  // llm-foundry's 2023-10 tables ran the mosaicml/pytorch:2.1.0_cu121 image
  // (scripts/train/benchmarking/sweep.sh at b2a43a147) with Composer's non-reentrant
  // checkpoint_wrapper (activation_checkpointing_reentrant false in the MPT yamls), and a
  // case without a version is taken to be of those tables; PyTorch FSDP from 2023-10 (PyTorch
  // 2.1.0 was released 2023-10-04). Megatron's and DeepSpeed's checkpoint functions are
  // reentrant and re-run the whole forward.
  bool checkpoint_early_stop = false;
  // The backward's TP all-reduce (with SP reduce-scatter) of the QKV and MLP-up input gradients
  // runs beside their weight gradients (Plan::overlap_tp_dgrad): Megatron-LM's asynchronous
  // tensor-model-parallel all-reduce, merged 2021-09 (slym/allreduce-overlap, after the SC'21
  // runs; on unless --no-async-tensor-model-parallel-allreduce), with sequence parallelism's
  // reduce-scatter from 2022 (LinearWithGradAccumulationAndAsyncCommunication), and Transformer
  // Engine's linear layers ("overlap dgrad-RS/AR with wgrad"), which Megatron-Core, NeMo and
  // Megatron-Bridge run. Not Megatron-DeepSpeed (forked before it), DeepSpeed or PyTorch's DTensor
  // TP, whose backward collectives wait in line.
  bool async_tp_dgrad = false;
  // The FP8 scaling recipe of a run that does not report one (Plan::fp8_recipe): Megatron-LM's
  // --fp8-recipe and NeMo's MegatronMixedPrecision default to delayed scaling, as Transformer
  // Engine does on Hopper; Megatron-Bridge's performance scripts offer only current scaling
  // (fp8_cs), MXFP8 and blockwise (scripts/performance/argument_parser.py, --compute_dtype);
  // torchtitan and PyTorch FSDP scripts scale with torchao's Float8, per tensor from the tensor's
  // own amax (tensorwise dynamic scaling) or per row.
  Fp8Recipe fp8_recipe = Fp8Recipe::kDelayed;
  // FP8 weights cast from their 16-bit copy at every use (Plan::fp8_weight_recast): torchao's
  // Float8Linear (torchtitan, PyTorch FSDP scripts) unless FSDP2's float8 all-gather
  // (torchtitan's float8.enable_fsdp_float8_all_gather, off by default) gathers them cast; the
  // Transformer Engine stacks cache them across micro-batches.
  bool fp8_weight_recast = false;
  // The gradient buckets of overlap_grad_reduce (Plan::grad_bucket_params), in parameters; 0: a
  // bucket per layer (a stack whose buckets are not known). Megatron-Core's default is 40M, and
  // from 2024-04-11 max(40M, 1M x dp) (megatron/core/distributed/distributed_data_parallel.py:
  // grad_bucket_grows_with_dp); NeMo 2's and Megatron-Bridge's communication-overlap configuration
  // set 128Mi where dp > 1 (_get_optimizer_overlap_cfgs); DeepSpeed's ZeRO-1/2 reduce_bucket_size
  // defaults to 5e8 elements.
  std::int64_t grad_bucket_params = 0;
  bool grad_bucket_grows_with_dp = false;
  // Megatron-Bridge's performance scripts set overlap_param_gather_with_optimizer_step where dp,
  // pp and vp are above 1 (scripts/performance/utils/helpers.py, 2025-10-14), which turns the
  // gradient buckets off (megatron/training: disable_bucketing for every chunk); from 2026-01-22
  // not with MXFP8 (overrides.py: "causes NaN grad norm for fp8_mx").
  enum class BucketsOff { kNever, kInterleaved, kInterleavedNotMxfp8 };
  BucketsOff buckets_off = BucketsOff::kNever;
  // The loss's kernels (Plan::cross_entropy). Megatron's vocab_parallel_cross_entropy runs a
  // pass per step unless --cross-entropy-loss-fusion (Megatron-Core, 2024-06-14; off by default
  // in its TransformerConfig to this day), so Megatron-LM, Megatron-Core and Megatron-DeepSpeed
  // runs that do not report it are unfused. NeMo 2's GPTConfig turns the native fusion on
  // (nemo/collections/llm/gpt/model/base.py, 2024-09-05), as do the NeMo 1 launcher's Llama
  // configs (cross_entropy_loss_fusion: true); Megatron-Bridge's GPTModelProvider too, and its
  // performance scripts pick Transformer Engine's one-pass kernel from 2025-11-06
  // (scripts/performance/utils/overrides.py: cross_entropy_fusion_impl = "te"). llm-foundry's
  // MPT trains with flash-attn's fused cross entropy (one pass); the PyTorch stacks run their own
  // (eager, or compiled into one pass).
  CrossEntropy cross_entropy = CrossEntropy::kOnePass;
};

// torchtitan's default split of `layers` over `stages` pipeline stages (generate_split_points).
std::vector<int> torchtitan_split(int layers, int stages) {
  const int base = layers / stages;
  int extra = layers % stages, used = base;
  std::vector<int> split{base};
  for (int i = 1; i + 1 < stages; ++i) {
    split.push_back(base + (extra > 0 ? 1 : 0));
    extra -= extra > 0 ? 1 : 0;
    used += split.back();
  }
  split.push_back(layers - used);
  return split;
}
constexpr SoftwareStack kSoftwareStacks[] = {
    // Megatron-LM, 2021: before FlashAttention (Dao et al., May 2022) and before sequence
    // parallelism (Korthikanti et al., May 2022); GPT models with dropout 0.1, whose output layer
    // multiplies by the word embeddings' weight (untying came later, as an opt-in flag).
    {.source_prefix = "Narayanan et al., SC'21",
     .name = "Megatron-LM 2021",
     .flash_attention = false,
     .sequence_parallel = false,
     .dropout = true,
     .distributed_optimizer = false,
     .tied_embeddings = true,
     .cross_entropy = CrossEntropy::kUnfused},
    // Megatron-LM, 2022: the paper that introduced selective recompute of the s^2 attention
    // activations -- the memory FlashAttention avoids -- so unfused attention; dropout 0.1. The
    // distributed optimizer (--use-distributed-optimizer) came to Megatron-LM later. Tied as above.
    {.source_prefix = "Korthikanti et al.",
     .name = "Megatron-LM 2022",
     .flash_attention = false,
     .sequence_parallel = true,
     .dropout = true,
     .distributed_optimizer = false,
     .tied_embeddings = true,
     .async_tp_dgrad = true,
     .cross_entropy = CrossEntropy::kUnfused},
    // Megatron-DeepSpeed for BLOOM (trained Mar-Jul 2022): fused scale-mask-softmax, no flash
    // attention; BLOOM's config sets hidden and attention dropout to 0.0 and ties its LM head to
    // the word embeddings.
    {.source_prefix = "bigscience-workshop",
     .name = "Megatron-DeepSpeed 2022",
     .flash_attention = false,
     .sequence_parallel = false,
     .dropout = false,
     .distributed_optimizer = true,
     .tied_embeddings = true,
     .cross_entropy = CrossEntropy::kUnfused},
    // llm-foundry benchmarks (2023): MPT with attn_impl "triton" (the benchmark script's default
    // then; see SoftwareStack::attention) and no dropout; its SharedEmbedding serves as the output
    // layer (weight tying).
    {.source_prefix = "mosaicml/llm-foundry",
     .name = "llm-foundry 2023",
     .flash_attention = true,
     .sequence_parallel = false,
     .dropout = false,
     .distributed_optimizer = true,
     .tied_embeddings = true,
     .attention = AttentionKernel::kFlash1,
     .checkpoint_early_stop = true},
};

const SoftwareStack* software_for(const std::string& source) {
  for (const auto& s : kSoftwareStacks)
    if (source.starts_with(s.source_prefix)) return &s;
  return nullptr;
}

// Schema version 2: what each stack (/software/name) could do, by release. Facts from the
// frameworks' documentation and source:
// - Megatron-LM before May 2022 and in 2022 as above. From 2023 Megatron-LM offers flash
//   attention, and its overlap options as each was merged (software_v2 lists the dates); every
//   Megatron-Core release, NeMo 1.x/2.x and Megatron-Bridge runs fused attention (flash-attn or
//   Transformer Engine), sequence parallelism, the distributed optimizer and the options
//   --overlap-grad-reduce, --overlap-param-gather and --tp-comm-overlap; Megatron-Core's
//   --num-layers-in-first/last-pipeline-stage and --account-for-embedding/loss-in-pipeline-split
//   date from 2024. Megatron's GPT defaults keep dropout 0.1 and tie the output layer; NeMo and
//   Megatron-Bridge recipes (Llama, Mixtral, Nemotron) train without dropout and untied. With
//   virtual stages all of them overlap the pipeline's sends and receives with the chunks
//   (overlap_p2p_comm: Megatron-LM's --no-overlap-p2p-communication turns it off, the NeMo and
//   Megatron-Bridge overlap configuration turns it on whenever virtual stages are used).
//   --tp-comm-overlap is an opt-in (Can::kOptIn) outside NeMo and Megatron-Bridge, whose
//   performance recipes set it where tp > 1; so is torchtitan's async TP, and TP overlap on a
//   stack that is not named.
// - DeepSpeed and Megatron-DeepSpeed: ZeRO (optimizer sharding) and `overlap_comm` of the
//   gradient reduction as an option, but not with pipeline parallelism (its pipeline engine
//   reduces after the last backward); no sequence parallelism or TP overlap; flash attention from
//   mid-2023. A version given as a bare year ("2021") counts as that year's middle.
// - PyTorch FSDP and torchtitan: data parallelism fully sharded, parameters prefetched and
//   gradients reduce-scattered behind the compute by design, SDPA flash attention; torchtitan's
//   TP always shards the norms' sequence (sequence parallel) and offers async TP.
// - llm-foundry: FSDP with flash/triton attention, MPT's tied embedding, no dropout.
// Over 80 lines, on purpose: it is the table above as code, one block per stack, each fact beside
// the release that brought it; split by stack, the dates would no longer read side by side.
SoftwareStack software_v2(const std::string& name, const std::string& version) {
  // "24.07" (a release, YY.MM) or "2023-06" (year-month): months since year 0; 0 when not given.
  // A bare year ("2021") is taken as its middle month.
  int month = 0;
  int a = 0, b = 0;
  char sep = 0;
  const int fields = std::sscanf(version.c_str(), "%d%c%d", &a, &sep, &b);
  // A library's semantic version ("0.9", Megatron-Core's) is not a date: only YY.MM from 2015 on.
  const int released = a < 100 ? 2000 + a : a;
  if (fields == 3 && (sep == '.' || sep == '-') && b >= 1 && b <= 12 && released >= 2015)
    month = released * 12 + (b - 1);
  else if (fields == 1 && a >= 1990 && a <= 2200 &&
           version.find_first_not_of("0123456789") == std::string::npos)
    month = a * 12 + 5;
  const auto before = [&](int year, int mon) { return month > 0 && month < year * 12 + (mon - 1); };
  SoftwareStack s{"", "", true, true, true, true, true};
  s.overlap_grad_reduce = s.overlap_param_gather = s.overlap_tp_comm = Can::kOption;
  s.uneven_stages = true;
  s.overlap_p2p = true;
  s.interleaving_option = true;
  s.partial_recompute = true;
  if (name == "megatron-lm" && before(2023, 1)) {
    SoftwareStack v = kSoftwareStacks[before(2022, 5) ? 0 : 1];
    if (before(2022, 5)) v.async_tp_dgrad = !before(2021, 9);
    v.interleaving_option = true;  // the SC'21 paper's schedule
    return v;
  }
  if (name == "megatron-lm" || name == "megatron-core") {
    s.name = name == "megatron-lm" ? "Megatron-LM 2023+" : "Megatron-Core";
    s.uneven_stages = !before(2024, 1);
    // Megatron-LM's options by the date they were merged (its git history): --use-flash-attn
    // 2023-01-11, --overlap-p2p-communication 2023-05-31, --overlap-grad-reduce 2023-09-05,
    // --tp-comm-overlap 2023-10-23, --overlap-param-gather 2023-12-26.
    if (name == "megatron-lm") {
      s.flash_optional = before(2023, 6);
      // --use-flash-attn called FlashAttention 1's flash_attn_unpadded_func until Megatron-LM
      // took FlashAttention 2's flash_attn_varlen_func (2023-07-19, 1a03e5d087; FlashAttention
      // 2 itself was released 2023-07-17).
      if (before(2023, 7)) s.attention = AttentionKernel::kFlash1;
      s.overlap_p2p = !before(2023, 6);
      if (before(2023, 9)) s.overlap_grad_reduce = Can::kNo;
      if (before(2023, 11)) s.overlap_tp_comm = Can::kNo;
      if (before(2024, 1)) s.overlap_param_gather = Can::kNo;
    }
    s.grad_bucket_params = 40'000'000;
    s.grad_bucket_grows_with_dp = name != "megatron-lm" || !before(2024, 4);
    // --tp-comm-overlap is off unless given (store_true) and needs Transformer Engine's userbuffers
    // with their own bootstrap and per-GEMM configuration; NeMo and Megatron-Bridge set it in their
    // performance recipes, Megatron-LM's own scripts do not.
    if (s.overlap_tp_comm == Can::kOption) s.overlap_tp_comm = Can::kOptIn;
    s.per_expert_gemm = !before(2024, 6);
    s.async_tp_dgrad = true;
    s.cross_entropy = CrossEntropy::kUnfused;
    return s;
  }
  if (name == "nemo" || name == "megatron-bridge") {
    s.name = name == "nemo" ? "NeMo" : "Megatron-Bridge";
    s.dropout = s.tied_embeddings = false;
    if (name == "megatron-bridge") s.fp8_recipe = Fp8Recipe::kCurrent;
    // NeMo 1 (the launcher's Hydra configs, to 24.11) reduced through Apex's DistributedFusedAdam
    // with its own buckets: not modelled (a bucket per layer). NeMo 2's performance recipes
    // (25.x) and Megatron-Bridge build Megatron-Core's DDP with 128Mi buckets.
    if (name == "megatron-bridge" || (month > 0 && !before(2025, 1)))
      s.grad_bucket_params = 128 * 1024 * 1024;
    if (name == "megatron-bridge" && month > 0 && !before(2025, 10))
      s.buckets_off = before(2026, 1) ? SoftwareStack::BucketsOff::kInterleaved
                                      : SoftwareStack::BucketsOff::kInterleavedNotMxfp8;
    s.grad_reduce_bf16 = true;
    s.per_expert_gemm = true;
    s.async_tp_dgrad = true;
    s.cross_entropy = name == "megatron-bridge" && month > 0 && !before(2025, 11) ? CrossEntropy::kOnePass
                                                                                  : CrossEntropy::kJitFused;
    return s;
  }
  if (name == "deepspeed" || name == "megatron-deepspeed") {
    s.name = name == "deepspeed" ? "DeepSpeed" : "Megatron-DeepSpeed";
    s.flash_attention = !before(2023, 6);
    s.sequence_parallel = false;
    s.dropout = s.tied_embeddings = name == "megatron-deepspeed";
    s.overlap_param_gather = s.overlap_tp_comm = Can::kNo;
    s.pipeline_reduces_at_end = true;
    s.grad_bucket_params = 500'000'000;
    if (name == "megatron-deepspeed") s.cross_entropy = CrossEntropy::kUnfused;
    s.uneven_stages = false;
    s.overlap_p2p = s.partial_recompute = s.interleaving_option = false;
    return s;
  }
  if (name == "pytorch-fsdp" || name == "torchtitan" || name == "llm-foundry") {
    s.name = name == "pytorch-fsdp" ? "PyTorch FSDP" : name == "torchtitan" ? "torchtitan" : "llm-foundry";
    s.sequence_parallel = name == "torchtitan";
    s.dropout = false;
    s.tied_embeddings = name == "llm-foundry";
    s.overlap_grad_reduce = s.overlap_param_gather = Can::kAlways;
    // torchtitan's async TP: experimental.enable_async_tensor_parallel, off by default, and only
    // with torch.compile.
    s.overlap_tp_comm = name == "torchtitan" ? Can::kOptIn : Can::kNo;
    if (name == "torchtitan") s.selective = Recompute::kSelectiveOp;
    s.cp_all_gather = name == "torchtitan";
    if (name != "llm-foundry") {  // torchao's Float8 (llm-foundry runs Transformer Engine)
      s.fp8_recipe = Fp8Recipe::kCurrent;
      s.fp8_weight_recast = true;
    }
    s.attention = name == "llm-foundry" && (month == 0 || before(2024, 3)) ? AttentionKernel::kFlash1
                                                                           : AttentionKernel::kFlash2;
    s.repeat_kv = name == "torchtitan" && (month == 0 || before(2026, 2));
    s.fsdp_copies = name == "torchtitan";
    s.checkpoint_early_stop = name == "torchtitan" || (name == "llm-foundry" && !before(2023, 10)) ||
                              (name == "pytorch-fsdp" && month > 0 && !before(2023, 10));
    s.pp_microbatches_are_ranks = name == "torchtitan" && month > 0 && before(2025, 1);
    s.two_stages_per_rank = name == "torchtitan";
    // torchtitan's compile.enable and plain FSDP scripts default to eager; llm-foundry's MPT
    // runs its own fused kernels.
    s.eager_unless_compiled = name != "llm-foundry";
    s.fully_sharded = true;
    s.uneven_stages = false;
    s.overlap_p2p = s.partial_recompute = s.interleaving_option = false;
    return s;
  }
  s.name = "";  // "other" or not reported: nothing is known
  s.overlap_p2p = s.partial_recompute = s.interleaving_option = false;
  return s;
}

std::vector<int> divisors_up_to(std::int64_t n, int limit) {
  std::vector<int> out;
  for (int d = 1; d <= limit && d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// One unreported field: its name and the values to try, as (JSON value, apply) pairs.
struct Choice {
  std::string field;
  std::vector<std::pair<json, std::function<void(Plan&)>>> options;
};

// The plan a case reports (`base`), the model as its software trained it, and the values to try
// for the fields the case leaves out.
struct CaseLayouts {
  Plan base;
  ModelSpec model;
  std::vector<Choice> choices;
  // An unreported recompute may also be full recompute of the fewest layers per stage that fit
  // (SoftwareStack::partial_recompute).
  bool partial_recompute = false;
};

// The parallel degrees and the global batch.
void read_degrees(JsonReader& r, Plan& base) {
  base.tp = static_cast<int>(r.integer("tp", 1, 1, 1 << 20));
  base.pp = static_cast<int>(r.integer("pp", 1, 1, 1 << 20));
  base.dp = static_cast<int>(r.integer("dp", 1, 1, 1 << 20));
  base.cp = static_cast<int>(r.integer("cp", 1, 1, 1 << 20));
  base.ep = static_cast<int>(r.integer("ep", 1, 1, 1 << 20));
  base.global_batch = r.required_integer("global_batch", 1, std::int64_t{1} << 40);
}

// The attention kernel is not a field of the schema: known stacks fix it (and the model's dropout
// and tied embeddings), otherwise it is chosen like an unreported field. Sequence parallelism:
// reported, else impossible on the stack, else chosen where tp > 1.
void read_software(const SoftwareStack* stack, JsonReader& r, CaseLayouts& l, CaseResult& out) {
  if (stack) {
    l.model.dropout = stack->dropout;
    l.model.tied_embeddings = stack->tied_embeddings;
    out.assumed.update(json{
        {"software", stack->name}, {"dropout", stack->dropout}, {"tied_embeddings", stack->tied_embeddings}});
  }
  if (stack && !stack->flash_optional) {
    l.base.flash_attention = stack->flash_attention;
    out.assumed["flash_attention"] = stack->flash_attention;
  } else {
    l.choices.push_back({"flash_attention",
                         {{true, [](Plan& p) { p.flash_attention = true; }},
                          {false, [](Plan& p) { p.flash_attention = false; }}}});
  }
  auto opt_bool = r.optional_boolean("sequence_parallel");
  if (opt_bool) {
    l.base.sequence_parallel = *opt_bool;
  } else if (stack && !stack->sequence_parallel) {
    l.base.sequence_parallel = false;
    out.assumed["sequence_parallel"] = false;
  } else if (l.base.tp > 1) {
    l.choices.push_back({"sequence_parallel",
                         {{false, [](Plan& p) { p.sequence_parallel = false; }},
                          {true, [](Plan& p) { p.sequence_parallel = true; }}}});
  }
}

// The schedule, and its virtual stages: reported, or for an interleaved schedule chosen among
// the chunk counts that divide the layers.
void read_schedule(const ValidationCase& c, JsonReader& r, const SoftwareStack* stack, CaseLayouts& l,
                   CaseResult& out) {
  Plan& base = l.base;
  const std::string sched = r.string("schedule", "");
  if (!sched.empty()) {
    auto s = parse_schedule(sched);
    if (!s)
      r.fail("schedule", s.error().message());
    else
      base.schedule = *s;
  }
  if (auto v = r.optional_integer("virtual_stages", 1, 1024)) {
    base.virtual_stages = static_cast<int>(*v);
  } else if (base.schedule == Schedule::kInterleaved1F1B && base.pp > 1 && stack &&
             stack->two_stages_per_rank && c.model.layers >= 2 * base.pp) {
    base.virtual_stages = 2;
    if (c.model.layers % (2 * base.pp) != 0) base.layer_split = torchtitan_split(c.model.layers, 2 * base.pp);
    out.assumed["virtual_stages"] = 2;
  } else if (base.pp > 1 && (base.schedule == Schedule::kInterleaved1F1B ||
                             (sched.empty() && stack && stack->interleaving_option))) {
    // Every interleaving of the layers, evenly or (stacks with uneven stages) with the first/last
    // chunk short as Megatron-Core lays them out; a split the case states stays. One chunk per
    // rank is plain 1F1B.
    Choice ch{"virtual_stages", {}};
    if (c.model.layers % base.pp == 0) ch.options.push_back({1, [](Plan& p) { p.virtual_stages = 1; }});
    const bool uneven = !stack || stack->uneven_stages;  // the first/last chunk short
    for (const auto& option : interleavings(c.model.layers, base.pp, 64)) {
      const int chunks = option.first;
      const std::vector<int> split = option.second;  // named copies: clang 14 cannot capture bindings
      if (uneven || split.empty())
        ch.options.push_back({chunks, [chunks, split](Plan& p) {
                                p.virtual_stages = chunks;
                                p.schedule = Schedule::kInterleaved1F1B;
                                if (p.layer_split.empty()) p.layer_split = split;
                              }});
    }
    l.choices.push_back(ch);
  }
}

// The micro-batch, ZeRO stage and recompute (each reported, fixed by the stack or chosen) and the
// precision.
void read_memory_fields(JsonReader& r, const SoftwareStack* stack, CaseLayouts& l, CaseResult& out) {
  Plan& base = l.base;
  const std::int64_t local = base.global_batch / base.dp;
  if (auto mb = r.optional_integer("micro_batch", 1, 1 << 20)) {
    base.micro_batch = static_cast<int>(*mb);
  } else if (stack && stack->pp_microbatches_are_ranks && base.pp > 1 && local % base.pp == 0) {
    base.micro_batch = static_cast<int>(local / base.pp);
    out.assumed["micro_batch"] = base.micro_batch;
  } else {
    Choice ch{"micro_batch", {}};
    for (int b : divisors_up_to(local, 64)) ch.options.push_back({b, [b](Plan& p) { p.micro_batch = b; }});
    l.choices.push_back(ch);
  }
  if (auto z = r.optional_integer("zero_stage", 0, 3)) {
    base.zero_stage = static_cast<int>(*z);
  } else if (stack && stack->fully_sharded) {
    base.zero_stage = 3;
    out.assumed["zero_stage"] = 3;
  } else if (stack && !stack->distributed_optimizer) {
    base.zero_stage = 0;
    out.assumed["zero_stage"] = 0;
  } else if (base.dp * base.cp > 1) {
    l.choices.push_back(
        {"zero_stage", {{0, [](Plan& p) { p.zero_stage = 0; }}, {1, [](Plan& p) { p.zero_stage = 1; }}}});
  }
  const std::string rc = r.string("recompute", "");
  if (!rc.empty()) {
    auto parsed = parse_recompute(rc);
    if (!parsed) r.fail("recompute", parsed.error().message());
    // Schema version 2: the modules a selective recompute drops (Megatron-Core's
    // --recompute-modules; DeepSeek-V3's norms and MLA up-projections): they name what the
    // stack's selective is. validate_plan checks them with the plan.
    read_recompute_modules(r, base.recompute_modules);
    if (parsed)
      base.recompute = *parsed == Recompute::kSelective && stack && base.recompute_modules.empty()
                           ? stack->selective
                           : *parsed;
  } else {
    const Recompute selective = stack ? stack->selective : Recompute::kSelective;
    l.partial_recompute = stack && stack->partial_recompute;
    l.choices.push_back({"recompute",
                         {{"none", [](Plan& p) { p.recompute = Recompute::kNone; }},
                          {to_string(selective), [selective](Plan& p) { p.recompute = selective; }},
                          {"full", [](Plan& p) { p.recompute = Recompute::kFull; }}}});
  }
  const std::string prec = r.string("precision", "bf16");
  if (auto v = parse_precision(prec); v)
    base.precision = *v;
  else
    r.fail("precision", v.error().message());
}

// Schema version 2: an overlap option, reported, fixed by the stack, or chosen.
void read_overlap(JsonReader& r, std::string_view key, Can can, bool relevant, bool Plan::*flag,
                  CaseLayouts& l, CaseResult& out) {
  if (auto v = r.optional_boolean(key)) {
    l.base.*flag = *v;
  } else if (can == Can::kAlways || can == Can::kNo || can == Can::kOptIn) {
    l.base.*flag = can == Can::kAlways;
    if (relevant) out.assumed[std::string(key)] = l.base.*flag;
  } else if (relevant) {
    l.choices.push_back(
        {std::string(key),
         {{false, [flag](Plan& p) { p.*flag = false; }}, {true, [flag](Plan& p) { p.*flag = true; }}}});
  }
}

// Schema version 2: the pipeline's stage sizes when they are uneven (Megatron-Core's
// --num-layers-in-first/last-pipeline-stage, or the embedding and the loss counted as layers).
void read_uneven_stages(const ValidationCase& c, JsonReader& r, const SoftwareStack* stack, CaseLayouts& l) {
  const auto first = r.optional_integer("first_stage_layers", 0, c.model.layers);
  const auto last = r.optional_integer("last_stage_layers", 0, c.model.layers);
  const int embedding = r.boolean("account_for_embedding", false) ? 1 : 0;
  const int loss = r.boolean("account_for_loss", false) ? 1 : 0;
  if (!first && !last && embedding + loss == 0) return;
  Plan& base = l.base;
  const std::string key = first || last ? (first ? "first_stage_layers" : "last_stage_layers")
                                        : (embedding ? "account_for_embedding" : "account_for_loss");
  if (stack && !stack->uneven_stages)
    return r.fail(key, std::string(stack->name) + " could not split pipeline stages unevenly");
  if (base.pp < 2) return r.fail(key, "needs pp >= 2");
  if ((first || last) && embedding + loss > 0)
    return r.fail(key,
                  "cannot be combined with account_for_embedding/account_for_loss (Megatron-Core "
                  "refuses both at once)");
  // Interleaved: Megatron-Core splits each stage's layers evenly over its vp model chunks; the
  // embedding (loss) takes a layer's place in the first (last) chunk of the first (last) stage
  // (get_num_layers_to_build, megatron/core/transformer/transformer_block.py).
  const int vp = base.virtual_stages;
  if (vp == 1 && base.schedule == Schedule::kInterleaved1F1B)
    return r.fail(key, "uneven stages need virtual_stages for an interleaved schedule");
  const int layers = c.model.layers, pp = base.pp;
  auto per_chunk = [&](int stage_layers, const std::string& what) -> std::optional<int> {
    if (stage_layers % vp == 0) return stage_layers / vp;
    r.fail(key, what + " (" + std::to_string(stage_layers) +
                    " layers) do not divide over virtual_stages = " + std::to_string(vp) + " chunks");
    return std::nullopt;
  };
  std::vector<int> stage(pp, 0);  // layers of each chunk of each stage (every chunk of a stage alike)
  if (first || last) {
    // The stages not named share the rest evenly (Megatron-Core requires that they can).
    const int fixed = (first ? 1 : 0) + (last ? 1 : 0);
    const int rest = layers - static_cast<int>(first.value_or(0) + last.value_or(0));
    if (pp - fixed < 1 || rest < 0 || rest % (pp - fixed) != 0)
      return r.fail(key, "the other " + std::to_string(layers) + " - " +
                             std::to_string(first.value_or(0) + last.value_or(0)) +
                             " layers do not divide over " + std::to_string(pp - fixed) + " stages");
    std::fill(stage.begin(), stage.end(), rest / (pp - fixed));
    if (first) stage.front() = static_cast<int>(*first);
    if (last) stage.back() = static_cast<int>(*last);
    if (vp > 1) {
      const auto middle = per_chunk(rest / (pp - fixed), "the middle stages' layers");
      const auto head = per_chunk(stage.front(), "the first stage's layers");
      const auto tail = per_chunk(stage.back(), "the last stage's layers");
      if (!middle || !head || !tail) return;
    }
  } else {
    if ((layers + embedding + loss) % pp != 0)
      return r.fail(key, std::to_string(layers) +
                             " layers with the embedding/loss counted do not divide over " +
                             std::to_string(pp) + " stages");
    if (vp > 1 && !per_chunk((layers + embedding + loss) / pp, "each stage's layers with the embedding/loss"))
      return;
    std::fill(stage.begin(), stage.end(), (layers + embedding + loss) / pp);
  }
  // Chunk c of stage s is model chunk c*pp + s.
  std::vector<int> split(static_cast<std::size_t>(pp * vp), 0);
  for (int chunk = 0; chunk < vp; ++chunk)
    for (int st = 0; st < pp; ++st) split[static_cast<std::size_t>(chunk * pp + st)] = stage[st] / vp;
  split.front() -= embedding;
  split.back() -= loss;
  if (split.front() < 0 || split.back() < 0)
    return r.fail(key, "leaves the " + std::string(split.front() < 0 ? "first" : "last") +
                           " chunk fewer than 0 layers");
  base.layer_split = split;
}

// Schema version 2: the stack's overlaps, the gradient reduction's type, the FP8 recipe and uneven
// stages.
void read_v2_fields(const ValidationCase& c, JsonReader& r, const SoftwareStack* stack, CaseLayouts& l,
                    CaseResult& out) {
  const Plan& b = l.base;
  const bool dp = b.dp * b.cp > 1;
  // DeepSpeed's pipeline engine all-reduces the gradients after the step's last backward
  // (PipelineEngine's ReduceGrads instruction), whatever overlap_comm says.
  const Can grad_reduce = !stack                                       ? Can::kOption
                          : stack->pipeline_reduces_at_end && b.pp > 1 ? Can::kNo
                                                                       : stack->overlap_grad_reduce;
  read_overlap(r, "overlap_grad_reduce", grad_reduce, dp, &Plan::overlap_grad_reduce, l, out);
  read_overlap(r, "overlap_param_gather", stack ? stack->overlap_param_gather : Can::kOption, dp,
               &Plan::overlap_param_gather, l, out);
  // TP overlap on an unnamed stack: an opt-in everywhere it exists (see software_v2).
  read_overlap(r, "overlap_tp_comm", stack ? stack->overlap_tp_comm : Can::kOptIn, b.tp > 1,
               &Plan::overlap_tp_comm, l, out);
  // Merged forward/backward pairs hiding the expert all-to-alls: opt-in wherever they exist
  // (Megatron-Core's --overlap-moe-expert-parallel-comm is off by default; Megatron-Bridge's
  // recipes set it per model and GPU; DualPipe's overlap needs the model's own overlapped code).
  read_overlap(r, "overlap_ep_comm", Can::kOptIn, c.model.moe.experts > 0 && b.ep > 1, &Plan::overlap_ep_comm,
               l, out);
  // Pipeline sends beside the chunks: reported (a recipe's overlap_p2p_comm), else the stack's
  // default (it applies with virtual stages only).
  const bool p2p = stack && stack->overlap_p2p;
  read_overlap(r, "overlap_p2p_comm", p2p ? Can::kAlways : Can::kNo, p2p && b.pp > 1, &Plan::overlap_p2p_comm,
               l, out);
  const std::string state = r.choice("optimizer_state_precision", {"fp32", "bf16"}, "fp32");
  if (r.ok()) l.base.optimizer_state_precision = *parse_precision(state);
  const std::string grad = r.choice("grad_reduce_precision", {"fp32", "bf16", "fp16"}, "");
  if (!grad.empty()) {
    l.base.grad_reduce_precision = *parse_precision(grad);
  } else if (stack && stack->grad_reduce_bf16 && b.precision != Precision::kFp16 &&
             b.precision != Precision::kFp32) {
    l.base.grad_reduce_precision = Precision::kBf16;
    out.assumed["grad_reduce_precision"] = "bf16";
  }
  // Context parallelism's K/V exchange: reported, else the stack's (torchtitan all-gathers), else
  // Megatron's ring.
  const std::string cp_comm = r.choice("cp_comm", {"ring", "all-gather"}, "");
  if (!cp_comm.empty()) {
    l.base.cp_comm = *parse_cp_comm(cp_comm);
  } else if (stack && stack->cp_all_gather && b.cp > 1) {
    l.base.cp_comm = CpComm::kAllGather;
    out.assumed["cp_comm"] = "all-gather";
  }
  // MoE token drop with padding (Plan::moe_capacity_factor); absent: dropless.
  if (r.has("moe_capacity_factor")) {
    l.base.moe_capacity_factor = r.number("moe_capacity_factor", 0.0, 0.01, 64.0);
    if (r.ok() && !l.model.is_moe()) r.fail("moe_capacity_factor", "needs an MoE model (model.moe)");
  }
  const std::string recipe =
      r.choice("fp8_recipe", {"delayed", "current", "blockwise", "mxfp8", "rowwise"}, "");
  if (!recipe.empty() && b.precision != Precision::kFp8) r.fail("fp8_recipe", "needs precision fp8");
  // The scaling recipe: reported, else the stack's (SoftwareStack::fp8_recipe).
  if (!recipe.empty()) {
    l.base.fp8_recipe = *parse_fp8_recipe(recipe);
  } else if (stack && b.precision == Precision::kFp8) {
    l.base.fp8_recipe = stack->fp8_recipe;
    out.assumed["fp8_recipe"] = to_string(stack->fp8_recipe);
  }
  // Weights gathered already in FP8 (FSDP2's float8 all-gather, Megatron's --fp8-param-gather):
  // no per-use casts; otherwise the stack's (SoftwareStack::fp8_weight_recast).
  const bool fp8_gather = r.boolean("fp8_param_gather", false);
  if (fp8_gather && b.precision != Precision::kFp8) r.fail("fp8_param_gather", "needs precision fp8");
  if (stack && stack->fp8_weight_recast && b.precision == Precision::kFp8 && !fp8_gather) {
    l.base.fp8_weight_recast = true;
    out.assumed["fp8_weight_recast"] = true;
  }
  read_uneven_stages(c, r, stack, l);
  // The buckets matter where the reduction can overlap the backward (reported, the stack's, or
  // chosen) and is not ZeRO-3's, which reduces a layer at a time.
  const bool overlap_possible =
      b.overlap_grad_reduce || std::any_of(l.choices.begin(), l.choices.end(), [](const Choice& ch) {
        return ch.field == "overlap_grad_reduce";
      });
  if (stack && stack->grad_bucket_params != 0 && b.dp * b.cp > 1 && overlap_possible && b.zero_stage < 3) {
    std::int64_t size = stack->grad_bucket_params;
    if (stack->grad_bucket_grows_with_dp) size = std::max<std::int64_t>(size, std::int64_t{1'000'000} * b.dp);
    // Buckets off (SoftwareStack::buckets_off) where pp and vp are above 1: one bucket a chunk.
    const bool mxfp8 = b.precision == Precision::kFp8 && b.fp8_recipe == Fp8Recipe::kMxfp8;
    using Off = SoftwareStack::BucketsOff;
    if (b.pp > 1 && b.virtual_stages > 1 &&
        (stack->buckets_off == Off::kInterleaved ||
         (stack->buckets_off == Off::kInterleavedNotMxfp8 && !mxfp8)))
      size = plan_range::kGradBucketParams.max;
    l.base.grad_bucket_params = size;
    out.assumed["grad_bucket_params"] = size;
  }
}

// The case's own model facts, where it states them, over the stack's usual ones; the kernels
// the stack runs (PyTorch eager unless compiled, its attention kernel).
void apply_case_facts(const ValidationCase& c, const SoftwareStack* stack, CaseLayouts& l, CaseResult& out) {
  if (c.dropout) {
    l.model.dropout = *c.dropout;
    out.assumed.erase("dropout");
  }
  if (c.tied_embeddings) {
    l.model.tied_embeddings = *c.tied_embeddings;
    out.assumed.erase("tied_embeddings");
  }
  if (stack && !c.software_version.empty()) out.assumed["software_version"] = c.software_version;
  if (c.cuda_graphs) l.base.cuda_graphs = *c.cuda_graphs;
  if (stack && stack->eager_unless_compiled) {
    l.base.kernel_fusion = c.compiled.value_or(false);
    out.assumed["kernel_fusion"] = l.base.kernel_fusion;
  }
  if (stack && stack->attention != AttentionKernel::kBest && l.base.flash_attention) {
    l.base.attention_kernel = stack->attention;
    out.assumed["attention_kernel"] = to_string(stack->attention);
  }
  if (stack && stack->cross_entropy != CrossEntropy::kOnePass && l.base.kernel_fusion) {
    l.base.cross_entropy = stack->cross_entropy;
    out.assumed["cross_entropy"] = to_string(stack->cross_entropy);
  }
  if (stack && stack->repeat_kv && l.model.kv_heads < l.model.heads) {
    l.base.repeat_kv = true;
    out.assumed["repeat_kv"] = true;
  }
  if (stack && stack->fsdp_copies) {
    l.base.fsdp_copies = true;
    out.assumed["fsdp_copies"] = true;
  }
  if (stack && stack->checkpoint_early_stop) {
    l.base.recompute_early_stop = true;
    out.assumed["recompute_early_stop"] = true;
  }
  if (stack && stack->async_tp_dgrad && l.base.tp > 1) {
    l.base.overlap_tp_dgrad = true;
    out.assumed["overlap_tp_dgrad"] = true;
  }
  if (stack && stack->per_expert_gemm && l.model.is_moe()) {
    l.base.expert_gemm = ExpertGemm::kPerExpert;
    out.assumed["expert_gemm"] = to_string(ExpertGemm::kPerExpert);
  }
}

// Reads the case's /parallel into `l`; false (out.failure says why) on a bad field.
bool read_case_layouts(const ValidationCase& c, CaseLayouts& l, CaseResult& out) {
  JsonReader r(c.parallel, c.file, "/parallel");
  if (c.schema == 2)
    r.reject_unknown_keys({"tp",
                           "pp",
                           "dp",
                           "cp",
                           "ep",
                           "sequence_parallel",
                           "virtual_stages",
                           "zero_stage",
                           "micro_batch",
                           "global_batch",
                           "recompute",
                           "recompute_modules",
                           "precision",
                           "schedule",
                           "overlap_grad_reduce",
                           "overlap_param_gather",
                           "overlap_tp_comm",
                           "overlap_ep_comm",
                           "overlap_p2p_comm",
                           "optimizer_state_precision",
                           "first_stage_layers",
                           "last_stage_layers",
                           "account_for_embedding",
                           "account_for_loss",
                           "grad_reduce_precision",
                           "fp8_recipe",
                           "fp8_param_gather",
                           "cp_comm",
                           "moe_capacity_factor"});
  else
    r.reject_unknown_keys({"tp", "pp", "dp", "cp", "ep", "sequence_parallel", "virtual_stages", "zero_stage",
                           "micro_batch", "global_batch", "recompute", "precision", "schedule"});
  read_degrees(r, l.base);
  if (!r.ok()) {
    out.failure = r.error().message();
    return false;
  }
  // An EP the data-parallel ranks cannot hold but the stage's ranks can: the experts are folded
  // over tp*cp*dp with expert tensor parallelism 1 (Megatron-Core's MoE parallel folding, as its
  // MoE recipes set --expert-tensor-parallel-size 1); the reported degrees imply it.
  Plan& b = l.base;
  if (b.ep > 1 && b.tp > 1 && (b.dp * b.cp) % b.ep != 0 && (b.tp * b.dp * b.cp) % b.ep == 0) {
    b.expert_tp = 1;
    out.assumed["expert_tp"] = 1;
  }
  // Version 2 names its stack; version 1 is known by its source's citation.
  SoftwareStack named{};
  const SoftwareStack* stack = nullptr;
  if (c.schema == 2) {
    if (!c.software.empty() && c.software != "other") {
      named = software_v2(c.software, c.software_version);
      if (!named.name.empty()) stack = &named;
    }
  } else {
    stack = software_for(c.source);
  }
  l.model = c.model;
  read_software(stack, r, l, out);
  apply_case_facts(c, stack, l, out);
  read_schedule(c, r, stack, l, out);
  read_memory_fields(r, stack, l, out);
  if (c.schema == 2) read_v2_fields(c, r, stack, l, out);
  if (!r.ok()) {
    out.failure = r.error().message();
    return false;
  }
  if (l.base.virtual_stages > 1 && l.base.schedule != Schedule::kInterleaved1F1B)
    l.base.schedule = Schedule::kInterleaved1F1B;
  return true;
}

// Tries every combination of the choices and keeps in `out` the fastest plan that validates and
// fits; false (out.failure: the smallest memory overrun, or the first invalid field) when none.
bool choose_fastest(const ValidationCase& c, const CaseLayouts& l, CaseResult& out) {
  const std::vector<Choice>& choices = l.choices;
  AnalyticModel am(l.model, c.cluster);
  const int accelerators = c.cluster.total_accelerators();
  bool found = false;
  std::string first_problem;
  double least_memory = INFINITY;
  MemoryBreakdown least_mem_breakdown;
  std::vector<std::size_t> idx(choices.size(), 0);
  while (true) {
    Plan plan = l.base;
    json chosen = json::object();
    for (std::size_t i = 0; i < choices.size(); ++i) {
      if (choices[i].options.empty()) continue;
      choices[i].options[idx[i]].second(plan);
      chosen[choices[i].field] = choices[i].options[idx[i]].first;
    }
    Status valid = validate_plan(plan, l.model, accelerators, c.file + " (at /parallel)");
    auto consider = [&](const Plan& candidate, const json& picked) {
      Prediction pred = am.evaluate(candidate);
      if (!pred.fits()) {
        if (pred.memory.total < least_memory) {
          least_memory = pred.memory.total;
          least_mem_breakdown = pred.memory;
        }
      } else if (!found || pred.step_time_s < out.predicted_step_s) {
        found = true;
        out.predicted_step_s = pred.step_time_s;
        out.prediction = pred;
        out.plan = candidate;
        out.chosen = picked;
      }
    };
    if (valid) {
      consider(plan, chosen);
      // Full recompute of only the layers needed to fit, as the stack's recipes do.
      if (l.partial_recompute && plan.recompute == Recompute::kFull && plan.recompute_layers < 0) {
        Plan partial = plan;
        partial.recompute_layers = fewest_recompute_layers(am, plan);
        if (partial.recompute_layers >= 0 &&
            partial.recompute_layers < most_layers_per_chunk(plan, l.model.layers)) {
          json picked = chosen;
          picked["recompute_layers"] = partial.recompute_layers;
          consider(partial, picked);
        }
      }
    } else if (first_problem.empty()) {
      first_problem = valid.error().message();
    }
    // Next combination (odometer).
    std::size_t i = 0;
    for (; i < choices.size(); ++i) {
      if (++idx[i] < std::max<std::size_t>(1, choices[i].options.size())) break;
      idx[i] = 0;
    }
    if (i == choices.size()) break;
  }
  if (!found)
    out.failure = std::isfinite(least_memory)
                      ? "no layout fits in memory; the smallest " + describe_memory(least_mem_breakdown)
                      : (first_problem.empty() ? "no valid layout" : first_problem);
  return found;
}

// The discrete-event simulator's step time for the chosen plan; false (out.failure) on an error.
bool simulate_chosen(const ValidationCase& c, const ModelSpec& model, CaseResult& out) {
  auto w = lower(model, c.cluster, out.plan);
  if (!w) {
    out.failure = w.error().message();
    return false;
  }
  Simulator sim(*w, SimOptions{});
  auto simulated = sim.run();
  if (!simulated) {
    out.failure = simulated.error().message();
    return false;
  }
  out.prediction = simulated->prediction;
  out.predicted_step_s = simulated->prediction.step_time_s;
  return true;
}

// The classes errors are grouped by: the stack, the precision, how data parallelism shards the
// model, and the scale.
std::map<std::string, std::string> case_classes(const ValidationCase& c, const CaseResult& r) {
  std::string stack = "unknown";
  if (r.assumed.contains("software"))
    stack = r.assumed["software"].get<std::string>();
  else if (!c.software.empty())
    stack = c.software;
  auto classes = plan_classes(r.plan, c.cluster.total_accelerators());
  classes["stack"] = stack;
  return classes;
}

}  // namespace

std::string short_source(const std::string& source) {
  // A repository ("owner/name path ..."): the repository.
  const std::size_t space = source.find(' ');
  const std::string first = source.substr(0, space);
  if (first.find('/') != std::string::npos) return first;
  // A paper or a page: its authors or title, up to the first ", " that does not follow "et al."
  // (which keeps a venue: "Narayanan et al., SC'21"), a parenthesis or a quoted title.
  std::size_t cut = std::min(source.find(" ("), source.find(", '"));
  for (std::size_t at = source.find(", "); at != std::string::npos; at = source.find(", ", at + 1)) {
    if (at >= 6 && source.compare(at - 6, 6, "et al.") == 0) continue;
    cut = std::min(cut, at);
    break;
  }
  for (std::string_view stop : {", arXiv", ", Table"}) cut = std::min(cut, source.find(stop));
  return source.substr(0, cut);
}

CaseResult run_validation_case(const ValidationCase& c, Engine engine) {
  CaseResult out;
  out.id = c.id;
  out.file = c.file;
  out.source = short_source(c.source);
  out.measured_step_s = c.measured_step_s;
  CaseLayouts l;
  if (!read_case_layouts(c, l, out) || !choose_fastest(c, l, out)) return out;
  out.classes = case_classes(c, out);
  if (engine == Engine::kDes && !simulate_chosen(c, l.model, out)) return out;
  out.ok = true;
  out.error_pct = (out.predicted_step_s - c.measured_step_s) / c.measured_step_s * 100.0;
  if (c.measured_memory_gib > 0) {
    out.measured_memory_gib = c.measured_memory_gib;
    out.predicted_memory_gib = out.prediction.memory.total / (1024.0 * 1024.0 * 1024.0);
    out.memory_error_pct = (out.predicted_memory_gib - c.measured_memory_gib) / c.measured_memory_gib * 100.0;
  }
  return out;
}

Result<std::vector<std::string>> collect_case_files(const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const auto& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<std::string> found;
      for (const auto& e : fs::recursive_directory_iterator(p, ec))
        if (e.is_regular_file() && e.path().extension() == ".json") found.push_back(e.path().string());
      if (ec) return Error(p + ": cannot list directory: " + ec.message());
      std::sort(found.begin(), found.end());
      if (found.empty()) return Error(p + ": no *.json validation cases in this directory");
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
    } else {
      return Error(p + ": no such file or directory");
    }
  }
  return files;
}

Result<DevicePatch> device_patch(const std::string& name, const json& patch) {
  auto device = load_device(name);
  if (!device) return device.error().with_context("--device-patch " + name);
  json doc = device_to_json(*device);
  doc.merge_patch(patch);
  FS_ASSIGN_OR_RETURN(DeviceSpec patched, device_from_json(doc, "--device-patch " + name));
  return DevicePatch{std::move(patched)};
}

namespace {

// Absolute errors over the cases that have one: their mean and the worst (the first of equals).
struct ErrorTally {
  double sum = 0, max = 0;
  int n = 0;
  std::string worst;
  void add(double error_pct, const std::string& id) {
    sum += std::fabs(error_pct);
    ++n;
    if (std::fabs(error_pct) > max) {
      max = std::fabs(error_pct);
      worst = id;
    }
  }
  double mean() const { return n > 0 ? sum / n : 0.0; }
};

}  // namespace

ValidationSummary run_validation(const std::vector<std::string>& files, Engine engine,
                                 const std::vector<DevicePatch>& patches) {
  ValidationSummary s;
  s.engine = engine;
  ErrorTally step, memory, collectives;
  for (const auto& f : files) {
    auto doc = read_json_file(f);
    if (doc && is_collectives_file(*doc)) {
      auto cases = collective_cases_from_json(*doc, f);
      if (!cases) {
        CollectiveResult bad;
        bad.id = std::filesystem::path(f).stem().string();
        bad.failure = cases.error().message();
        s.collectives.push_back(bad);
        ++s.failed;
        continue;
      }
      for (const auto& cc : *cases) {
        CollectiveResult cr = run_collective_case(cc);
        if (cr.ok)
          collectives.add(cr.error_pct, cr.id);
        else
          ++s.failed;
        s.collectives.push_back(std::move(cr));
      }
      continue;
    }
    Result<ValidationCase> c = doc ? validation_case_from_json(*doc, f) : Result<ValidationCase>(doc.error());
    if (c)
      for (const DevicePatch& dp : patches)
        for (auto& g : c->cluster.node.devices)
          if (g.device.name == dp.device.name) g.device = dp.device;
    CaseResult r;
    if (!c) {
      r.file = f;
      r.id = std::filesystem::path(f).stem().string();
      r.failure = c.error().message();
    } else {
      r = run_validation_case(*c, engine);
    }
    if (r.ok) {
      step.add(r.error_pct, r.id);
      if (r.measured_memory_gib > 0) memory.add(r.memory_error_pct, r.id);
    } else {
      ++s.failed;
    }
    s.cases.push_back(std::move(r));
  }
  s.mape_pct = step.mean();
  s.max_abs_error_pct = step.max;
  s.worst_id = step.worst;
  s.memory_cases = memory.n;
  s.memory_mape_pct = memory.mean();
  s.memory_max_abs_error_pct = memory.max;
  s.memory_worst_id = memory.worst;
  s.collectives_mape_pct = collectives.mean();
  s.collectives_max_abs_error_pct = collectives.max;
  return s;
}

json validation_to_json(const ValidationSummary& s) {
  json cases = json::array(), failed = json::array();
  for (const auto& r : s.cases) {
    if (r.ok) {
      cases.push_back({{"id", r.id},
                       {"predicted_step_s", r.predicted_step_s},
                       {"measured_step_s", r.measured_step_s},
                       {"error_pct", r.error_pct},
                       {"source", r.source},
                       {"classes", r.classes},
                       {"chosen", r.chosen},
                       {"assumed", r.assumed},
                       {"plan", plan_to_json(r.plan)},
                       {"prediction", prediction_to_json(r.prediction)}});
      if (r.measured_memory_gib > 0)
        cases.back()["memory"] = {{"predicted_gib", r.predicted_memory_gib},
                                  {"measured_gib", r.measured_memory_gib},
                                  {"error_pct", r.memory_error_pct}};
    } else {
      failed.push_back({{"id", r.id}, {"file", r.file}, {"reason", r.failure}});
    }
  }
  json out = {{"engine", s.engine == Engine::kDes ? "des" : "analytic"},
              {"cases", cases},
              {"mape_pct", s.mape_pct},
              {"max_abs_error_pct", s.max_abs_error_pct},
              {"worst_id", s.worst_id},
              {"failed", failed}};
  if (s.memory_cases > 0)
    out["memory"] = {{"cases", s.memory_cases},
                     {"mape_pct", s.memory_mape_pct},
                     {"max_abs_error_pct", s.memory_max_abs_error_pct},
                     {"worst_id", s.memory_worst_id}};
  if (!s.collectives.empty()) {
    json cs = json::array();
    for (const auto& c : s.collectives) {
      if (!c.ok) {
        out["failed"].push_back({{"id", c.id}, {"reason", c.failure}});
        continue;
      }
      cs.push_back({{"id", c.id},
                    {"kind", c.kind},
                    {"algorithm", c.algorithm},
                    {"predicted_busbw_GBps", c.predicted_busbw / 1e9},
                    {"measured_busbw_GBps", c.measured_busbw / 1e9},
                    {"error_pct", c.error_pct}});
    }
    out["collectives"] = {{"cases", cs},
                          {"mape_pct", s.collectives_mape_pct},
                          {"max_abs_error_pct", s.collectives_max_abs_error_pct}};
  }
  return out;
}

std::vector<GroupError> errors_by_group(const ValidationSummary& s) {
  std::vector<GroupError> out;
  for (const char* group : {"source", "stack", "precision", "sharding", "scale"}) {
    std::map<std::string, GroupError> by_name;
    for (const auto& r : s.cases) {
      if (!r.ok) continue;
      const std::string name = std::string(group) == "source" ? r.source
                               : r.classes.contains(group)    ? r.classes.at(group)
                                                              : "unknown";
      GroupError& g = by_name[name.empty() ? "unknown" : name];
      g.group = group;
      g.name = name.empty() ? "unknown" : name;
      ++g.cases;
      g.mape_pct += std::fabs(r.error_pct);
      if (std::fabs(r.error_pct) >= g.max_abs_error_pct) {
        g.max_abs_error_pct = std::fabs(r.error_pct);
        g.worst_id = r.id;
      }
    }
    for (auto& [name, g] : by_name) {
      g.mape_pct /= g.cases;
      out.push_back(g);
    }
  }
  return out;
}

json groups_to_json(const std::vector<GroupError>& groups) {
  json out = json::object();
  for (const auto& g : groups)
    out[g.group].push_back({{"name", g.name},
                            {"cases", g.cases},
                            {"mape_pct", g.mape_pct},
                            {"max_abs_error_pct", g.max_abs_error_pct},
                            {"worst_id", g.worst_id}});
  return out;
}

}  // namespace foresight
