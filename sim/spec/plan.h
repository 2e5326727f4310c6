// Plan: how one training step is laid out on the cluster (parallel degrees, batch, schedule,
// memory savers, precision, overlap). `validate_plan` checks it against a model and cluster and
// names the offending field:
//   plan.json: /tp: 3 does not divide model heads (32)
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/core/status.h"
#include "sim/spec/hardware.h"
#include "sim/spec/model.h"

namespace foresight {

enum class Schedule { kGpipe, k1F1B, kInterleaved1F1B, kZeroBubble, kDualPipe };
// kSelective: Megatron's selective recompute (the attention core). kOptimal: each layer's
// recompute modules chosen per pipeline stage to fit memory at the least recompute time
// (sim/analytic/recompute.h). kSelectiveOp: torchtitan's op-level selective activation
// checkpointing (selective_ac_option = "op"): every op's output is kept except every second
// matmul of a block and the elementwise ops, which the backward re-runs (layer_cost.h).
enum class Recompute { kNone, kSelective, kFull, kOptimal, kSelectiveOp };
// How Plan::recompute_layers applies to full recompute (Megatron's --recompute-method): block
// recomputes the first N layers of each stage (chunk) and keeps the others; uniform recomputes
// every layer, keeping only the input of each group of N consecutive layers.
enum class RecomputeMethod { kBlock, kUniform };
// How context parallelism exchanges K and V (Plan::cp_comm).
enum class CpComm { kRing, kAllGather };
// The attention kernel's class (Plan::attention_kernel): the device's best fused kernel, a
// FlashAttention-2-class one (DeviceSpec::attention_flash2_efficiency), or a FlashAttention-1-class
// one (FlashAttention v1's CUDA kernels or their Triton port, at half the FlashAttention-2 rate:
// kFlash1OfFlash2 in sim/analytic/layer_ops.cpp).
enum class AttentionKernel { kBest, kFlash2, kFlash1 };
// How the experts' GEMMs are launched (Plan::expert_gemm): one grouped kernel over the rank's
// experts, or one GEMM (and in fp8 one quantisation) per expert.
enum class ExpertGemm { kGrouped, kPerExpert };
// The language-model loss's kernels (Plan::cross_entropy) over the fp32 logits: one pass that
// reads the logits and writes their gradient (Transformer Engine's parallel cross entropy,
// flash-attn's and Liger's Triton kernels); Megatron-Core's --cross-entropy-loss-fusion (native,
// megatron/core/fusions/fused_cross_entropy.py: cast and maximum, exponent and sum, division as
// three fused kernels forward, one backward); or Megatron's vocab_parallel_cross_entropy without
// it, each step a pass over the fp32 logits (cast, maximum, subtraction, exponent, sum, division;
// backward the gradient's scaling and the cast back).
enum class CrossEntropy { kOnePass, kJitFused, kUnfused };
enum class Precision { kFp32, kBf16, kFp16, kFp8 };
// How an fp8 plan's linear layers scale their FP8 operands (Plan::fp8_recipe): per tensor from the
// amax history of earlier steps (Transformer Engine's DelayedScaling), per tensor from the tensor's
// own amax (TE's Float8CurrentScaling, torchao's tensorwise dynamic Float8), per block of 1x128 /
// 128x128 (TE's Float8BlockScaling, DeepSeek-V3), or per 32 elements (MXFP8, Blackwell).
enum class Fp8Recipe { kDelayed, kCurrent, kBlockwise, kMxfp8, kRowwise };
// Gradient compression for the data-parallel reduction (sim/analytic/compression.h).
enum class GradCompression { kNone, kInt8, kTopK, kPowerSgd, kFourStage };

std::string to_string(Schedule s);
std::string to_string(Recompute r);
std::string to_string(Precision p);
std::string to_string(RecomputeMethod m);
Result<RecomputeMethod> parse_recompute_method(const std::string& s);
std::string to_string(CpComm c);
Result<CpComm> parse_cp_comm(const std::string& s);
std::string to_string(AttentionKernel k);
Result<AttentionKernel> parse_attention_kernel(const std::string& s);
std::string to_string(CrossEntropy c);
Result<CrossEntropy> parse_cross_entropy(const std::string& s);
std::string to_string(Fp8Recipe r);
Result<Fp8Recipe> parse_fp8_recipe(const std::string& s);
std::string to_string(ExpertGemm g);
Result<ExpertGemm> parse_expert_gemm(const std::string& s);
Result<Schedule> parse_schedule(const std::string& s);
Result<Recompute> parse_recompute(const std::string& s);
Result<Precision> parse_precision(const std::string& s);
std::string to_string(GradCompression c);
Result<GradCompression> parse_grad_compression(const std::string& s);

// LZ4's figures on the Silesia corpus (lz4/lz4 README, r101 table: ratio 2.084, decompression
// 1,820 MB/s on one core of a Core i5-3340M): the defaults of DataLoading's "lz4".
inline constexpr double kLz4Ratio = 2.084;
inline constexpr double kLz4DecompressRate = 1.82e9;

// The input pipeline (sim/analytic/data_loading.h): what a sample takes on storage and how the
// loaders on each node read, decompress and prefetch it.
struct DataLoading {
  double sample_bytes = 0;  // bytes of one sequence uncompressed; 0: its token ids
  int token_bytes = 0;      // bytes per token id; 0: 2 below 65,536 vocabulary entries, else 4
  // "none" or "lz4" (kLz4Ratio and kLz4DecompressRate unless given).
  std::string compression = "none";
  // Sets `compression` by name with its defaults; false for an unknown name.
  bool set_compression(const std::string& name);
  double compression_ratio = 1;  // raw / stored bytes
  double decompress_rate = 0;    // decompressed bytes/s per loader core
  double preprocess_rate = 0;    // bytes/s per core of other CPU work (tokenising, augmenting); 0: none
  int loader_cores = 8;          // per node
  int prefetch = 2;              // batches the loader keeps ready ahead of training; 0: loads in the loop
  double cached_fraction = 0;    // share of reads a node-local cache serves (incremental loading)
  bool operator==(const DataLoading&) const = default;
};

struct Plan {
  int tp = 1, pp = 1, dp = 1, ep = 1, cp = 1;
  // The experts' tensor-parallel degree (Megatron-Core's --expert-tensor-parallel-size; 0: tp).
  // The expert layers regroup a stage's tp*cp*dp ranks as expert_tp x ep x expert-dp (MoE
  // parallel folding): with expert_tp = tp, ep divides dp*cp (experts carved out of the
  // data-parallel ranks); with expert_tp = 1, ep divides tp*cp*dp and each expert runs whole on
  // its rank, on the tokens of the rank's sequence-parallel shard. (Other degrees are not
  // modelled.)
  int expert_tp = 0;
  int etp() const { return expert_tp > 0 ? expert_tp : tp; }
  // MoE parallel folding: the experts' tensor-parallel degree below tp (expert groups drawn from
  // all of a stage's ranks, the MoE block without TP collectives).
  bool experts_folded() const { return etp() != tp; }
  // The ranks that hold the same experts (their gradients are reduced together).
  int edp() const { return std::max(1, tp * cp * dp / (etp() * ep)); }
  bool sequence_parallel = false;
  int virtual_stages = 1;         // model chunks per pipeline rank (interleaved 1F1B)
  int micro_batch = 1;            // sequences per micro-batch
  std::int64_t global_batch = 1;  // sequences per optimizer step
  Schedule schedule = Schedule::k1F1B;
  int zero_stage = 0;  // 0..3 (ZeRO-3 = FSDP full shard)
  // ZeRO-3 with pipeline stages runs as PyTorch's FSDP2 does under torch.distributed.pipelining,
  // the stack that combines them (DeepSpeed refuses ZeRO-2/3 with its pipeline engine): torchtitan
  // shards each block with reshard_after_forward=False when pp > 1 ("to avoid per-microbatch
  // all-gathers", parallelize_llama.py apply_fsdp since pytorch/torchtitan#318), and the pipeline
  // stage's backward_maybe_with_nosync sets requires_gradient_sync and reshard_after_backward false
  // until the stage's last backward, then runs each group's post_backward, the reduce-scatter
  // (pytorch/pytorch#134052). So a stage gathers each layer once a step, in the first micro-batch's
  // forward, holds its parameters and its gradients (in the reduce dtype) whole through the step,
  // and reduce-scatters a chunk's gradients once, after the chunk's last backward, beside the rest
  // of its schedule, the optimizer waiting for them. (As PyTorch 2.6 ran, which the published
  // torchtitan runs used: from 2025-01, #144535, FSDP's final callback also makes the stage's
  // compute stream wait for them, which delays its last gradient send by the reduction.)
  bool zero3_whole_step() const { return zero_stage >= 3 && pp > 1; }
  Recompute recompute = Recompute::kNone;
  // With recompute selective: the modules each layer drops and rebuilds in its backward, by
  // Megatron-Core's --recompute-modules names (core_attn, layernorm, mlp, moe_act, mla_up_proj);
  // empty: core_attn, Megatron's selective recompute. DeepSeek-V3 recomputes layernorm and
  // mla_up_proj (its report, Sec. 3.2.3).
  std::vector<std::string> recompute_modules;
  // Recompute only the first `recompute_layers` layers of each pipeline stage (of each chunk with
  // virtual stages) and keep the others' activations -- Megatron's --recompute-num-layers with the
  // block method. -1: every layer follows `recompute`. With the uniform method (full recompute):
  // the size of each group of layers whose input alone is kept.
  int recompute_layers = -1;
  RecomputeMethod recompute_method = RecomputeMethod::kBlock;
  // Full recompute stops once the backward's saved tensors exist again: the re-run ends with the
  // MLP's activation, leaving out the down projection, the MoE combine (its all-to-all), the
  // row-parallel collective and the residual, whose outputs no backward reads. PyTorch's
  // non-reentrant torch.utils.checkpoint does this from 2.1 (its early stop, on by default), and
  // torch.compile re-runs only what the backward graph reads. false: the whole forward again
  // (Megatron's and DeepSpeed's reentrant checkpoint functions, PyTorch's before 2.1).
  bool recompute_early_stop = false;
  // Recompute::kOptimal: the share of each device's memory its per-layer choice leaves free (the
  // search's allocator margin, SearchOptions::min_headroom, so that its plans solve to the margin
  // they are held to); 0: to capacity.
  double recompute_headroom = 0;
  Precision precision = Precision::kBf16;
  // An fp8 plan's scaling recipe (ignored in other precisions). kCurrent reads each tensor once
  // more for its amax before the cast (TE's quantize: compute_amax, compute_scale_from_amax,
  // quantize; torchao: the amax reduction, then the cast), unless a fused norm or activation that
  // produced it returned the amax (sim/analytic/layer_ops.cpp, fp8_casts); kRowwise (torchao's
  // per-row scales) casts each operand along both axes, through a 16-bit transposed copy, and
  // scales its backward GEMMs' outputs afterwards; the others find the scale without an extra
  // pass (the amax history, or the block's own maximum inside the cast).
  Fp8Recipe fp8_recipe = Fp8Recipe::kDelayed;
  // An fp8 plan's linear weights quantised from their 16-bit copy in every forward and again in
  // every backward, each micro-batch (torchao's Float8Linear: it saves the 16-bit weight and casts
  // it at each use), rather than once a step and cached across micro-batches (Transformer Engine,
  // priced as free; torchao under FSDP2's float8 all-gather, which gathers weights already cast).
  // sim/analytic/layer_ops.cpp, fp8_casts.
  bool fp8_weight_recast = false;
  bool flash_attention = true;  // fused attention: no s^2 activation traffic or memory
  // Which fused attention kernel runs: kBest, the device's fastest (on Hopper, cuDNN's fused
  // attention as Transformer Engine picks it, or FlashAttention-3); kFlash2, FlashAttention-2 or a
  // kernel of its class (PyTorch SDPA's flash backend, which PyTorch prefers to cuDNN on Hopper:
  // pytorch/pytorch#138522), which does not use Hopper's asynchronous tensor cores.
  AttentionKernel attention_kernel = AttentionKernel::kBest;
  bool overlap_grad_reduce =
      false;                     // DP gradient reduction overlapped with backward (opt-in, as in Megatron)
  bool overlap_tp_comm = false;  // TP collectives overlapped with GEMMs
  // With overlap_grad_reduce (not ZeRO-3): the gradient buckets, in parameters. 0: a bucket per
  // layer, each reduced as soon as its last backward is done. Above 0, Megatron-Core's DDP
  // (ParamAndGradBuffer): only the first pipeline stage's first model chunk is split into
  // buckets of at least this many parameters (its dense and expert buffers apart), in backward
  // order; every other chunk, and every chunk of the later stages, is one bucket, reduced after
  // the chunk's last backward (distributed_data_parallel.py: bucketing off for pp rank > 0 and
  // for model chunks after the first, since 2023-09). Megatron's default is 40M, from 2024-04
  // max(40M, 1M x dp); NeMo 2 and Megatron-Bridge set 128Mi where dp > 1.
  std::int64_t grad_bucket_params = 0;
  // Without overlap_tp_comm: the backward's collective of a column-parallel GEMM's input gradient
  // (the QKV and MLP-up GEMMs: an all-reduce, with SP a reduce-scatter) is issued asynchronously
  // and waited for after the same GEMM's weight gradient, which hides it. Megatron-LM's
  // asynchronous tensor-model-parallel all-reduce (on by default from 2021-09, with SP from 2022;
  // --no-async-tensor-model-parallel-allreduce turned it off) and Transformer Engine's Linear,
  // LayerNormLinear and LayerNormMLP backward ("overlap dgrad-RS/AR with wgrad"), which
  // Megatron-Core, NeMo and Megatron-Bridge run. false: every TP collective waits in line.
  bool overlap_tp_dgrad = false;
  // ZeRO-1/2 (distributed optimizer): the parameter all-gather after the optimizer step overlapped
  // with the next forward pass, bucket by bucket as the forward reaches each layer (Megatron's
  // --overlap-param-gather). false: gathered at the end of the step, exposed.
  bool overlap_param_gather = false;
  // Pipeline sends and receives overlapped with the chunks' compute (Megatron's overlap_p2p_comm:
  // each send and the next chunk's receive are posted asynchronously and waited only where their
  // data is needed). As in Megatron, it applies to interleaved 1F1B with virtual stages only
  // (its training scripts turn it on there by default, NeMo and Megatron-Bridge too, and turn it
  // off for the other schedules, which batch each exchange).
  bool overlap_p2p_comm = false;
  // MoE expert-parallel all-to-alls hidden behind a second micro-batch: in the steady state a
  // forward and a backward of different micro-batches run as one merged pair, layer by layer,
  // each one's dispatch and combine beside the other's attention or experts (Megatron-Core's
  // --overlap-moe-expert-parallel-comm, which needs virtual stages when pp > 1; DeepSeek-V3's
  // DualPipe, Sec. 3.2.1). Needs ep > 1 and no full recompute.
  bool overlap_ep_comm = false;
  // The schedules that pair a forward with a backward (where overlap_ep_comm can apply), and the
  // recompute that lets them (Megatron-Core refuses full and per-layer recompute with it).
  bool schedule_pairs() const {
    return schedule == Schedule::kDualPipe ||
           (schedule == Schedule::kInterleaved1F1B && virtual_stages > 1) ||
           (pp == 1 && schedule == Schedule::k1F1B);
  }
  bool recompute_pairs() const {
    return recompute != Recompute::kFull && recompute != Recompute::kOptimal &&
           recompute_method != RecomputeMethod::kUniform && recompute_layers < 0;
  }
  bool p2p_overlapped() const {
    return overlap_p2p_comm && schedule == Schedule::kInterleaved1F1B && virtual_stages > 1 && pp > 1;
  }
  // The type of the gradient buffer and of its data-parallel reduction (Megatron-Core's
  // grad_reduce_in_fp32, FSDP's reduce_dtype). Unset: fp32, except fp16 runs (fp16).
  std::optional<Precision> grad_reduce_precision;
  // The type the optimizer keeps its state in (Adam's moments and the master copy of the weights):
  // fp32 (Megatron's distributed optimizer, DeepSpeed, FSDP) or bf16 (Apex's DistributedFusedAdam
  // with dtype bf16, as NeMo 1.x recipes may set it): 6 bytes per parameter instead of 12, and a
  // step that moves half as many bytes.
  Precision optimizer_state_precision = Precision::kFp32;
  // Fused elementwise chains (norm, bias/dropout + residual, activation, scale-mask-softmax as
  // one kernel each, as Megatron runs them). false: PyTorch eager, one kernel per operator, each
  // writing its result to memory and the next reading it back.
  bool kernel_fusion = true;
  // The loss's kernels (CrossEntropy) where the elementwise chains are fused (kernel_fusion);
  // PyTorch eager runs its own cross_entropy on the fp32 logits.
  CrossEntropy cross_entropy = CrossEntropy::kOnePass;
  // Grouped-query attention's K and V repeated to every query head before the attention kernel
  // (Llama's reference repeat_kv before PyTorch SDPA, as torchtitan ran it until 2026-01): the
  // copies are kernels of their own, and context parallelism exchanges the repeated K and V,
  // heads/kv_heads times the bytes. false: the kernel reads the kv_heads-wide tensors (Transformer
  // Engine, FlashAttention's GQA, SDPA's enable_gqa).
  bool repeat_kv = false;
  // ZeRO-3 as PyTorch's FSDP2 (fully_shard, per-parameter sharding) runs it: each all-gather lands
  // in one flat buffer that is then copied out into the layer's parameters, and each backward's
  // gradients are copied (chunk_cat) into one flat reduce-scatter input, cast to the reduce dtype
  // (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: split_with_sizes_copy after the
  // all-gather's event, chunk_cat before the reduce-scatter stream waits; both on the compute
  // stream). false: the parameters and gradients are views of the flat buffers the collectives
  // use (FSDP1's FlatParameter, DeepSpeed ZeRO-3, Megatron's buffers).
  bool fsdp_copies = false;
  // FSDP2's copies happen: asked for, and the weights are sharded (ZeRO-3).
  bool fsdp_copies_apply() const { return fsdp_copies && zero_stage >= 3; }
  // How an MoE layer's expert GEMMs are launched: kGrouped, one kernel over this rank's experts
  // (CUTLASS grouped GEMM, torch._grouped_mm, DeepGEMM); kPerExpert, one GEMM per expert and pass,
  // and in fp8 plans one quantisation per expert (Transformer Engine's GroupedLinear, which
  // Megatron-Core's TEGroupedMLP runs: general_grouped_gemm loops cuBLAS over the experts, and
  // tex.split_quantize quantises each expert's tokens). The device does the same work, paying each
  // launch's start and tail (DeviceSpec::kernel_overhead_s); the host issues one operation per
  // launch (DeviceSpec::host_op_s).
  ExpertGemm expert_gemm = ExpertGemm::kGrouped;
  // MoE token drop with padding: each expert takes at most moe_capacity_factor times its even
  // share of the routed tokens, the rest dropped, and its input is padded to that capacity
  // (Megatron-Core's moe_expert_capacity_factor with moe_pad_expert_input_to_capacity, Megatron-
  // Bridge's "tokendrop"). The experts compute, and the all-to-alls move, the capacity's rows; the
  // shapes are fixed, so the host need not learn the token counts (no synchronisation) and a CUDA
  // graph captures the whole layer. 0: dropless (every routed token computed, the counts
  // synchronised). The activation memory counts the routed tokens, not the padding.
  double moe_capacity_factor = 0;
  bool moe_drop_and_pad() const { return moe_capacity_factor > 0; }
  // Each layer's kernels replayed as a CUDA graph: the per-kernel launch cost falls to the
  // device's graph_kernel_overhead, and the host issues nothing. A dropless MoE layer's experts and
  // combine stay outside the graph (their shapes change every step).
  bool cuda_graphs = false;
  bool offload_optimizer = false;  // optimizer state and step on the host (ZeRO-Offload)
  // ZeRO-Infinity-style parameter offload: weights and gradients live in host memory; each layer's
  // weights cross the host link before its forward and again before its backward, its gradients
  // go back after the backward (every micro-batch). Needs offload_optimizer.
  bool offload_params = false;
  // Activation offload: each layer's saved activations go to host memory after its forward and
  // come back, one layer ahead, before its backward, while the device computes.
  bool offload_activations = false;
  // The input embedding table in host memory: the host gathers the micro-batch's rows, sends them
  // and takes their gradients back; the table's update runs on the host.
  bool offload_embeddings = false;
  int seq_len = 0;  // 0: the model's sequence length
  // Context parallelism's K/V exchange. kRing (Megatron's and Transformer Engine's p2p ring, the
  // default): each step's K/V shard travels while the previous step's block of attention runs.
  // kAllGather: the whole K and V gathered before the attention and their gradients
  // reduce-scattered after its backward (which gathers them again), all exposed -- Llama 3's
  // long-context training (Llama Team 2024, Section 3.3.2: "the all-gather communication latency
  // is exposed in the critical path") and torchtitan's default rotate method.
  CpComm cp_comm = CpComm::kRing;
  // Layers per pipeline stage (pp entries, without virtual stages), or per model chunk (pp *
  // virtual_stages entries, in model order: chunk c of stage s is entry c*pp + s, as Megatron-Core
  // interleaves them; a chunk may hold none). Empty: as even as possible, the extra layers on the
  // first stages (interleaved: pp*virtual_stages must divide the layers).
  std::vector<int> layer_split;
  // Rank placement (topology-aware or not). `rank_order`: the parallel dimensions from fastest- to
  // slowest-varying along the devices, Megatron-Core's `order` ("tp-cp-dp-pp": tensor-parallel
  // groups inside a node, data-parallel rings across nodes along rails). `node_order`: "linear"
  // (nodes in the order of the cluster's topology: neighbours on a torus line, leaves filled in
  // turn) or "shuffled" (a fixed pseudo-random order, as a scheduler hands out free nodes).
  std::string rank_order = "tp-cp-dp-pp";
  // Op placement: the device (name of another accelerator group of the node) that runs each
  // layer's attention core beside the stage's accelerator, Q/K/V and outputs crossing PCIe; "auto"
  // places it there only where that is faster, transfers included. "": on the stage's device.
  std::string attention_device;
  std::string node_order = "linear";
  // Per-layer-group strategies: the tensor-parallel degree of each pipeline stage (empty: `tp`
  // everywhere). Every stage keeps tp*dp ranks: a stage with tp_i runs dp_i = tp*dp/tp_i
  // replicas, each on micro-batches of global_batch/(dp_i * micro-batch count) sequences, so the
  // pipeline's micro-batch count stays that of the nominal tp and dp ("the first layers
  // data-parallel, the middle ones 2D, the last pipeline-only" is stage_tp 1, 4, ..., 1).
  std::vector<int> stage_tp;
  // The accelerator (device name) each pipeline stage runs on, on clusters whose nodes mix
  // accelerator types (empty: every stage on the node's first accelerator group).
  std::vector<std::string> stage_devices;
  // Data-parallel gradient compression: int8 quantisation, top-k sparsification with error
  // feedback (keeping `compression_topk` of the elements), PowerSGD of rank `compression_rank`, or
  // the articles' four stages (top-k, int8 values, entropy-coded indices, local accumulation).
  GradCompression grad_compression = GradCompression::kNone;
  double compression_topk = 0.01;
  int compression_rank = 4;
  double compression_penalty = 0;  // extra steps to converge (0.03 = 3%), for time to train
  DataLoading data;

  int gpus() const { return tp * pp * dp * cp; }
  // Ranks between consecutive members of each dimension's groups under rank_order (tp, cp, dp,
  // pp), e.g. {1, tp, tp*cp, tp*cp*dp} for Megatron's order.
  std::array<int, 4> rank_strides() const;
  // Whether the layer at `position` within its stage (or chunk) recomputes under this plan.
  // (Recompute::kOptimal decides per layer: recompute_assignment in sim/analytic/recompute.h.)
  bool recomputes(int position) const {
    return recompute != Recompute::kNone &&
           (recompute_layers < 0 || recompute_method == RecomputeMethod::kUniform ||
            position < recompute_layers);
  }
  // Whether only the first recompute_layers layers of each stage (chunk) recompute (block method).
  bool partial_recompute() const {
    return recompute_layers >= 0 && recompute_method == RecomputeMethod::kBlock &&
           (recompute == Recompute::kSelective || recompute == Recompute::kFull ||
            recompute == Recompute::kSelectiveOp);
  }
  // Full recompute in groups of recompute_layers layers (uniform method).
  bool uniform_recompute() const {
    return recompute == Recompute::kFull && recompute_method == RecomputeMethod::kUniform &&
           recompute_layers >= 1;
  }
  // Layers [first, last) of pipeline stage `stage` (without virtual stages).
  std::pair<int, int> stage_layer_range(int layers, int stage) const;
  // Model chunks per pipeline stage: virtual_stages when interleaved, else 1.
  int chunks() const { return virtual_stages > 1 ? virtual_stages : 1; }
  // Layers [first, last) of model chunk `chunk` of pipeline stage `stage`: Megatron-Core's
  // interleaved assignment (the stage holds model chunks stage, stage+pp, stage+2pp, ...) from
  // layer_split, or pp*virtual_stages equal chunks; without virtual stages stage_layer_range.
  // Every engine asks this for a stage's layers.
  std::pair<int, int> chunk_layer_range(int layers, int stage, int chunk) const;
  // Layers held by pipeline stage `stage`, all its chunks.
  int stage_layer_count(int layers, int stage) const;
  std::int64_t micro_batches() const { return global_batch / (std::int64_t{dp} * micro_batch); }
  bool operator==(const Plan&) const = default;
};

// The range of an integer field, one rule shared by the plan file reader and the command line.
struct IntRange {
  std::int64_t min, max;
};
namespace plan_range {
inline constexpr IntRange kDegree{1, 1 << 20};  // each of tp, pp, dp, ep, cp, and their product
inline constexpr IntRange kVirtualStages{1, 1024};
inline constexpr IntRange kMicroBatch{1, 1 << 20};
inline constexpr IntRange kGlobalBatch{1, std::int64_t{1} << 40};
// Micro-batches in one step (global_batch / (dp * micro_batch)): schedules hold one entry per
// micro-batch and stage, so a step of 100 M micro-batches would exhaust memory, not predict.
inline constexpr std::int64_t kMaxMicroBatches = 1 << 20;
inline constexpr IntRange kZeroStage{0, 3};
inline constexpr IntRange kSeqLen{1, 1 << 24};
inline constexpr IntRange kRecomputeLayers{0, 100000};
inline constexpr IntRange kCompressionRank{1, 1 << 16};
inline constexpr IntRange kLoaderCores{1, 1 << 16};
inline constexpr IntRange kGradBucketParams{0, std::int64_t{1} << 40};
inline constexpr IntRange kPrefetch{0, 1 << 16};
}  // namespace plan_range

// The parallel layout in a few words, as tables show it: "tp8 pp4 dp16 cp2 ep8 sp v2" (degrees of 1
// and switches that are off are left out, except tp, pp and dp).
std::string layout_string(const Plan& p);
// The recompute modules a plan may name (Plan::recompute_modules), Megatron-Core's names.
inline constexpr std::string_view kRecomputeModules[] = {"core_attn", "layernorm", "mlp", "moe_act",
                                                         "mla_up_proj"};
// Reads a JSON array of recompute module names into `out` (shape only; validate_plan checks the
// names against the model).
void read_recompute_modules(JsonReader& r, std::vector<std::string>& out);
// The recompute policy as tables show it: "none", "selective", "full", "optimal", "full x4" when
// only the first 4 layers of each stage recompute, "full /5" when every layer recomputes in groups
// of 5 (uniform method), "selective (layernorm+mla_up_proj)" with recompute modules.
std::string recompute_string(const Plan& p);
// Checks a Plan::rank_order: a permutation of tp, cp, dp and pp joined by '-'.
Status check_rank_order(const std::string& order);
// What the plan keeps in host memory: "optimizer+params+activations+embeddings" (those set), or
// "" when nothing is offloaded.
std::string offload_string(const Plan& p);
// The communication a plan overlaps, as the search varies it: "grad+param+tp+ep" (those set: the
// data-parallel reduction, ZeRO-1/2's parameter all-gather, the TP collectives, the expert
// all-to-alls behind merged pairs), "" for none.
std::string overlap_string(const Plan& p);

// The sequence length the plan trains at: Plan::seq_len when set, the model's otherwise.
inline int effective_seq_len(const Plan& p, const ModelSpec& m) {
  return p.seq_len > 0 ? p.seq_len : m.seq_len;
}

// The plan as pipeline stage `stage` runs it: with Plan::stage_tp, that stage's tp, dp and
// micro-batch size (and no stage_tp); otherwise the plan itself.
Plan stage_view(const Plan& p, int stage);

// Reads a plan file; fields not given keep the defaults above. `global_batch` is required.
// Without `require_global_batch` a missing global_batch reads as 0 (for resolve_job to derive).
Result<Plan> plan_from_json(const nlohmann::json& doc, const std::string& file,
                            bool require_global_batch = true);
Result<Plan> load_plan_file(const std::string& path);
nlohmann::json plan_to_json(const Plan& p);

// Checks the plan against the model and the number of accelerators (0: do not check the count).
// `file` prefixes the errors ("plan.json", or "command line").
Status validate_plan(const Plan& p, const ModelSpec& m, int accelerators, const std::string& file);

// validate_plan against a cluster, and where the ranks go: without stage_devices the plan uses
// every accelerator of the cluster's first group; with them, each stage's device must be one of
// the node's accelerators with enough of them for its stages' ranks, and fp8 must be supported.
Status validate_plan_on(const Plan& p, const ModelSpec& m, const ClusterSpec& c, const std::string& file);

// The accelerator group (index in node.devices) pipeline stage `stage` runs on.
int stage_group(const Plan& p, const NodeSpec& node, int stage);
// The device pipeline stage `stage` runs on: its group's (Plan::stage_devices), else the node's
// accelerator.
const DeviceSpec& stage_accelerator(const Plan& p, const NodeSpec& node, int stage);

// Whether the backward's column-parallel input-gradient collectives run beside their weight
// gradients as Plan::overlap_tp_dgrad describes: asked for, with TP, and not taken over by
// userbuffers (overlap_tp_comm with sequence parallelism pairs them itself).
inline bool async_tp_dgrad(const Plan& p) {
  return p.overlap_tp_dgrad && p.tp > 1 && !(p.overlap_tp_comm && p.sequence_parallel);
}

// Where each rank runs: the index of its device in the cluster's topology, where node n's
// accelerators are numbered n*slots + (its group's offset in the node) + (index in the group).
// A group's ranks (Megatron order) fill its devices node by node. Identity on single-group nodes.
// Plan::rank_order and node_order permute the placement (single-group nodes).
std::vector<int> rank_devices(const Plan& p, const ClusterSpec& c);
// Node i of the job runs on node perm[i] of the cluster: the identity, or under node_order
// "shuffled" a fixed pseudo-random permutation.
std::vector<int> node_permutation(const Plan& p, int nodes);

}  // namespace foresight
