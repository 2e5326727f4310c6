// The op interpreter: each vertex of the rank's stage program becomes an action on real tensors.
#include "runtime/training/trainer.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <tuple>

#include "runtime/backends/cpu_fast.h"
#include "runtime/communication/grad_compression.h"
#include "runtime/training/algorithms.h"
#include "runtime/training/checkpoint.h"
#include "runtime/training/hash.h"
#include "sim/spec/json_reader.h"

namespace foresight::runtime {

namespace {

using Vec = DeviceBuffer;

enum class Act : std::uint8_t {
  kEmbedFwd,
  kEmbedBwd,
  kFinalNormFwd,
  kFinalNormBwd,
  kHeadGather,
  kHeadFwd,
  kCeGather,
  kCeGrad,
  kHeadBwd,
  kHeadReduce,
  kKernelFwd,
  kKernelBwd,
  kRecvAct,
  kSendAct,
  kRecvGrad,
  kSendGrad,
  kPpGather,
  kTpFwd,
  kTpBwd,
  kSpGatherFwd,
  kSpScatterFwd,
  kSpGatherBwd,
  kSpScatterBwd,
  kLayerGradReduce,
  kGradReduce,
  kOptimizer,
  kParamGather,
  kGradCompress,
  kGradDecompress,
  // Nothing to run: the last quarter of a pipelined reduce-scatter (TpOverlap::kPipeline), which
  // the runtime reduces whole at its first op.
  kNone
};

struct Action {
  Act act = Act::kOptimizer;
  KernelName kernel = KernelName::kNorm1;
  bool recompute = false;
  int target = 0;  // TP collectives: 0 = attention block, 1 = MLP block
  int peer = -1;   // pipeline transfers: peer rank
  int tag = 0;
};

// Activations of one layer for one micro-batch.
struct LayerActs {
  // With sequence parallelism x_in, n1, y, h, n2 and z hold this rank's slice of the tokens and
  // n1g, n2g the gathered norms the column-parallel GEMMs read.
  Vec x_in, n1, n1g, rstd1, mean1, qkv, scores, probs, attn, y, h, n2, n2g, rstd2, mean2, up, act, z;
  std::array<Vec*, 18> tensors() {
    return {&x_in, &n1, &n1g, &rstd1, &mean1, &qkv,   &scores, &probs, &attn,
            &y,    &h,  &n2,  &n2g,   &rstd2, &mean2, &up,     &act,   &z};
  }
  void keep_only_input() {
    for (Vec* v : tensors())
      if (v != &x_in) v->release();
  }
  void bind(Backend* b) {
    for (Vec* v : tensors()) v->bind(b);
  }
};

// The state of one micro-batch on one chunk: its hidden state moving forward, its gradient moving
// backward, the head's saved tensors and the backward scratch.
struct Flow {
  Vec x, dx;
  std::vector<int> tokens;   // rows x (seq + 1)
  std::vector<int> targets;  // rows x seq: the next tokens, for the head (set by its forward)
  Vec head_n, head_ng, head_rstd, head_mean, logits;
  Vec ce_stats;  // TP: every rank's row maxima, sums of exponentials and target logits (3 x rows each)
  Vec dh, dg, dact, dup, dn2, dattn, dqkv, dn1, dprobs, dscores, tmp,
      dlogits;  // dg: a gathered output gradient (SP)
  std::array<Vec*, 20> tensors() {
    return {&x,    &dx,  &head_n, &head_ng, &head_rstd, &head_mean, &logits, &ce_stats, &dh,  &dg,
            &dact, &dup, &dn2,    &dattn,   &dqkv,      &dn1,       &dprobs, &dscores,  &tmp, &dlogits};
  }
  void bind(Backend* b) {
    for (Vec* v : tensors()) v->bind(b);
  }
  // Back to the state of a micro-batch that has not started (the buffers freed).
  void reset() {
    for (Vec* v : tensors()) v->release();
    std::vector<int>().swap(tokens);
    std::vector<int>().swap(targets);
  }
};

}  // namespace

Status check_runtime_plan(const ModelSpec& m, const Plan& p, const std::string& file) {
  auto bad = [&](const std::string& field, const std::string& why) {
    return Error(file + ": /" + field + ": " + why + " (the runtime does not execute this yet)");
  };
  if (m.is_moe())
    return Error(file + ": model " + m.name +
                 " is a mixture of experts; the runtime executes dense models only so far");
  if (m.mla.enabled())
    return Error(file + ": model " + m.name +
                 " uses multi-head latent attention; the runtime executes MHA/GQA only so far");
  if (m.bias)
    return Error(file + ": model " + m.name + " has linear biases; the runtime's layers have none so far");
  if (m.dropout)
    return Error(file + ": model " + m.name + " has dropout; the runtime does not apply dropout so far");
  if (m.tied_embeddings)
    return Error(file + ": model " + m.name + " ties its embeddings; the runtime keeps them separate so far");
  if (p.cp > 1) return bad("cp", "context parallelism");
  if (p.ep > 1) return bad("ep", "expert parallelism");
  if (p.zero_stage > 1) return bad("zero_stage", "ZeRO-" + std::to_string(p.zero_stage) + " (0 and 1 run)");
  if (p.offload_optimizer) return bad("offload_optimizer", "optimizer offload");
  if (p.offload_params) return bad("offload_params", "parameter offload");
  if (p.cuda_graphs) return bad("cuda_graphs", "CUDA graphs");
  if (!p.stage_tp.empty()) return bad("stage_tp", "per-stage tensor-parallel degrees");
  if (!(p.data == DataLoading{}))
    return bad("data", "a data-loading model (it trains on synthetic batches made in the loop)");
  if (!p.attention_device.empty()) return bad("attention_device", "attention on another device");
  static const Plan defaults;
  if (p.rank_order != defaults.rank_order || p.node_order != defaults.node_order)
    return bad("rank_order", "a rank order or node order of its own");
  if (!p.kernel_fusion && !p.flash_attention)
    return bad("kernel_fusion",
               "the unfused scale, mask and softmax chain (unfused plans run with flash attention)");
  if (p.offload_activations) return bad("offload_activations", "activation offload");
  if (p.repeat_kv)
    return bad("repeat_kv",
               "K and V repeated to every query head (its attention reads the kv heads directly)");
  if (p.recompute_early_stop)
    return bad("recompute_early_stop",
               "a full recompute that stops before the MLP's down projection (its re-run is the whole "
               "forward)");
  if (p.recompute == Recompute::kSelectiveOp)
    return bad("recompute",
               "torchtitan's op-level policy, selective-op (none, selective, full and optimal run)");
  if (p.offload_embeddings) return bad("offload_embeddings", "embedding offload");
  if (p.grad_compression == GradCompression::kPowerSgd || p.grad_compression == GradCompression::kFourStage)
    return bad("grad_compression",
               to_string(p.grad_compression) + " gradient compression (int8 and topk run)");
  if (p.grad_compression != GradCompression::kNone && p.precision == Precision::kFp16)
    return bad("grad_compression",
               to_string(p.grad_compression) +
                   " gradient compression with fp16 loss scaling (an overflowed gradient would enter "
                   "the int8 scales and the top-k residual)");
  if (!p.stage_devices.empty()) return bad("stage_devices", "per-stage devices");
  if (p.schedule == Schedule::kZeroBubble || p.schedule == Schedule::kDualPipe)
    return bad("schedule", to_string(p.schedule) + " (gpipe, 1f1b and interleaved run)");
  if (m.kv_heads % p.tp != 0)
    return Error(file + ": /tp: " + std::to_string(p.tp) + " does not divide the model's kv_heads (" +
                 std::to_string(m.kv_heads) + "); the runtime splits whole kv heads");
  const int seq = effective_seq_len(p, m);
  if (p.sequence_parallel && p.tp > 1 && (static_cast<long long>(p.micro_batch) * seq) % p.tp != 0)
    return Error(file + ": /tp: sequence parallelism splits the " + std::to_string(p.micro_batch * seq) +
                 " tokens of a micro-batch, which " + std::to_string(p.tp) + " does not divide");
  if (m.vocab % p.tp != 0)
    return Error(file + ": /tp: " + std::to_string(p.tp) + " does not divide the vocabulary (" +
                 std::to_string(m.vocab) + "); the LM head is split by vocabulary");
  if (p.pp > 1 && p.tp > 1 && !p.sequence_parallel &&
      (static_cast<long long>(p.micro_batch) * seq) % p.tp != 0)
    return Error(file + ": /tp: pipeline transfers send 1/tp of the " + std::to_string(p.micro_batch * seq) +
                 " tokens of a micro-batch from each TP rank, which " + std::to_string(p.tp) +
                 " does not divide");
  if (m.ffn_hidden % p.tp != 0)
    return Error(file + ": /tp: " + std::to_string(p.tp) + " does not divide ffn_hidden (" +
                 std::to_string(m.ffn_hidden) + ")");
  if ((m.q_dim() / m.heads) % 2 != 0)
    return Error(file + ": model " + m.name + ": rotary embeddings need an even head_dim");
  return Status::Ok();
}

void synthetic_tokens(std::uint64_t seed, int step, std::int64_t sample, int seq, int vocab, int* out) {
  const std::uint64_t base = splitmix64(
      seed ^ splitmix64(static_cast<std::uint64_t>(step) << 40 ^ static_cast<std::uint64_t>(sample)));
  int x = static_cast<int>(base % static_cast<std::uint64_t>(vocab));
  for (int i = 0; i <= seq; ++i) {
    out[i] = x;
    const std::uint64_t r = splitmix64(base + static_cast<std::uint64_t>(i) + 1);
    // The rule a model can learn: x -> (3x + 1) mod vocab; one token in ten is noise.
    x = (r % 10 == 0) ? static_cast<int>((r >> 8) % static_cast<std::uint64_t>(vocab)) : (3 * x + 1) % vocab;
  }
}

struct Trainer::Impl {
  const Workload* w = nullptr;
  Comm* world = nullptr;
  Comm tp_comm, dp_comm;                    // the MPI groups (host values; bootstraps of the backend's)
  std::unique_ptr<Backend> be;              // declared before every tensor: it outlives them
  std::unique_ptr<GroupComm> tp, dp, pipe;  // the backend's groups: TP, DP, the world's transfers
  RunOptions opt;
  int rank = 0, stage = 0, tp_rank = 0, dp_rank = 0;
  int chunks = 1, micro = 1, mbs = 1, seq = 1, hidden = 1, vocab = 1;
  kernels::AttentionShape attn_shape;
  ParamLayout layout;
  Vec params, grads, adam_m, adam_v;
  std::vector<std::size_t> owned_offset;  // ZeRO-1: per region, offset of its owned block in adam_m/v
  std::vector<char> reduced;              // per region: gradients reduced this step
  // Gradient compression (plan.grad_compression int8 or topk; empty otherwise): per region its
  // compressor and this step's progress, and the top-k error-feedback residual (training state,
  // indexed like grads).
  std::vector<RegionCompressor> compressors;
  std::vector<char> compressed, decompressed;
  std::vector<char> own_decompress;  // per region: the graph decompresses it in an op of its own (per layer)
  Vec residual;
  double dp_bytes = 0;  // this step's DP gradient collectives, sized as the graph sizes them
  std::vector<Action> actions;
  std::vector<int> layer_index;  // model layer -> local index (-1 elsewhere)
  // Per model layer on this stage: the recompute modules it drops after its forward (the
  // workload's per-layer sets, or the plan's policy by the layer's place in its chunk), and under
  // the uniform method whether the next layer is in its group (the group keeps only its input).
  std::vector<RecomputeMask> layer_recompute;
  std::vector<char> group_continues;
  std::vector<LayerActs> acts;  // local layer x micro-batch
  std::vector<Flow> flows;      // micro-batch x chunk
  std::vector<OpTiming> timings;
  int steps_done = 0;
  double loss_scale = 1;     // the dynamic fp16 scale (halved on overflow, doubled after a window)
  double applied_scale = 1;  // what this step uses: loss_scale, or its variance-adjusted value
  int good_steps = 0;
  std::deque<double> recent_losses;  // the variance-adaptive loss scale's window
  Vec grad_avg;                      // decayed gradient accumulation (owned blocks, like adam_m)
  double loss_sum = 0;
  bool fp16 = false;
  Buffer stats_host, scale_host;  // the vocabulary-parallel cross-entropy's host side
  struct Marked {
    int op, start, end;
    double bytes;  // Backend::live_bytes after the op was issued
  };
  std::vector<Marked> marks;  // this step's ops and their backend clock marks

  bool sp = false;  // sequence parallelism: the residual stream holds tokens / tp rows
  int tokens() const { return mbs * seq; }
  int rows() const { return sp ? tokens() / w->plan.tp : tokens(); }
  // Sequence parallelism's collectives on the TP group: the slices gathered in rank order, and the
  // partial sums reduced and scattered back to slices.
  void gather_rows(const Vec& slice, Vec& full) {
    full.resize(slice.size() * static_cast<std::size_t>(tp_comm.size()));
    be->copy(full.data() + slice.size() * tp_comm.rank(), slice.data(), slice.size());
    tp->all_gather(full.data(), full.size());
  }
  void scatter_rows(Vec& t) {  // in place: full partial sums -> this rank's reduced slice
    Vec slice(be.get());
    slice.resize(t.size() / static_cast<std::size_t>(tp_comm.size()));
    tp->reduce_scatter(t.data(), slice.data(), t.size());
    t.swap(slice);
  }
  void gemm_forward(Vec& out, const Vec& in, const float* w, int rows, int k, int n) {
    out.resize(static_cast<std::size_t>(rows) * n);
    be->gemm_forward(out.data(), in.data(), w, rows, k, n);
  }
  void gemm_backward(Vec& din, float* dw, const Vec& dout, const Vec& in, const float* w, int rows, int k,
                     int n) {
    din.resize(static_cast<std::size_t>(rows) * k);
    be->gemm_backward(din.data(), dw, dout.data(), in.data(), w, rows, k, n);
  }
  LayerActs& layer_acts(int layer, int mb) {
    return acts[static_cast<std::size_t>(layer_index[layer]) * micro + mb];
  }
  Flow& flow(int mb, int chunk) { return flows[static_cast<std::size_t>(mb) * chunks + chunk]; }
  float* p(const char* name, int layer) { return params.data() + layout.find(name, layer)->offset; }
  float* g(const char* name, int layer) { return grads.data() + layout.find(name, layer)->offset; }
  const int* sample_tokens(Flow& f, int mb) {
    if (f.tokens.empty()) {
      f.tokens.resize(static_cast<std::size_t>(mbs) * (seq + 1));
      for (int r = 0; r < mbs; ++r) {
        const std::int64_t sample = (static_cast<std::int64_t>(dp_rank) * micro + mb) * mbs + r;
        synthetic_tokens(opt.seed, steps_done, sample, seq, vocab,
                         f.tokens.data() + static_cast<std::size_t>(r) * (seq + 1));
      }
    }
    return f.tokens.data();
  }

  Status decode();
  Status decode_compute(const Op& op, int v, Action& a);
  Status decode_collective(const Op& op, int v, Action& a);
  Status decode_transfer(const Op& op, int v, Action& a);
  Error unsupported(int v) const;
  void norm_forward(const char* w_name, const char* b_name, int layer, const Vec& x, Vec& out, Vec& rstd,
                    Vec& mean);
  void norm_backward(const char* w_name, const char* b_name, int layer, const Vec& dout, const Vec& x,
                     const Vec& rstd, const Vec& mean, Vec& dx);
  void kernel_forward(KernelName k, int layer, int mb, int chunk, bool recompute);
  void attention_block_forward(KernelName k, int layer, LayerActs& a, RecomputeMask mask, bool recompute);
  void mlp_block_forward(KernelName k, int layer, LayerActs& a, RecomputeMask mask, bool recompute);
  void layer_output_forward(int layer, int mb, LayerActs& a, Flow& f, RecomputeMask mask, bool recompute);
  void kernel_backward(KernelName k, int layer, int mb, int chunk);
  void head_forward(Flow& f, int mb);
  void cross_entropy_grad(Flow& f);
  void head_backward(Flow& f);
  // The input token of each of this rank's `rows` rows from `first_row` on (tokens: the
  // micro-batch's sequences of seq + 1), in a buffer reused by every micro-batch.
  std::vector<int> ids_scratch;
  const std::vector<int>& input_ids(const int* tok, int first_row, int rows) {
    ids_scratch.resize(static_cast<std::size_t>(rows));
    for (int row = 0; row < rows; ++row) {
      const int t = first_row + row;
      ids_scratch[static_cast<std::size_t>(row)] =
          tok[static_cast<std::size_t>(t / seq) * (seq + 1) + t % seq];
    }
    return ids_scratch;
  }
  // The micro-batch's next-token targets, rows x seq, kept in the flow for the head's later passes.
  const std::vector<int>& head_targets(Flow& f, int mb) {
    const int* tok = sample_tokens(f, mb);
    f.targets.resize(static_cast<std::size_t>(tokens()));
    for (int r = 0; r < mbs; ++r)
      for (int i = 0; i < seq; ++i)
        f.targets[static_cast<std::size_t>(r) * seq + i] =
            tok[static_cast<std::size_t>(r) * (seq + 1) + i + 1];
    return f.targets;
  }
  // d(mean loss over the global batch) / d(token loss), times the loss scale.
  float loss_grad() const {
    return static_cast<float>(applied_scale / (static_cast<double>(w->plan.global_batch) * seq));
  }
  void sum_replicated_over_tp(int region);
  void compress_region(int region);
  void reduce_region(int region);
  void decompress_region(int region);
  void optimizer(StepStats& st);
  void execute(int v, StepStats& st);
  void embed_and_head(Act act, const Op& op);
  void pipeline_transfer(const Action& a, const Op& op);
  void tensor_parallel(const Action& a, const Op& op);
  void gradients_and_update(const Action& a, const Op& op, StepStats& st);

  // Trainer::create's steps.
  void init_shape(const Workload& wl, Comm& world_comm, const RunOptions& o);
  Status init_comms(Comm& world_comm);
  std::vector<int> init_layers();
  void init_params(const std::vector<int>& layers);
  void init_optimizer_state();
  Status init_compression();
  void init_activations(const std::vector<int>& layers);
};

Error Trainer::Impl::unsupported(int v) const {
  return Error("runtime: op " + w->op_id(rank, stage, v) + " is not executed by the runtime yet");
}

// The action of each op of this rank's stage graph, or an error naming the first op the runtime
// does not execute.
Status Trainer::Impl::decode() {
  const OpGraph& g = w->stages[stage].graph();
  const int n = static_cast<int>(boost::num_vertices(g));
  actions.resize(n);
  for (int v = 0; v < n; ++v) {
    const Op& op = g[v];
    Action& a = actions[v];
    switch (op.kind) {
      case OpKind::kCompute:
        FS_RETURN_IF_ERROR(decode_compute(op, v, a));
        break;
      case OpKind::kCollective:
        FS_RETURN_IF_ERROR(decode_collective(op, v, a));
        break;
      case OpKind::kSend:
      case OpKind::kRecv:
        FS_RETURN_IF_ERROR(decode_transfer(op, v, a));
        break;
      case OpKind::kCopy:
        return unsupported(v);
    }
  }
  return Status::Ok();
}

Status Trainer::Impl::decode_compute(const Op& op, int v, Action& a) {
  const std::string name = op.name;
  if (name == "grad_compress" || name == "grad_decompress") {
    if (compressors.empty()) return unsupported(v);
    a.act = name == "grad_compress" ? Act::kGradCompress : Act::kGradDecompress;
    if (a.act == Act::kGradDecompress && op.layer >= 0) own_decompress[layout.region_of_layer(op.layer)] = 1;
  } else if (op.phase == Phase::kStep) {
    if (name != "optimizer") return unsupported(v);
    a.act = Act::kOptimizer;
  } else if (name == "embedding") {
    a.act = op.phase == Phase::kForward ? Act::kEmbedFwd : Act::kEmbedBwd;
  } else if (name == "lm_head_loss") {
    a.act = op.phase == Phase::kForward ? Act::kHeadFwd : Act::kHeadBwd;
  } else if (name == "final_norm") {
    a.act = op.phase == Phase::kForward ? Act::kFinalNormFwd : Act::kFinalNormBwd;
  } else if (name == "cross_entropy_grad" && op.phase == Phase::kForward) {
    a.act = Act::kCeGrad;
  } else {
    int k = 0;
    while (k < static_cast<int>(KernelName::kCount) && kernel_name(static_cast<KernelName>(k)) != name) ++k;
    if (k == static_cast<int>(KernelName::kCount) || op.phase == Phase::kWeightGrad) return unsupported(v);
    a.kernel = static_cast<KernelName>(k);
    a.act = op.phase == Phase::kBackward ? Act::kKernelBwd : Act::kKernelFwd;
    a.recompute = op.phase == Phase::kRecompute;
  }
  return Status::Ok();
}

Status Trainer::Impl::decode_collective(const Op& op, int v, Action& a) {
  const std::string name = op.name;
  const Plan& plan = w->plan;
  if (name == "attn.tp_all_reduce" || name == "mlp.tp_all_reduce") {
    // Forward: the row-parallel GEMM's partial output (proj: y, mlp_down: z); backward: the
    // input gradient of the column-parallel GEMM (qkv: dn1, mlp_up: dn2).
    a.act = op.phase == Phase::kBackward ? Act::kTpBwd : Act::kTpFwd;
    a.target = name[0] == 'a' ? 0 : 1;
  } else if (name == "attn.tp_all_gather" || name == "mlp.tp_all_gather" ||
             name == "attn.tp_reduce_scatter" || name == "mlp.tp_reduce_scatter") {
    // Sequence parallelism. Forward: gather the norm's output before the column-parallel
    // GEMM, reduce-scatter the row-parallel GEMM's output. Backward (conjugates): gather the
    // output gradient before the row-parallel GEMM, reduce-scatter the input gradient after
    // the column-parallel one.
    const bool gather = name.find("all_gather") != std::string::npos;
    const bool bwd = op.phase == Phase::kBackward;
    a.act = gather ? (bwd ? Act::kSpGatherBwd : Act::kSpGatherFwd)
                   : (bwd ? Act::kSpScatterBwd : Act::kSpScatterFwd);
    a.target = name[0] == 'a' ? 0 : 1;
  } else if (name == "attn.tp_reduce_scatter_tail" || name == "mlp.tp_reduce_scatter_tail") {
    a.act = Act::kNone;
  } else if (name == "lm_head.tp_all_gather" && op.phase == Phase::kForward) {
    a.act = Act::kHeadGather;
  } else if (name == "ce.tp_all_gather" && op.phase == Phase::kForward) {
    a.act = Act::kCeGather;
  } else if ((name == "lm_head.tp_all_reduce" || name == "lm_head.tp_reduce_scatter") &&
             op.phase == Phase::kBackward) {
    a.act = Act::kHeadReduce;
  } else if (((name == "grad_all_reduce" || name == "grad_reduce_scatter") && op.layer >= 0) ||
             (name == "grad_reduce" && op.group == GroupKind::kDp)) {
    a.act = op.layer >= 0 ? Act::kLayerGradReduce : Act::kGradReduce;
    // A compressed reduction runs as the graph's collective kind says (grad_compression.h).
    const CollectiveOp want =
        plan.grad_compression == GradCompression::kTopK ? CollectiveOp::kAllGather : CollectiveOp::kAllReduce;
    if (!compressors.empty() && op.collective != want)
      return Error("runtime: op " + w->op_id(rank, stage, v) + " is a " +
                   std::string(to_string(op.collective)) + "; the runtime executes " +
                   to_string(plan.grad_compression) + " compression as a " + std::string(to_string(want)));
  } else if (name == "param_all_gather" && op.phase == Phase::kStep) {
    a.act = Act::kParamGather;
  } else if (name == "pp_activation_all_gather" || name == "pp_gradient_all_gather") {
    a.act = Act::kPpGather;  // after a pipeline receive of 1/tp of the rows (no SP)
  } else {
    return unsupported(v);
  }
  return Status::Ok();
}

// A pipeline send or receive: its peer is the same TP and DP rank on the op's peer stage; a
// message's tag is the receiving op's vertex.
Status Trainer::Impl::decode_transfer(const Op& op, int v, Action& a) {
  const Plan& plan = w->plan;
  const int tp = rank % plan.tp, dp = (rank / plan.tp) % plan.dp;
  const bool fwd = op.phase == Phase::kForward;
  if (op.kind == OpKind::kSend)
    a.act = fwd ? Act::kSendAct : Act::kSendGrad;
  else
    a.act = fwd ? Act::kRecvAct : Act::kRecvGrad;
  a.peer = w->rank_of(tp, 0, dp, op.peer_stage);
  a.tag = op.kind == OpKind::kSend ? op.match : v;
  if (a.tag > Comm::max_tag())
    return Error("runtime: pipeline message tag " + std::to_string(a.tag) + " exceeds MPI_TAG_UB");
  return Status::Ok();
}

void Trainer::Impl::norm_forward(const char* w_name, const char* b_name, int layer, const Vec& x, Vec& out,
                                 Vec& rstd, Vec& mean) {
  const int T = rows(), H = hidden;
  out.resize(x.size());
  rstd.resize(static_cast<std::size_t>(T));
  if (w->model.norm == NormKind::kRmsNorm) {
    be->rmsnorm_forward(out.data(), rstd.data(), x.data(), p(w_name, layer), T, H, 1e-5f,
                        w->plan.kernel_fusion);
  } else {
    mean.resize(static_cast<std::size_t>(T));
    be->layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), p(w_name, layer), p(b_name, layer),
                          T, H, 1e-5f);
  }
}

void Trainer::Impl::norm_backward(const char* w_name, const char* b_name, int layer, const Vec& dout,
                                  const Vec& x, const Vec& rstd, const Vec& mean, Vec& dx) {
  const int T = rows(), H = hidden;
  dx.resize(x.size());
  if (w->model.norm == NormKind::kRmsNorm)
    be->rmsnorm_backward(dx.data(), g(w_name, layer), dout.data(), x.data(), p(w_name, layer), rstd.data(), T,
                         H, w->plan.kernel_fusion);
  else
    be->layernorm_backward(dx.data(), g(w_name, layer), g(b_name, layer), dout.data(), x.data(),
                           p(w_name, layer), mean.data(), rstd.data(), T, H);
}

// One forward kernel of a layer: the attention block's, the MLP block's, or the layer's output.
// A recompute re-runs a kernel whose output the layer's recompute modules dropped.
void Trainer::Impl::kernel_forward(KernelName k, int layer, int mb, int chunk, bool recompute) {
  LayerActs& a = layer_acts(layer, mb);
  const RecomputeMask mask = layer_recompute[static_cast<std::size_t>(layer)];
  switch (k) {
    case KernelName::kNorm1:
      if (!recompute) a.x_in.copy_from(flow(mb, chunk).x);
      [[fallthrough]];
    case KernelName::kQkv:
    case KernelName::kAttention:
    case KernelName::kScores:
    case KernelName::kSoftmax:
    case KernelName::kAttnV:
    case KernelName::kProj:
      attention_block_forward(k, layer, a, mask, recompute);
      break;
    case KernelName::kResidual1:
    case KernelName::kNorm2:
    case KernelName::kMlpUp:
    case KernelName::kActivation:
    case KernelName::kMlpDown:
      mlp_block_forward(k, layer, a, mask, recompute);
      break;
    case KernelName::kResidual2:
      layer_output_forward(layer, mb, a, flow(mb, chunk), mask, recompute);
      break;
    default:
      break;  // MoE kernels: refused by check_runtime_plan
  }
}

void Trainer::Impl::attention_block_forward(KernelName k, int layer, LayerActs& a, RecomputeMask mask,
                                            bool recompute) {
  const int T = tokens(), H = hidden;
  const int qkv_w = attn_shape.qkv_width(), attn_w = attn_shape.q_heads * attn_shape.head_dim;
  switch (k) {
    case KernelName::kNorm1:
      norm_forward("norm1.weight", "norm1.bias", layer, a.x_in, a.n1, a.rstd1, a.mean1);
      break;
    case KernelName::kQkv:
      gemm_forward(a.qkv, sp ? a.n1g : a.n1, p("qkv", layer), T, H, qkv_w);
      // layernorm: the norm's output goes (with SP its gathered copy stays: the partial recompute
      // re-runs no collective).
      if (!recompute && (mask & recompute_module::kLayernorm)) a.n1.release();
      if (w->model.rope) be->rope(a.qkv.data(), attn_shape, 10000.0f, false);
      break;
    case KernelName::kAttention:
      a.probs.resize(attn_shape.score_elems());
      a.attn.resize(static_cast<std::size_t>(T) * attn_w);
      be->attention_forward(a.attn.data(), a.probs.data(), a.qkv.data(), attn_shape);
      break;
    case KernelName::kScores:
      a.scores.resize(attn_shape.score_elems());
      be->attention_scores(a.scores.data(), a.qkv.data(), attn_shape);
      break;
    case KernelName::kSoftmax:
      a.probs.resize(attn_shape.score_elems());
      be->causal_softmax_forward(a.probs.data(), a.scores.data(), attn_shape);
      break;
    case KernelName::kAttnV:
      a.attn.resize(static_cast<std::size_t>(T) * attn_w);
      be->attention_values(a.attn.data(), a.probs.data(), a.qkv.data(), attn_shape);
      // core_attn (selective recompute): the s^2 tensors are dropped and rebuilt in the backward.
      if (!recompute && (mask & recompute_module::kCoreAttn)) {
        a.scores.release();
        a.probs.release();
      }
      break;
    case KernelName::kProj:
      gemm_forward(a.y, a.attn, p("proj", layer), T, attn_w, H);
      break;
    default:
      break;
  }
}

void Trainer::Impl::mlp_block_forward(KernelName k, int layer, LayerActs& a, RecomputeMask mask,
                                      bool recompute) {
  const int T = tokens(), H = hidden;
  const TensorSlot* up = layout.find("mlp_up", layer);
  const int ffn = layout.find("mlp_down", layer)->rows;
  switch (k) {
    case KernelName::kResidual1:
      a.h.resize(a.x_in.size());
      be->add(a.h.data(), a.x_in.data(), a.y.data(), a.h.size());
      break;
    case KernelName::kNorm2:
      norm_forward("norm2.weight", "norm2.bias", layer, a.h, a.n2, a.rstd2, a.mean2);
      break;
    case KernelName::kMlpUp:
      gemm_forward(a.up, sp ? a.n2g : a.n2, p("mlp_up", layer), T, H, up->cols);
      if (!recompute && (mask & recompute_module::kLayernorm)) a.n2.release();
      break;
    case KernelName::kActivation:
      a.act.resize(static_cast<std::size_t>(T) * ffn);
      if (w->model.mlp == MlpKind::kSwiglu)
        be->swiglu_forward(a.act.data(), a.up.data(), T, ffn, w->plan.kernel_fusion);
      else
        be->gelu_forward(a.act.data(), a.up.data(), T, ffn);
      break;
    case KernelName::kMlpDown:
      gemm_forward(a.z, a.act, p("mlp_down", layer), T, ffn, H);
      // act: the activation's output goes; mlp: its input too (mlp_up and activation re-run).
      if (!recompute && (mask & (recompute_module::kAct | recompute_module::kMlp))) a.act.release();
      if (!recompute && (mask & recompute_module::kMlp)) a.up.release();
      break;
    default:
      break;
  }
}

// The second residual: the layer's output goes on to the next layer (the flow's hidden state),
// and the layer drops what its recompute modules say.
void Trainer::Impl::layer_output_forward(int layer, int mb, LayerActs& a, Flow& f, RecomputeMask mask,
                                         bool recompute) {
  if (recompute) {
    // The layer's output already went on. A uniform group re-runs its layers in turn: the
    // output is the next layer's input, which the group did not keep.
    if (group_continues[static_cast<std::size_t>(layer)]) {
      LayerActs& next = layer_acts(layer + 1, mb);
      next.x_in.resize(a.h.size());
      be->add(next.x_in.data(), a.h.data(), a.z.data(), next.x_in.size());
    }
    return;
  }
  f.x.resize(a.h.size());
  be->add(f.x.data(), a.h.data(), a.z.data(), f.x.size());
  if (mask & recompute_module::kFull) a.keep_only_input();
  // Uniform method: a group keeps only its first layer's input.
  if (layer > 0 && group_continues[static_cast<std::size_t>(layer - 1)]) a.x_in.release();
}

void Trainer::Impl::kernel_backward(KernelName k, int layer, int mb, int chunk) {
  LayerActs& a = layer_acts(layer, mb);
  Flow& f = flow(mb, chunk);
  const int T = tokens(), H = hidden;
  const int qkv_w = attn_shape.qkv_width(), attn_w = attn_shape.q_heads * attn_shape.head_dim;
  const TensorSlot* up = layout.find("mlp_up", layer);
  const int ffn = layout.find("mlp_down", layer)->rows;
  switch (k) {
    case KernelName::kResidual2:  // both branches get the output gradient; dh doubles as dz until norm2 adds
                                  // to it
      f.dh.swap(f.dx);
      break;
    case KernelName::kMlpDown:
      gemm_backward(f.dact, g("mlp_down", layer), sp ? f.dg : f.dh, a.act, p("mlp_down", layer), T, ffn, H);
      break;
    case KernelName::kActivation:
      f.dup.resize(a.up.size());
      if (w->model.mlp == MlpKind::kSwiglu)
        be->swiglu_backward(f.dup.data(), a.up.data(), f.dact.data(), T, ffn, w->plan.kernel_fusion);
      else
        be->gelu_backward(f.dup.data(), a.up.data(), f.dact.data(), T, ffn);
      break;
    case KernelName::kMlpUp:
      gemm_backward(f.dn2, g("mlp_up", layer), f.dup, sp ? a.n2g : a.n2, p("mlp_up", layer), T, H, up->cols);
      break;
    case KernelName::kNorm2:
      norm_backward("norm2.weight", "norm2.bias", layer, f.dn2, a.h, a.rstd2, a.mean2, f.tmp);
      be->add(f.dh.data(), f.dh.data(), f.tmp.data(), f.dh.size());
      break;
    case KernelName::kResidual1:  // dh is the projection's output gradient too (read-only from here)
      f.dx.copy_from(f.dh);
      break;
    case KernelName::kProj:
      gemm_backward(f.dattn, g("proj", layer), sp ? f.dg : f.dh, a.attn, p("proj", layer), T, attn_w, H);
      break;
    case KernelName::kAttention:
      f.dqkv.resize(static_cast<std::size_t>(T) * qkv_w);
      f.dscores.resize(be->attention_scratch(attn_shape));
      be->attention_backward(f.dqkv.data(), f.dscores.data(), f.dattn.data(), a.probs.data(), a.qkv.data(),
                             attn_shape);
      break;
    case KernelName::kAttnV:
      f.dqkv.resize(static_cast<std::size_t>(T) * qkv_w);
      f.dprobs.resize(attn_shape.score_elems());
      be->attention_values_backward(f.dprobs.data(), f.dqkv.data(), f.dattn.data(), a.probs.data(),
                                    a.qkv.data(), attn_shape);
      break;
    case KernelName::kSoftmax:
      f.dscores.resize(attn_shape.score_elems());
      be->causal_softmax_backward(f.dscores.data(), f.dprobs.data(), a.probs.data(), attn_shape);
      break;
    case KernelName::kScores:
      be->attention_scores_backward(f.dqkv.data(), f.dscores.data(), a.qkv.data(), attn_shape);
      break;
    case KernelName::kQkv:
      if (w->model.rope) be->rope(f.dqkv.data(), attn_shape, 10000.0f, true);  // back through the rotation
      gemm_backward(f.dn1, g("qkv", layer), f.dqkv, sp ? a.n1g : a.n1, p("qkv", layer), T, H, qkv_w);
      break;
    case KernelName::kNorm1:
      norm_backward("norm1.weight", "norm1.bias", layer, f.dn1, a.x_in, a.rstd1, a.mean1, f.tmp);
      be->add(f.dx.data(), f.dx.data(), f.tmp.data(), f.dx.size());
      a.keep_only_input();
      a.x_in.release();
      break;
    default:
      break;
  }
}

void Trainer::Impl::head_forward(Flow& f, int mb) {
  const int T = tokens(), H = hidden, V = vocab / w->plan.tp;  // this rank's vocabulary slice
  gemm_forward(f.logits, sp ? f.head_ng : f.head_n, p("lm_head", -1), T, H, V);
  const std::vector<int>& targets = head_targets(f, mb);
  f.dlogits.resize(f.logits.size());
  if (tp_comm.size() == 1) {
    // The logits' gradient comes out of the same pass (the backward only multiplies it through).
    loss_sum += be->crossentropy(f.dlogits.data(), f.logits.data(), targets.data(), loss_grad(), T, V);
  } else {
    // Vocabulary-parallel cross-entropy, first pass: this slice's row maximum m, sum of
    // exp(logit - m) (kept in the gradient buffer) and the target's logit where this slice has
    // it (else -inf), into this rank's block of the statistics the ranks then gather.
    const int first = tp_rank * V;
    f.ce_stats.assign_zero(3 * static_cast<std::size_t>(T) * tp_comm.size());
    float* st = f.ce_stats.data() + 3 * static_cast<std::size_t>(T) * tp_rank;
    be->softmax_row_stats(st, st + T, f.dlogits.data(), f.logits.data(), T, V);
    be->target_logits(st + 2 * T, f.logits.data(), targets.data(), first, T, V);
  }
  f.logits.release();
}

void Trainer::Impl::cross_entropy_grad(Flow& f) {
  // Second pass: the global maximum M and sum S = sum over slices of s_i exp(m_i - M); this
  // slice's gradient is exp(logit - m) * exp(m - M) / S (times the loss gradient), less one at
  // the target. Every TP rank has the full loss: it is counted once.
  const int T = tokens(), V = vocab / w->plan.tp, n = tp_comm.size();
  const std::vector<int>& targets = f.targets;  // set by head_forward
  const float dloss = loss_grad();
  const int first = tp_rank * V;
  // The statistics (3 x T per rank) are read on the host, which computes each row's factor: a
  // device backend's are copied out first.
  const float* stats = f.ce_stats.data();
  if (!be->host_memory()) {
    stats_host.resize(f.ce_stats.size());
    be->download(stats_host.data(), f.ce_stats.data(), f.ce_stats.size());
    stats = stats_host.data();
  }
  const float* mine = stats + 3 * static_cast<std::size_t>(T) * tp_rank;
  double s = 0;
  Buffer& scale = scale_host;
  scale.resize(static_cast<std::size_t>(T));
  for (int r = 0; r < T; ++r) {
    float M = -std::numeric_limits<float>::infinity(), target = M;
    for (int k = 0; k < n; ++k) {
      const float* st = stats + 3 * static_cast<std::size_t>(T) * k;
      M = std::max(M, st[r]);
      target = std::max(target, st[2 * T + r]);
    }
    double S = 0;
    for (int k = 0; k < n; ++k) {
      const float* st = stats + 3 * static_cast<std::size_t>(T) * k;
      S += static_cast<double>(st[T + r]) * std::exp(static_cast<double>(st[r]) - M);
    }
    scale[static_cast<std::size_t>(r)] =
        static_cast<float>(std::exp(static_cast<double>(mine[r]) - M) / S) * dloss;
    s += std::log(S) + M - target;
  }
  be->scale_rows(f.dlogits.data(), scale.data(), T, V);
  be->add_at_targets(f.dlogits.data(), targets.data(), first, T, V, -dloss);
  f.ce_stats.resize(0);
  if (tp_rank == 0) loss_sum += s;
}

void Trainer::Impl::head_backward(Flow& f) {
  const int T = tokens(), H = hidden, V = vocab / w->plan.tp;
  gemm_backward(f.tmp, g("lm_head", -1), f.dlogits, sp ? f.head_ng : f.head_n, p("lm_head", -1), T, H, V);
  f.dlogits.release();
}

// With SP each TP rank saw only its tokens: the replicated tensors' gradients (norms, embedding)
// are partial sums over the group (Megatron all-reduces them the same way).
void Trainer::Impl::sum_replicated_over_tp(int region) {
  if (sp)
    for (const TensorSlot& t : layout.tensors())
      if (t.region == region && t.shard == Shard::kReplicated)
        tp->all_reduce(grads.data() + t.offset, t.size());
}

// grad_compress: the TP sums first, so the compressor sees the same gradient as the dense path.
void Trainer::Impl::compress_region(int region) {
  const Region& r = layout.regions()[region];
  compressed[region] = 1;
  sum_replicated_over_tp(region);
  if (r.padded == 0) return;
  compressors[region].compress(grads.data() + r.offset,
                               residual.empty() ? nullptr : residual.data() + r.offset);
}

void Trainer::Impl::decompress_region(int region) {
  const Region& r = layout.regions()[region];
  decompressed[region] = 1;
  if (r.padded == 0) return;
  if (!reduced[region])
    throw std::logic_error("region " + std::to_string(region) + " decompressed before its collective");
  compressors[region].decompress(grads.data() + r.offset);
}

void Trainer::Impl::reduce_region(int region) {
  const Region& r = layout.regions()[region];
  reduced[region] = 1;
  if (!compressors.empty()) {
    if (r.padded == 0) return;
    if (!compressed[region])
      throw std::logic_error("region " + std::to_string(region) + " reduced before grad_compress");
    compressors[region].exchange(dp_comm);
    if (dp_comm.size() > 1) dp_bytes += static_cast<double>(compressors[region].wire_bytes());
    return;
  }
  sum_replicated_over_tp(region);
  if (dp_comm.size() == 1 || r.padded == 0) return;
  dp_bytes +=
      static_cast<double>(r.padded * sizeof(float));  // all-reduce and reduce-scatter: the full buffer
  float* gr = grads.data() + r.offset;
  if (w->plan.zero_stage == 0) {
    dp->all_reduce(gr, r.padded);
  } else {
    const std::size_t block = r.padded / dp_comm.size();
    Vec mine(be.get());
    mine.resize(block);
    dp->reduce_scatter(gr, mine.data(), r.padded);
    be->copy(gr + block * dp_comm.rank(), mine.data(), block);
  }
}

void Trainer::Impl::optimizer(StepStats& st) {
  const bool zero1 = w->plan.zero_stage >= 1 && dp_comm.size() > 1;
  const auto& regions = layout.regions();
  for (std::size_t i = 0; i < compressors.size(); ++i)
    if (regions[i].padded > 0 && !decompressed[i])
      throw std::logic_error("region " + std::to_string(i) + "'s gradients reached the optimizer compressed");
  const std::size_t shards = static_cast<std::size_t>(dp_comm.size());
  // Loss scaling (fp16): an overflow anywhere skips the step on every rank.
  float grad_scale = 1.0f;
  if (fp16) {
    double overflow = 0;
    for (std::size_t i = 0; i < regions.size(); ++i) {
      const Region& r = regions[i];
      const std::size_t block = zero1 ? r.padded / shards : r.padded;
      const std::size_t off = r.offset + (zero1 ? block * dp_comm.rank() : 0);
      if (be->has_overflow(grads.data() + off, block, 65504.0f)) overflow = 1;
    }
    world->all_reduce(&overflow, 1);
    if (overflow > 0) {
      st.skipped = true;
      loss_scale = std::max(1.0, loss_scale / 2);
      good_steps = 0;
      return;
    }
    grad_scale = static_cast<float>(1.0 / applied_scale);
  }
  const int t = steps_done + 1;
  const AlgorithmOptions& alg = opt.algorithms;
  for (std::size_t i = 0; i < regions.size(); ++i) {
    const Region& r = regions[i];
    const std::size_t block = zero1 ? r.padded / shards : r.padded;
    const std::size_t off = r.offset + (zero1 ? block * dp_comm.rank() : 0);
    float* g = grads.data() + off;
    float scale = grad_scale;
    if (alg.grad_decay > 0) {
      // Unscale this step's gradients, fold them into the decayed average, step on the average.
      for (std::size_t k = 0; k < block; ++k) g[k] *= grad_scale;
      float* avg = grad_avg.data() + owned_offset[i];
      scale = static_cast<float>(decay_accumulate(avg, g, block, alg.grad_decay, t));
      g = avg;
    }
    if (alg.aradam_gamma > 0)
      aradam_cpu(params.data() + off, adam_m.data() + owned_offset[i], adam_v.data() + owned_offset[i], g,
                 block, opt.adam, t, scale, alg.aradam_gamma);
    else
      be->adamw(params.data() + off, adam_m.data() + owned_offset[i], adam_v.data() + owned_offset[i], g,
                block, opt.adam, t, scale);
  }
  if (fp16 && ++good_steps >= opt.loss_scale_window) {
    loss_scale *= 2;
    good_steps = 0;
  }
}

// Op v of this rank's stage graph, as decode mapped it.
void Trainer::Impl::execute(int v, StepStats& st) {
  const Op& op = w->stages[stage].graph()[v];
  const Action& a = actions[v];
  switch (a.act) {
    case Act::kEmbedFwd:
    case Act::kEmbedBwd:
    case Act::kFinalNormFwd:
    case Act::kFinalNormBwd:
    case Act::kHeadGather:
    case Act::kHeadFwd:
    case Act::kCeGather:
    case Act::kCeGrad:
    case Act::kHeadBwd:
    case Act::kHeadReduce:
      embed_and_head(a.act, op);
      break;
    case Act::kKernelFwd:
      kernel_forward(a.kernel, op.layer, op.micro_batch, op.chunk, a.recompute);
      break;
    case Act::kKernelBwd:
      kernel_backward(a.kernel, op.layer, op.micro_batch, op.chunk);
      break;
    case Act::kSendAct:
    case Act::kSendGrad:
    case Act::kRecvAct:
    case Act::kRecvGrad:
    case Act::kPpGather:
      pipeline_transfer(a, op);
      break;
    case Act::kTpFwd:
    case Act::kTpBwd:
    case Act::kSpGatherFwd:
    case Act::kSpScatterFwd:
    case Act::kSpGatherBwd:
    case Act::kSpScatterBwd:
      tensor_parallel(a, op);
      break;
    case Act::kLayerGradReduce:
    case Act::kGradReduce:
    case Act::kGradCompress:
    case Act::kGradDecompress:
    case Act::kOptimizer:
    case Act::kParamGather:
      gradients_and_update(a, op, st);
      break;
    case Act::kNone:
      break;
  }
}

// The embedding, the final norm, the LM head and its loss (vocabulary-parallel under TP).
void Trainer::Impl::embed_and_head(Act act, const Op& op) {
  const int mb = op.micro_batch, R = rows(), H = hidden;
  const int first_row = sp ? tp_rank * R : 0;  // this rank's token slice (SP)
  Flow& f = flow(mb, op.chunk);
  switch (act) {
    case Act::kEmbedFwd: {
      const std::vector<int>& ids = input_ids(sample_tokens(f, mb), first_row, R);
      f.x.resize(static_cast<std::size_t>(R) * H);
      be->embedding_forward(f.x.data(), p("embedding", -1), ids.data(), R, H);
      break;
    }
    case Act::kEmbedBwd: {
      const std::vector<int>& ids = input_ids(f.tokens.data(), first_row, R);
      be->embedding_backward(g("embedding", -1), f.dx.data(), ids.data(), R, H);
      f.reset();
      break;
    }
    case Act::kFinalNormFwd:
      norm_forward("final_norm.weight", "final_norm.bias", -1, f.x, f.head_n, f.head_rstd, f.head_mean);
      break;
    case Act::kHeadGather:  // SP: the vocabulary-parallel head reads every token (Megatron)
      gather_rows(f.head_n, f.head_ng);
      break;
    case Act::kHeadFwd:
      head_forward(f, mb);
      break;
    case Act::kCeGather:
      tp->all_gather(f.ce_stats.data(), f.ce_stats.size());
      break;
    case Act::kCeGrad:
      cross_entropy_grad(f);
      break;
    case Act::kHeadBwd:
      head_backward(f);
      break;
    case Act::kHeadReduce:  // the input gradient is partial over the vocabulary slices
      if (sp)
        scatter_rows(f.tmp);
      else
        tp->all_reduce(f.tmp.data(), f.tmp.size());
      break;
    case Act::kFinalNormBwd:
      norm_backward("final_norm.weight", "final_norm.bias", -1, f.tmp, f.x, f.head_rstd, f.head_mean, f.dx);
      f.head_n.release();
      f.head_ng.release();
      break;
    default:
      break;
  }
}

// Activations forward, gradients backward; a gradient sent ends the micro-batch on this stage.
void Trainer::Impl::pipeline_transfer(const Action& a, const Op& op) {
  Flow& f = flow(op.micro_batch, op.chunk);
  const bool fwd = op.phase == Phase::kForward;
  // Without SP the TP ranks hold the same rows: each sends its 1/tp of them and the receiving
  // group all-gathers them (Megatron's scatter-gather pipeline transfers), as the graph says.
  const bool sliced = tp_comm.size() > 1 && !sp;
  const std::size_t full = static_cast<std::size_t>(rows()) * hidden;
  const std::size_t part = sliced ? full / static_cast<std::size_t>(tp_comm.size()) : full;
  const std::size_t offset = sliced ? part * static_cast<std::size_t>(tp_comm.rank()) : 0;
  if (a.act == Act::kSendAct || a.act == Act::kSendGrad) {
    Vec& t = a.act == Act::kSendAct ? f.x : f.dx;
    if (sliced) {
      Vec slice(be.get());
      slice.resize(part);
      be->copy(slice.data(), t.data() + offset, part);
      t.release();
      pipe->send(std::move(slice), a.peer, a.tag);
    } else {
      pipe->send(std::move(t), a.peer, a.tag);
    }
    if (a.act == Act::kSendGrad) f.reset();
    return;
  }
  Vec& into = (a.act == Act::kPpGather ? fwd : a.act == Act::kRecvAct) ? f.x : f.dx;
  if (a.act == Act::kPpGather) {
    tp->all_gather(into.data(), into.size());
    return;
  }
  into.resize(full);
  pipe->recv(into.data() + offset, part, a.peer, a.tag);
}

// The TP group's collectives inside a layer: all-reduces, and sequence parallelism's gathers and
// reduce-scatters.
void Trainer::Impl::tensor_parallel(const Action& a, const Op& op) {
  switch (a.act) {
    case Act::kTpFwd: {
      LayerActs& la = layer_acts(op.layer, op.micro_batch);
      Vec& t = a.target == 0 ? la.y : la.z;
      tp->all_reduce(t.data(), t.size());
      break;
    }
    case Act::kTpBwd: {
      Flow& f = flow(op.micro_batch, op.chunk);
      Vec& t = a.target == 0 ? f.dn1 : f.dn2;
      tp->all_reduce(t.data(), t.size());
      break;
    }
    case Act::kSpGatherFwd: {
      LayerActs& la = layer_acts(op.layer, op.micro_batch);
      if (a.target == 0)
        gather_rows(la.n1, la.n1g);
      else
        gather_rows(la.n2, la.n2g);
      break;
    }
    case Act::kSpScatterFwd: {
      LayerActs& la = layer_acts(op.layer, op.micro_batch);
      scatter_rows(a.target == 0 ? la.y : la.z);
      break;
    }
    case Act::kSpGatherBwd: {  // the output gradient of the row-parallel GEMM (proj or mlp_down)
      Flow& f = flow(op.micro_batch, op.chunk);
      gather_rows(f.dh, f.dg);
      break;
    }
    case Act::kSpScatterBwd: {
      Flow& f = flow(op.micro_batch, op.chunk);
      scatter_rows(a.target == 0 ? f.dn1 : f.dn2);
      break;
    }
    default:
      break;
  }
}

// The data-parallel gradient reduction (compressed or not), the optimizer, and ZeRO-1's
// parameter all-gather.
void Trainer::Impl::gradients_and_update(const Action& a, const Op& op, StepStats& st) {
  switch (a.act) {
    case Act::kLayerGradReduce:
      reduce_region(layout.region_of_layer(op.layer));
      break;
    case Act::kGradReduce:
      for (std::size_t r = 0; r < reduced.size(); ++r)
        if (!reduced[r]) reduce_region(static_cast<int>(r));
      break;
    case Act::kGradCompress:  // one layer's region (overlapped reduction), else every region not yet
                              // compressed
      if (op.layer >= 0) {
        compress_region(layout.region_of_layer(op.layer));
      } else {
        for (std::size_t r = 0; r < compressed.size(); ++r)
          if (!compressed[r]) compress_region(static_cast<int>(r));
      }
      break;
    case Act::kGradDecompress:  // per layer at the step's end, or the regions the step-end reduction took
      if (op.layer >= 0) {
        decompress_region(layout.region_of_layer(op.layer));
      } else {
        for (std::size_t r = 0; r < decompressed.size(); ++r)
          if (reduced[r] && !decompressed[r] && !own_decompress[r]) decompress_region(static_cast<int>(r));
      }
      break;
    case Act::kOptimizer:
      optimizer(st);
      break;
    case Act::kParamGather:
      if (dp_comm.size() > 1)
        for (const Region& r : layout.regions()) dp->all_gather(params.data() + r.offset, r.padded);
      break;
    default:
      break;
  }
}

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;

namespace {
// What the trainer refuses before building anything: the plan's checks (the runtime's and the
// backend's), the host-side gradient transforms on a backend whose tensors the host cannot reach,
// the launched rank count, and the algorithmic options' ranges.
Status check_trainer_inputs(const Workload& w, const Comm& world, const RunOptions& o,
                            const Backend& backend) {
  FS_RETURN_IF_ERROR(check_runtime_plan(w.model, w.plan, "plan"));
  if (Status s = backend.check_plan(w.plan); !s) return s.error();
  if (!backend.host_addressable()) {
    // The host-side gradient transforms need tensors the host can reach.
    if (w.plan.grad_compression != GradCompression::kNone)
      return Error("plan: /grad_compression: " + to_string(w.plan.grad_compression) +
                   " gradient compression runs on the CPU backend only so far (the " + backend.name() +
                   " backend does not compress)");
    if (o.algorithms.grad_decay > 0 || o.algorithms.aradam_gamma > 0)
      return Error("runtime: decayed gradient accumulation and ARAdam run on the CPU backend only so far");
  }
  if (world.size() != w.plan.gpus())
    return Error("runtime: the plan needs " + std::to_string(w.plan.gpus()) + " ranks (tp x pp x dp = " +
                 std::to_string(w.plan.tp) + " x " + std::to_string(w.plan.pp) + " x " +
                 std::to_string(w.plan.dp) + ") but " + std::to_string(world.size()) + " were launched");
  const AlgorithmOptions& alg = o.algorithms;
  if (alg.loss_scale_alpha < 0) return Error("runtime: the loss scale's alpha must be >= 0");
  if (alg.loss_scale_alpha > 0 && w.plan.precision != Precision::kFp16)
    return Error("runtime: the variance-adaptive loss scale needs precision fp16 (the plan has " +
                 to_string(w.plan.precision) + ")");
  if (!(alg.grad_decay >= 0 && alg.grad_decay < 1))
    return Error("runtime: the gradient decay beta must be in [0, 1)");
  if (alg.aradam_gamma < 0) return Error("runtime: ARAdam's gamma must be >= 0");
  return Status::Ok();
}
}  // namespace

// This rank's place in the plan and the step's shapes.
void Trainer::Impl::init_shape(const Workload& wl, Comm& world_comm, const RunOptions& o) {
  w = &wl;
  world = &world_comm;
  opt = o;
  const Plan& plan = wl.plan;
  rank = world_comm.rank();
  stage = wl.stage_of(rank);
  tp_rank = rank % plan.tp;
  dp_rank = (rank / plan.tp) % plan.dp;
  chunks = static_cast<int>(wl.stages[stage].chunk_layers.size());
  micro = static_cast<int>(plan.micro_batches());
  mbs = plan.micro_batch;
  seq = effective_seq_len(plan, wl.model);
  hidden = static_cast<int>(wl.model.hidden);
  vocab = static_cast<int>(wl.model.vocab);
  attn_shape = {mbs, seq, wl.model.heads / plan.tp, wl.model.kv_heads / plan.tp,
                static_cast<int>(wl.model.q_dim() / wl.model.heads)};
  fp16 = plan.precision == Precision::kFp16;
  sp = plan.sequence_parallel && plan.tp > 1;
  loss_scale = fp16 ? o.initial_loss_scale : 1.0;
}

// The TP and DP groups (MPI), and the backend's twins of them and of the world. Every rank takes
// part in each split (MPI_Comm_split is collective).
Status Trainer::Impl::init_comms(Comm& world_comm) {
  const auto tp_group = w->group_members(rank, GroupKind::kTp);
  const auto dp_group = w->group_members(rank, GroupKind::kDp);
  tp_comm = world_comm.split(tp_group.front(), tp_rank);
  dp_comm = world_comm.split(dp_group.front() + w->ranks(), dp_rank);
  auto tp_group_comm = be->make_comm(tp_comm);
  if (!tp_group_comm) return tp_group_comm.error();
  auto dp_group_comm = be->make_comm(dp_comm);
  if (!dp_group_comm) return dp_group_comm.error();
  auto pipe_comm = be->make_comm(world_comm);
  if (!pipe_comm) return pipe_comm.error();
  tp = std::move(*tp_group_comm);
  dp = std::move(*dp_group_comm);
  pipe = std::move(*pipe_comm);
  return Status::Ok();
}

// The stage's layers in order, and per layer what its forward drops (its recompute modules) and
// whether a uniform recompute group goes on past it.
std::vector<int> Trainer::Impl::init_layers() {
  const Plan& plan = w->plan;
  const StageProgram& prog = w->stages[stage];
  std::vector<int> layers;
  for (const auto& c : prog.chunk_layers) layers.insert(layers.end(), c.begin(), c.end());
  std::sort(layers.begin(), layers.end());
  layer_recompute.assign(static_cast<std::size_t>(w->model.layers), 0);
  group_continues.assign(static_cast<std::size_t>(w->model.layers), 0);
  for (const auto& c : prog.chunk_layers)
    for (std::size_t i = 0; i < c.size(); ++i) {
      const auto layer = static_cast<std::size_t>(c[i]);
      const int position = static_cast<int>(i);
      layer_recompute[layer] = w->recompute_of(c[i], position);
      if (plan.uniform_recompute())
        group_continues[layer] = (position + 1) % plan.recompute_layers != 0 && i + 1 < c.size();
    }
  return layers;
}

// The stage's parameters, initialised as every layout initialises them, in the backend's memory.
void Trainer::Impl::init_params(const std::vector<int>& layers) {
  const Plan& plan = w->plan;
  const int last_vstage = chunks * plan.pp - 1;
  const bool first = stage == 0, last = (chunks - 1) * plan.pp + stage == last_vstage;
  layout = ParamLayout::build(w->model, plan, layers, first, last, tp_rank);
  Buffer init(layout.total());
  layout.initialise(init.data(), opt.seed);
  if (be->host_memory()) {
    params.adopt(std::move(init));
  } else {
    params.resize(init.size());
    be->upload(params.data(), init.data(), init.size());
  }
  grads.assign_zero(layout.total());
}

// The optimizer's moments (ZeRO-1: each region's owned block only), and the decayed gradient
// accumulation's average where it is on.
void Trainer::Impl::init_optimizer_state() {
  const Plan& plan = w->plan;
  std::size_t owned = 0;
  for (const Region& r : layout.regions()) {
    owned_offset.push_back(owned);
    owned += plan.zero_stage >= 1 ? r.padded / plan.dp : r.padded;
  }
  adam_m.assign_zero(owned);
  adam_v.assign_zero(owned);
  if (opt.algorithms.grad_decay > 0) grad_avg.assign_zero(owned);
  reduced.assign(layout.regions().size(), 0);
}

// Gradient compression: a compressor per region (its tensors as segments), and top-k's residual.
Status Trainer::Impl::init_compression() {
  const Plan& plan = w->plan;
  if (plan.grad_compression == GradCompression::kNone) return Status::Ok();
  const auto& regions = layout.regions();
  try {
    for (std::size_t i = 0; i < regions.size(); ++i) {
      std::vector<Segment> segments;
      for (const TensorSlot& ts : layout.tensors())
        if (ts.region == static_cast<int>(i)) segments.push_back({ts.offset - regions[i].offset, ts.size()});
      compressors.emplace_back(plan.grad_compression, plan.compression_topk, segments, dp_comm.size(),
                               regions[i].padded);
    }
  } catch (const std::exception& e) {
    return Error(std::string("runtime: /grad_compression: ") + e.what());
  }
  compressed.assign(regions.size(), 0);
  decompressed.assign(regions.size(), 0);
  own_decompress.assign(regions.size(), 0);
  if (plan.grad_compression == GradCompression::kTopK) residual.assign_zero(layout.total());
  return Status::Ok();
}

// A layer's activations per micro-batch, and a flow per micro-batch and chunk, in the backend.
void Trainer::Impl::init_activations(const std::vector<int>& layers) {
  layer_index.assign(static_cast<std::size_t>(w->model.layers), -1);
  for (std::size_t i = 0; i < layers.size(); ++i) layer_index[layers[i]] = static_cast<int>(i);
  acts.resize(layers.size() * static_cast<std::size_t>(micro));
  for (LayerActs& a : acts) a.bind(be.get());
  flows.resize(static_cast<std::size_t>(micro) * chunks);
  for (Flow& f : flows) f.bind(be.get());
}

Result<std::unique_ptr<Trainer>> Trainer::create(const Workload& w, Comm& world, const RunOptions& o,
                                                 std::unique_ptr<Backend> backend) {
  if (!backend) backend = make_cpu_backend();
  FS_RETURN_IF_ERROR(check_trainer_inputs(w, world, o, *backend));
  // The plan's precision for the GEMMs (the tensors stay fp32 on every backend).
  backend->set_gemm_precision(w.plan.precision);
  keep_freed_memory_in_heap();
  auto im = std::make_unique<Impl>();
  Impl& t = *im;
  t.be = std::move(backend);
  for (Vec* v : {&t.params, &t.grads, &t.adam_m, &t.adam_v, &t.residual, &t.grad_avg}) v->bind(t.be.get());
  t.init_shape(w, world, o);
  FS_RETURN_IF_ERROR(t.init_comms(world));
  const std::vector<int> layers = t.init_layers();
  t.init_params(layers);
  t.init_optimizer_state();
  FS_RETURN_IF_ERROR(t.init_compression());
  t.init_activations(layers);
  FS_RETURN_IF_ERROR(t.decode());
  return std::unique_ptr<Trainer>(new Trainer(std::move(im)));
}

Result<StepStats> Trainer::step(bool apply_update) {
  Impl& t = *impl_;
  StepStats st;
  st.step = t.steps_done + 1;
  t.grads.zero();
  std::fill(t.reduced.begin(), t.reduced.end(), 0);
  std::fill(t.compressed.begin(), t.compressed.end(), 0);
  std::fill(t.decompressed.begin(), t.decompressed.end(), 0);
  t.dp_bytes = 0;
  // A step without update leaves the training state as it found it: the error feedback too.
  Vec residual_before(t.be.get());
  if (!apply_update) residual_before.copy_from(t.residual);
  for (auto& f : t.flows) f.reset();
  t.loss_sum = 0;
  t.timings.clear();
  const AlgorithmOptions& alg = t.opt.algorithms;
  t.applied_scale =
      t.fp16 && alg.loss_scale_alpha > 0
          ? variance_adjusted_scale(t.loss_scale, alg.loss_scale_alpha, loss_variance(t.recent_losses))
          : t.loss_scale;
  const int n = static_cast<int>(t.actions.size());
  Backend& be = *t.be;
  t.marks.clear();
  be.synchronize();
  t.world->barrier();
  const auto t0 = std::chrono::steady_clock::now();
  be.reset_marks();
  be.mark();  // the step's start on the backend's clock
  try {
    for (int v = 0; v < n; ++v) {
      if (!apply_update && (t.actions[v].act == Act::kOptimizer || t.actions[v].act == Act::kParamGather))
        continue;
      const int s = t.opt.record_ops ? be.mark() : 0;
      try {
        t.execute(v, st);
      } catch (const std::exception& e) {
        return Error("runtime: op " + t.w->op_id(t.rank, t.stage, v) + ": " + e.what());
      }
      if (t.opt.record_ops) t.marks.push_back({v, s, be.mark(), static_cast<double>(be.live_bytes())});
    }
    t.pipe->wait_sends();
    be.synchronize();
  } catch (const std::exception& e) {  // a backend failing outside an op (its queued work, a transfer)
    return Error("runtime: step " + std::to_string(st.step) + ": " + e.what());
  }
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const Impl::Marked& m : t.marks)
    t.timings.push_back({m.op, be.seconds(m.start), be.seconds(m.end), m.bytes});
  st.dp_grad_bytes = t.dp_bytes;
  if (!apply_update) t.residual.swap(residual_before);
  double loss = t.loss_sum;
  t.world->all_reduce(&loss, 1);
  st.loss = loss / (static_cast<double>(t.w->plan.global_batch) * t.seq);
  st.loss_scale = t.loss_scale;
  st.applied_loss_scale = t.applied_scale;
  if (apply_update) {
    ++t.steps_done;
    t.recent_losses.push_back(st.loss);
    while (static_cast<int>(t.recent_losses.size()) > std::max(2, alg.loss_window))
      t.recent_losses.pop_front();
  }
  return st;
}

int Trainer::rank() const { return impl_->rank; }
int Trainer::stage() const { return impl_->stage; }
int Trainer::tp_rank() const { return impl_->tp_rank; }
int Trainer::steps_done() const { return impl_->steps_done; }
const ParamLayout& Trainer::layout() const { return impl_->layout; }
namespace {
Buffer host_copy(Backend& be, const DeviceBuffer& v) {
  Buffer out(v.size());
  if (!v.empty()) be.download(out.data(), v.data(), v.size());
  return out;
}
}  // namespace

Buffer Trainer::params() const { return host_copy(*impl_->be, impl_->params); }
void Trainer::set_param(std::size_t i, float value) {
  impl_->be->upload(impl_->params.data() + i, &value, 1);
}
Buffer Trainer::grads() const { return host_copy(*impl_->be, impl_->grads); }
Buffer Trainer::error_feedback() const { return host_copy(*impl_->be, impl_->residual); }
const Backend& Trainer::backend() const { return *impl_->be; }
const std::vector<OpTiming>& Trainer::timings() const { return impl_->timings; }
const Workload& Trainer::workload() const { return *impl_->w; }

namespace {
constexpr char kMagic[8] = {'F', 'S', 'C', 'K', 'P', 'T', '0', '1'};
}  // namespace

std::string Trainer::checkpoint_bytes() const {
  const Impl& t = *impl_;
  const nlohmann::json header = {{"model", t.w->model.name},
                                 {"plan", plan_to_json(t.w->plan)},
                                 {"rank", t.rank},
                                 {"ranks", t.w->ranks()},
                                 {"step", t.steps_done},
                                 {"loss_scale", t.loss_scale},
                                 {"good_steps", t.good_steps},
                                 {"params", t.params.size()},
                                 {"moments", t.adam_m.size()},
                                 {"seed", t.opt.seed},
                                 {"residual", t.residual.size()}};
  std::string blob(kMagic, sizeof kMagic);
  const std::string h = header.dump();
  const std::uint64_t hl = h.size();
  blob.append(reinterpret_cast<const char*>(&hl), sizeof hl).append(h);
  for (const Vec* v : {&t.params, &t.adam_m, &t.adam_v, &t.residual}) {
    if (v->empty()) continue;
    if (t.be->host_memory()) {
      blob.append(reinterpret_cast<const char*>(v->data()), v->size() * sizeof(float));
    } else {
      const Buffer copy = host_copy(*t.be, *v);
      blob.append(reinterpret_cast<const char*>(copy.data()), copy.size() * sizeof(float));
    }
  }
  const std::uint64_t hash = fnv1a(blob);
  blob.append(reinterpret_cast<const char*>(&hash), sizeof hash);
  return blob;
}

CheckpointIdentity Trainer::checkpoint_identity() const {
  return {impl_->w->model.name, plan_to_json(impl_->w->plan).dump(), impl_->w->ranks()};
}

Status Trainer::save_checkpoint(const std::string& dir) const {
  return save_checkpoint_set(*impl_->world, dir, checkpoint_identity(), impl_->steps_done,
                             checkpoint_bytes());
}

Result<CheckpointSetRead> Trainer::load_checkpoint(const std::string& dir) {
  const Comm& world = *impl_->world;
  auto set = read_checkpoint_set(world, dir, checkpoint_identity());
  if (!set) return set.error();
  // Every rank restores its file; if any cannot, every rank returns the same error (none trains on).
  Status mine = restore_checkpoint(set->bytes, set->file);
  if (mine && impl_->steps_done != set->step)
    mine = Error(set->file + ": /step: the file is of step " + std::to_string(impl_->steps_done) +
                 ", its set of step " + std::to_string(set->step));
  const std::vector<std::string> errors = world.gather_bytes(mine ? "" : mine.error().message());
  std::string all;
  for (std::size_t r = 0; r < errors.size(); ++r)
    if (!errors[r].empty())
      all += (all.empty() ? "" : "; ") + ("rank " + std::to_string(r) + ": " + errors[r]);
  all = world.broadcast_bytes(all);
  if (!all.empty()) return Error(all);
  set->bytes.clear();
  set->bytes.shrink_to_fit();
  return set;
}

Result<CheckpointFile> parse_checkpoint_file(std::string_view blob, const std::string& path) {
  constexpr std::size_t kFixed = sizeof kMagic + sizeof(std::uint64_t);
  if (blob.size() < kFixed + sizeof(std::uint64_t) || std::memcmp(blob.data(), kMagic, sizeof kMagic) != 0)
    return Error(path + ": not a Foresight checkpoint (bad magic or truncated)");
  std::uint64_t stored = 0;
  std::memcpy(&stored, blob.data() + blob.size() - sizeof stored, sizeof stored);
  if (fnv1a(blob.substr(0, blob.size() - sizeof stored)) != stored)
    return Error(path + ": content hash mismatch (the file is corrupted or truncated)");
  std::uint64_t hl = 0;
  std::memcpy(&hl, blob.data() + sizeof kMagic, sizeof hl);
  // Compared without adding to hl, which may be anything up to 2^64 - 1.
  if (hl > blob.size() - kFixed - sizeof stored) return Error(path + ": header length out of range");
  auto parsed = parse_json_text(blob.substr(kFixed, hl), path);
  if (!parsed || !parsed->is_object()) return Error(path + ": unreadable header");
  const nlohmann::json& header = *parsed;
  CheckpointFile f;
  f.header_bytes = static_cast<std::size_t>(hl);
  f.tensors = blob.substr(kFixed + hl, blob.size() - kFixed - hl - sizeof stored);
  const auto field = [&](const char* key) -> const nlohmann::json* {
    const auto it = header.find(key);
    return it == header.end() ? nullptr : &*it;
  };
  const auto bad = [&](const char* key, const char* what) { return Error(path + ": /" + key + ": " + what); };
  if (const auto* v = field("model")) {
    if (!v->is_string()) return bad("model", "not a string");
    f.model = v->get<std::string>();
  }
  if (const auto* v = field("plan"))
    f.plan_json = v->dump();
  else
    f.plan_json = "null";
  // Integers that must fit an int (rank and ranks may be -1 only by being absent).
  for (auto [key, out, low] : {std::tuple{"rank", &f.rank, 0},
                               {"ranks", &f.ranks, 1},
                               {"step", &f.step, 0},
                               {"good_steps", &f.good_steps, 0}}) {
    const auto* v = field(key);
    if (!v) continue;
    if (!v->is_number_integer()) return bad(key, "not an integer");
    const auto n = v->get<std::int64_t>();
    if (v->is_number_unsigned()
            ? v->get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<int>::max())
            : (n < low || n > std::numeric_limits<int>::max()))
      return bad(key, "out of range");
    *out = static_cast<int>(n);
  }
  for (auto [key, out] :
       {std::pair{"params", &f.params}, {"moments", &f.moments}, {"residual", &f.residual}}) {
    const auto* v = field(key);
    if (!v) continue;
    if (!v->is_number_unsigned()) return bad(key, "not an element count");
    *out = v->get<std::uint64_t>();
  }
  if (const auto* v = field("loss_scale")) {
    if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() <= 0)
      return bad("loss_scale", "not a positive finite number");
    f.loss_scale = v->get<double>();
  }
  if (const auto* v = field("seed")) {
    if (!v->is_number_unsigned()) return bad("seed", "not an unsigned integer");
    f.has_seed = true;
    f.seed = v->get<std::uint64_t>();
  }
  return f;
}

Status Trainer::restore_checkpoint(const std::string& blob, const std::string& path) {
  Impl& t = *impl_;
  auto file = parse_checkpoint_file(blob, path);
  if (!file) return file.error();
  const CheckpointFile& f = *file;
  if (f.model != t.w->model.name)
    return Error(path + ": /model: checkpoint is of model " + (f.model.empty() ? "?" : f.model) +
                 ", this run is " + t.w->model.name);
  if (nlohmann::json::parse(f.plan_json) != plan_to_json(t.w->plan))
    return Error(path + ": /plan: checkpoint was written under a different plan: " + f.plan_json);
  if (f.rank != t.rank || f.ranks != t.w->ranks())
    return Error(path + ": /rank: checkpoint rank/ranks do not match this launch");
  if (f.params != t.params.size() || f.moments != t.adam_m.size())
    return Error(path + ": /params: tensor sizes do not match this model and plan");
  // The top-k error-feedback residual (empty without it; checkpoints from before it had none).
  if (f.residual != t.residual.size())
    return Error(path + ": /residual: the checkpoint's error-feedback residual has " +
                 std::to_string(f.residual) + " elements, this run's " + std::to_string(t.residual.size()));
  const std::size_t tensor_bytes =
      (t.params.size() + 2 * t.adam_m.size() + t.residual.size()) * sizeof(float);
  if (f.tensors.size() != tensor_bytes)
    return Error(path + ": size " + std::to_string(blob.size()) + " bytes, expected " +
                 std::to_string(blob.size() - f.tensors.size() + tensor_bytes));
  const char* cur = f.tensors.data();
  for (Vec* v : {&t.params, &t.adam_m, &t.adam_v, &t.residual}) {
    if (v->empty()) continue;  // no residual without top-k (memcpy must not see its null data)
    if (t.be->host_memory()) {
      std::memcpy(v->data(), cur, v->size() * sizeof(float));
    } else {
      Buffer h(v->size());
      std::memcpy(h.data(), cur, h.size() * sizeof(float));
      t.be->upload(v->data(), h.data(), h.size());
    }
    cur += v->size() * sizeof(float);
  }
  t.steps_done = f.step;
  t.loss_scale = f.loss_scale;
  t.good_steps = f.good_steps;
  if (f.has_seed) t.opt.seed = f.seed;
  return Status::Ok();
}

}  // namespace foresight::runtime
