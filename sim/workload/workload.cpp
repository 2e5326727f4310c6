// Lowering a plan to per-stage op graphs: the pipeline schedule's task order, each task's kernels
// and collectives, the data-parallel reduction and the optimizer step.
#include "sim/workload/workload.h"

#include <algorithm>
#include <array>
#include <map>
#include <tuple>

#include "sim/analytic/analytic_model.h"
#include "sim/analytic/compression.h"
#include "sim/analytic/data_loading.h"

namespace foresight {

std::string_view to_string(Phase p) {
  switch (p) {
    case Phase::kForward:
      return "fwd";
    case Phase::kBackward:
      return "bwd";
    case Phase::kWeightGrad:
      return "wgrad";
    case Phase::kRecompute:
      return "recompute";
    case Phase::kStep:
      return "step";
  }
  return "op";
}

std::string_view to_string(StreamId s) {
  static constexpr std::string_view kNames[] = {"compute", "tp",      "pp",      "dp",        "ep",
                                                "cp",      "copy",    "host",    "dp_reduce", "copy_in",
                                                "loader",  "partner", "pp_recv", "amax"};
  return kNames[static_cast<int>(s)];
}

std::string_view to_string(GroupKind g) {
  static constexpr std::string_view kNames[] = {"none", "tp", "cp", "dp", "ep", "expert_dp", "stage"};
  return kNames[static_cast<int>(g)];
}

std::vector<int> Workload::group_members(int rank, GroupKind g) const {
  const int pp = stage_of(rank), local = rank % stage_ranks();
  const Plan& s = stage_plan(pp);
  const int t = s.tp, c = s.cp, d = s.dp;
  const int tp = local % t, cp = (local / t) % c, dp = local / (t * c);
  std::vector<int> out;
  switch (g) {
    case GroupKind::kTp:
      for (int i = 0; i < t; ++i) out.push_back(rank_of(i, cp, dp, pp));
      break;
    case GroupKind::kCp:
      for (int i = 0; i < c; ++i) out.push_back(rank_of(tp, i, dp, pp));
      break;
    case GroupKind::kDp:  // gradients are reduced over dp x cp (Megatron)
      for (int j = 0; j < d; ++j)
        for (int i = 0; i < c; ++i) out.push_back(rank_of(tp, i, j, pp));
      break;
    // Experts are carved out of the dp x cp ranks (Megatron-Core; EP may exceed dp when cp > 1),
    // or with expert_tp 1 out of all the stage's ranks (MoE parallel folding): the stage's local
    // rank is e + etp * y, with y numbering the expert tensor-parallel groups; consecutive y form
    // an expert-parallel group, and those congruent modulo ep hold the same experts and reduce
    // their gradients together.
    case GroupKind::kEp:
    case GroupKind::kExpertDp: {
      const int etp = s.etp(), e = plan.ep, first = pp * stage_ranks();
      const int x = tp + t * (cp + c * dp), y = x / etp, lane = x % etp;
      if (g == GroupKind::kEp) {
        const int base = y / e * e;
        for (int j = 0; j < e; ++j) out.push_back(first + lane + etp * (base + j));
      } else {
        for (int z = y % e; z < t * c * d / etp; z += e) out.push_back(first + lane + etp * z);
      }
      break;
    }
    case GroupKind::kStage:
      for (int r = pp * stage_ranks(); r < (pp + 1) * stage_ranks(); ++r) out.push_back(r);
      break;
    case GroupKind::kNone:
      out.push_back(rank);
      break;
  }
  return out;
}

std::vector<std::vector<int>> Workload::stage_groups(int stage, GroupKind g) const {
  std::vector<std::vector<int>> out;
  std::vector<char> seen(static_cast<std::size_t>(plan.gpus()), 0);
  const int per_stage = stage_ranks();
  for (int r = stage * per_stage; r < (stage + 1) * per_stage; ++r) {
    if (seen[r]) continue;
    auto members = group_members(r, g);
    for (int m : members) seen[m] = 1;
    out.push_back(std::move(members));
  }
  return out;
}

std::string Workload::op_id(int rank, int stage, int v) const {
  const Op& op = stages[stage].graph()[v];
  std::string id;  // built by appends (GCC 12 warns falsely on "x" + std::string chains)
  id.reserve(48);
  id.append("r").append(std::to_string(rank)).append("/");
  if (op.layer >= 0) id.append("L").append(std::to_string(op.layer)).append("/");
  if (op.micro_batch >= 0) id.append("mb").append(std::to_string(op.micro_batch)).append("/");
  id.append(to_string(op.phase)).append("/").append(op.name);
  return id;
}

std::size_t Workload::op_count() const {
  std::size_t n = 0;
  for (const auto& s : stages) n += boost::num_vertices(s.graph());
  return n;
}

namespace {

enum class TaskType { kF, kB, kW };
struct Task {
  TaskType type;
  int mb;
  int chunk;
  bool split = false;       // kB: input gradients only; the weight gradients follow as a kW task
  bool merged = false;      // kB: runs merged with the kF before it (Plan::overlap_ep_comm)
  bool deferrable = false;  // kW: fills gaps (Program::deferred) instead of taking its turn
};

// DeepSeek's DualPipe (DeepSeek-V3 report Sec. 3.2.1; the order of deepseek-ai/DualPipe's
// DualPipe.step). Every rank holds two chunks: chunk 0 is its place in the pipeline that runs
// from rank 0 to rank p-1 (layers of stage `stage`), chunk 1 its place in the reverse pipeline
// (layers of stage p-1-stage). Micro-batches 0..m/2-1 enter at rank 0, m/2..m-1 at rank p-1.
// In DeepSeek's code "phase 0" is the direction in which a rank sits in the first half; ranks
// of the second half swap the two. A B with zero bubble splits off its weight gradients, which
// run later at explicit W slots in FIFO order (not as gap fillers like ZB-H1).
// With `merge` (Plan::overlap_ep_comm), the pairs DualPipe overlaps (its _forward_backward_chunk:
// steps 4 and 5, but the first pair of step 4 on the middle ranks) are marked merged.
std::vector<Task> dualpipe_tasks(int stage, int p, int m, bool merge) {
  std::vector<Task> tasks;
  const int half = p / 2, h = std::min(stage, p - 1 - stage), half_m = m / 2;
  const int second = stage >= half ? 1 : 0;
  int next_f[2] = {0, 0}, next_b[2] = {0, 0};
  std::vector<Task> weights;  // FIFO of split-off weight gradients
  std::size_t next_w = 0;
  auto chunk = [&](int phase) { return phase ^ second; };
  auto F = [&](int phase) {
    const int c = chunk(phase);
    tasks.push_back({TaskType::kF, c * half_m + next_f[c]++, c});
  };
  auto B = [&](int phase, bool zb, bool merged = false) {
    const int c = chunk(phase);
    const Task t{TaskType::kB, c * half_m + next_b[c]++, c, zb, merged && merge};
    tasks.push_back(t);
    if (zb) weights.push_back({TaskType::kW, t.mb, c});
  };
  auto W = [&] { tasks.push_back(weights.at(next_w++)); };
  for (int i = 0; i < 2 * (half - h - 1); ++i) F(0);  // 1: nF0
  for (int i = 0; i < h + 1; ++i) {
    F(0);
    F(1);
  }  // 2: nF0F1
  for (int i = 0; i < half - h - 1; ++i) {
    B(1, true);
    W();
    F(1);
  }  // 3: nB1W1F1
  for (int i = 0; i < half_m - p + h + 1; ++i) {
    F(0);
    B(1, false, i > 0 || h != half - 1);
    F(1);
    B(0, false, true);
  }  // 4: nF0B1F1B0
  for (int i = 0; i < half - h - 1; ++i) {
    B(1, false);
    F(1);
    B(0, false, true);
  }                 // 5: nB1F1B0
  bool zb = false;  // 6: nB1B0, the later half split
  for (int i = 0; i < h + 1; ++i) {
    if (i == (h + 1) / 2 && h % 2 == 1) zb = true;
    B(1, zb);
    if (i == (h + 1) / 2 && h % 2 == 0) zb = true;
    B(0, zb);
  }
  for (int i = 0; i < half - h - 1; ++i) {
    W();
    B(0, true);
  }                                     // 7: nWB0
  while (next_w < weights.size()) W();  // 8: nW
  return tasks;
}

// The order in which a pipeline stage runs its forward/backward tasks. With `merge`
// (Plan::overlap_ep_comm; interleaved with virtual stages, DualPipe, or one stage) each
// steady-state backward runs merged with the forward before it, and Megatron-Core's warm-up runs
// one forward more so that the two are independent.
std::vector<Task> schedule_tasks(Schedule sched, int stage, int p, int m, int v, bool merge) {
  std::vector<Task> tasks;
  if (sched == Schedule::kDualPipe) return dualpipe_tasks(stage, p, m, merge);
  if (sched == Schedule::kGpipe) {
    for (int i = 0; i < m; ++i) tasks.push_back({TaskType::kF, i, 0});
    for (int i = 0; i < m; ++i) tasks.push_back({TaskType::kB, i, 0});
    return tasks;
  }
  if (sched == Schedule::kInterleaved1F1B && v > 1) {
    // Megatron-LM's interleaved schedule: micro-batches in groups of p, chunks in rounds.
    const int total = m * v;
    auto fwd = [&](int k) {
      const int in_group = k % (p * v);
      return Task{TaskType::kF, (k / (p * v)) * p + k % p, in_group / p};
    };
    auto bwd = [&](int k) {
      const int in_group = k % (p * v);
      return Task{TaskType::kB, (k / (p * v)) * p + k % p, v - 1 - in_group / p};
    };
    const int warmup = std::min(total, (p - stage - 1) * 2 + (v - 1) * p + (merge ? 1 : 0));
    for (int k = 0; k < warmup; ++k) tasks.push_back(fwd(k));
    for (int k = 0; k < total - warmup; ++k) {
      tasks.push_back(fwd(k + warmup));
      tasks.push_back(bwd(k));
      tasks.back().merged = merge;
    }
    for (int k = total - warmup; k < total; ++k) tasks.push_back(bwd(k));
    return tasks;
  }
  // 1F1B. ZB-H1 (Qi et al. 2024, Sec. 3.1) has the same order of F and B, each B computing
  // input gradients only. Stage i runs the W (weight gradients) of micro-batch k after the B of
  // micro-batch k + i: the later a stage, the more W's it holds back, so that in the cooldown its
  // B's -- which the stages before it wait for -- are not queued behind W's; the held-back W's
  // (the last p - 1 of each stage) fill the gaps between the cooldown's B's (deferrable: run only
  // when the next F or B is not ready) and the stage's end. A stage then keeps p - i micro-batches'
  // activations as in 1F1B plus i W's inputs: p at most, 1F1B's peak, and the bubble is
  // (p-1)(F+B-W). (Without the hold-back, W's wait for gaps and, with none in the steady state,
  // pile up at the end: a bubble of (p-1)(F+B) and every micro-batch's inputs kept.)
  const int warmup = std::min(m, p - stage - 1 + (merge ? 1 : 0));
  const bool zb = sched == Schedule::kZeroBubble;
  const int lag = stage;
  int next_w = 0;
  auto backward = [&](int mb, bool merged, bool steady) {
    tasks.push_back({TaskType::kB, mb, 0, zb, merged});
    if (zb && steady && mb - lag >= next_w) tasks.push_back({TaskType::kW, next_w++, 0});
  };
  for (int i = 0; i < warmup; ++i) tasks.push_back({TaskType::kF, i, 0});
  for (int i = 0; i < m - warmup; ++i) {
    tasks.push_back({TaskType::kF, warmup + i, 0});
    backward(i, merge, true);
  }
  for (int i = m - warmup; i < m; ++i) backward(i, false, false);
  while (zb && next_w < m) tasks.push_back({TaskType::kW, next_w++, 0, false, false, true});
  return tasks;
}

class StageBuilder {
 public:
  StageBuilder(const Workload& w, int stage, const DeviceSpec& device, const LayerKernels& dense,
               const LayerKernels& moe, const LayerShape& shape)
      : w_cluster_(w.cluster),
        m_(w.model),
        p_(w.stage_plan(stage)),
        d_(device),
        dense_(dense),
        moe_(moe),
        s_(shape),
        w_(w),
        load_s_(w.load_per_micro_batch_s),
        load_in_loop_(w.load_in_loop) {
    prog_.stage = stage;
  }

  StageProgram build();

 private:
  // build()'s steps, in order: the stage's constants, then per task of the schedule its ops, then
  // the step's end, then the graph.
  void plan_stage();
  int forward_task(const Task& t, int last);
  int first_place_input(const Task& t, int last);  // the micro-batch arrives and is embedded
  int forward_layers(const Task& t, const std::vector<int>& layers, int prev);
  int head_forward(const Task& t, int prev);  // final norm, LM head and loss
  int backward_task(const Task& t, int last);
  int head_backward(const Task& t, int prev);
  int backward_layers(const Task& t, const std::vector<int>& layers, int prev);
  void weight_grad_task(const Task& t);
  // A forward and a backward of different micro-batches as one pair (Plan::overlap_ep_comm): both
  // start after `last`, and their ops are issued alternately, split at the expert all-to-alls.
  int merged_pair(const Task& f, const Task& b, int last);
  // The stage's parameters (every chunk's) as the step's end sees them.
  struct StepParams {
    double dense = 0;    // all but the experts, embedding and head included
    double experts = 0;  // the MoE layers' experts (reduced over the expert data-parallel group)
    double embed = 0;    // the input embedding, LM head and final norm on this stage
  };
  StepParams step_params() const;
  int mirror_grad_sum(int prev, double embed);  // DualPipe: the two copies' gradients summed
  int step_grad_reduce(int prev, const StepParams& params);
  int optimizer_step(int prev, const StepParams& params);
  StageProgram finish();  // the deferrable ops apart, and the Boost graph built

  // A chunk's place in its pipeline: the first place embeds, the last computes the loss; sends go
  // to the next place (forward) or the previous one (backward). Interleaved chunks form one
  // pipeline of chunks*p places; DualPipe's chunk 1 runs the pipeline from rank p-1 to rank 0.
  int place(int chunk) const {
    const int st = prog_.stage, p = p_.pp;
    return dualpipe_ ? (chunk == 0 ? st : p - 1 - st) : chunk * p + st;
  }
  // The pipeline rank at place `pl` of chunk `chunk`'s pipeline.
  int rank_at(int chunk, int pl) const { return dualpipe_ ? (chunk == 0 ? pl : p_.pp - 1 - pl) : pl % p_.pp; }
  // A pipeline send or receive of task `t` with pipeline rank `peer`.
  int pipeline_op(OpKind kind, Phase ph, const Task& t, const char* name, int peer, double bytes, int dep);
  // A chunk's output (or input gradient) to the neighbouring stage after op `dep`; returns what
  // the next task waits for: the send, or with Plan::p2p_overlapped `dep` itself.
  int send(const Task& t, Phase ph, const char* name, int peer, int dep);
  // Each TP rank sends its 1/tp of the micro-batch's activation (Megatron's scatter-gather
  // pipeline transfers; with SP the activation is already split by sequence): the bytes of one
  // send, and after a receive without SP the all-gather over the TP group that rebuilds it.
  double p2p_bytes() const { return tokens_ * m_.hidden * s_.bytes_per_element / p_.tp; }
  int received(const Task& t, Phase ph, int recv) {
    if (p_.tp <= 1 || p_.sequence_parallel) return recv;
    return collective(ph, -1, t.mb, t.chunk,
                      ph == Phase::kForward ? "pp_activation_all_gather" : "pp_gradient_all_gather",
                      StreamId::kTp, GroupKind::kTp, CollectiveOp::kAllGather, p2p_bytes() * p_.tp, recv);
  }
  // Ops and edges are collected first and the Boost graph is built once at the end (one
  // allocation instead of growing vertex storage op by op).
  // `take_next`: the op also takes the pending next_deps_ (ops off the main chain, such as host
  // copies, leave them to the next op of the chain).
  int add(Op op, std::initializer_list<int> deps, bool take_next = true) {
    const int v = static_cast<int>(ops_.size());
    ops_.push_back(op);
    for (int d : deps)
      if (d >= 0) edges_.emplace_back(d, v);
    if (take_next) {
      for (int d : next_deps_) edges_.emplace_back(d, v);
      next_deps_.clear();
    }
    prog_.streams[static_cast<int>(op.stream)].push_back(v);
    return v;
  }
  Op base(Phase ph, int layer, int mb, int chunk, const char* name) const {
    Op op;
    op.phase = ph;
    op.layer = static_cast<std::int16_t>(layer);
    op.micro_batch = mb;
    op.chunk = static_cast<std::int16_t>(chunk);
    op.name = name;
    return op;
  }
  int compute(Phase ph, int layer, int mb, int chunk, const char* name, KernelClass cls, double seconds,
              double flops, double bytes, int dep, const KernelCost* k = nullptr) {
    Op op = base(ph, layer, mb, chunk, name);
    op.kind = OpKind::kCompute;
    op.cls = cls;
    op.dtype = cls == KernelClass::kGemm ? compute_dtype(p_.precision, d_)
                                         : (p_.precision == Precision::kFp32 ? DType::kFp32 : DType::kBf16);
    op.device = d_.kind;
    op.seconds = seconds;
    op.flops = flops;
    op.bytes = bytes;
    if (k) {
      op.m = k->m;
      op.n = k->n;
      op.k = k->k;
      // The waits are in the forward's and the backward's data part (not the deferred weight
      // gradients of a zero-bubble schedule).
      op.host_wait = ph == Phase::kBackward                             ? k->host_wait_bwd_s
                     : ph == Phase::kForward || ph == Phase::kRecompute ? k->host_wait_fwd_s
                                                                        : 0.0;
    }
    if (k && k->on_partner) {
      op.stream = StreamId::kPartner;
      op.device = kernels(layer).partner_kind;
    }
    return add(op, {dep});
  }
  // A transfer between the stage's device and its attention partner, in the layer's chain.
  int partner_copy(Phase ph, int layer, int mb, int chunk, const char* name, double seconds, int dep) {
    Op op = base(ph, layer, mb, chunk, name);
    op.kind = OpKind::kCopy;
    op.stream = StreamId::kPartner;
    op.seconds = seconds;
    return add(op, {dep});
  }
  // `take_next` false for collectives off the compute chain (ZeRO-3 gathers and reduce-scatters,
  // per-layer gradient reductions): the pending next_deps_ stay for the chain's next op.
  int collective(Phase ph, int layer, int mb, int chunk, const char* name, StreamId stream, GroupKind g,
                 CollectiveOp c, double bytes, int dep, bool take_next = true) {
    Op op = base(ph, layer, mb, chunk, name);
    op.kind = OpKind::kCollective;
    op.stream = stream;
    op.group = g;
    op.collective = c;
    op.bytes = bytes;
    return add(op, {dep}, take_next);
  }
  // A host <-> device copy (kCopy: to the host, kCopyIn: to the device) or host work (kHost) of
  // `bytes` at the node's host link (host memory) rate, off the compute chain.
  int host_op(Phase ph, int layer, int mb, int chunk, const char* name, StreamId stream, double bytes,
              int dep) {
    Op op = base(ph, layer, mb, chunk, name);
    op.kind = stream == StreamId::kHost ? OpKind::kCompute : OpKind::kCopy;
    op.stream = stream;
    op.device = stream == StreamId::kHost ? DeviceKind::kCpu : d_.kind;
    op.bytes = bytes;
    op.seconds = bytes / (stream == StreamId::kHost ? host_optimizer_rate(w_cluster_.node)
                                                    : host_link_rate(w_cluster_.node));
    return add(op, {dep}, false);
  }
  // The bytes one layer's offload moves (Plan::offload_params / offload_activations): its weights
  // (a 1/dp shard under ZeRO-3), gradients and saved activations.
  double offloaded_params(int layer) const {
    return p_.offload_params ? layer_params(layer) / (p_.zero_stage >= 3 ? 1.0 * p_.dp * p_.cp : 1.0) : 0.0;
  }
  double offloaded_activations(int layer) const {
    if (!p_.offload_activations) return 0;
    return layer_activation_bytes(m_, s_, recompute_mask(p_), p_.flash_attention, layer >= m_.dense_layers());
  }
  const LayerKernels& kernels(int layer) const { return layer < m_.dense_layers() ? dense_ : moe_; }
  std::vector<int> chunk_layers(int chunk) const;
  // Named by block ("attn." or "mlp.") so that each op id in a layer is unique: a layer has two
  // (four with SP) TP collectives per direction.
  // `share`: the part of the bytes this op moves (a pipelined reduce-scatter runs as two ops, the
  // second, the `tail`, named "..._tail").
  // `off_chain`: started beside the compute chain (an overlapped part), leaving the pending
  // next_deps_ to the chain's next op.
  int tp_collective(Phase ph, int layer, int mb, int chunk, TpCollective kind, double bytes, int after,
                    int dep, double share = 1.0, bool tail = false, bool off_chain = false) {
    static constexpr const char* kNames[2][3] = {
        {"attn.tp_all_reduce", "attn.tp_all_gather", "attn.tp_reduce_scatter"},
        {"mlp.tp_all_reduce", "mlp.tp_all_gather", "mlp.tp_reduce_scatter"}};
    static constexpr const char* kTails[2] = {"attn.tp_reduce_scatter_tail", "mlp.tp_reduce_scatter_tail"};
    const LayerKernels& lk = kernels(layer);
    int residual1 = 0;
    while (residual1 < lk.count && lk.fwd[residual1].name != KernelName::kResidual1) ++residual1;
    const int block = after > residual1 ? 1 : 0;
    const CollectiveOp c = kind == TpCollective::kAllReduce   ? CollectiveOp::kAllReduce
                           : kind == TpCollective::kAllGather ? CollectiveOp::kAllGather
                                                              : CollectiveOp::kReduceScatter;
    const char* name =
        tail && kind == TpCollective::kReduceScatter ? kTails[block] : kNames[block][static_cast<int>(kind)];
    return collective(ph, layer, mb, chunk, name, StreamId::kTp, GroupKind::kTp, c, share * bytes, dep,
                      !off_chain);
  }
  // The layer's forward kernels, or (`only` without kFull) those the recompute modules re-run.
  int layer_forward(Phase ph, int layer, int mb, int chunk, int prev,
                    RecomputeMask only = recompute_module::kFull);
  // A data-parallel gradient reduction of `params` gradients over group `g` after op `dep`: an
  // all-reduce (a reduce-scatter under ZeRO-1/2), or with gradient compression a compress kernel,
  // the compressed collective (all-reduce, or all-gather of sparse sets) and a decompress kernel.
  // Per-layer reductions (`defer`) leave their decompression to the step's end: on the in-order
  // compute stream it would otherwise wait for the network in the middle of the backward pass.
  int grad_reduce(Phase ph, int layer, int mb, int chunk, const char* name, GroupKind g, double params,
                  int dep, bool defer);
  void pending_decompressions();
  int layer_backward(int layer, int mb, int chunk, int prev, bool weight_split);
  double layer_params(int layer) const {
    return layer_params_per_device(m_, layer >= m_.dense_layers(), p_.tp, p_.ep, p_.etp());
  }
  // FP8 delayed scaling (fp8_amax_bytes): the chunk's amaxes all-reduced over the stage once its
  // forward (backward) is done, the compute stream waiting for it (a wait of no duration of its
  // own, so the idle time is the reduction's); `prev` where there is none.
  int fp8_amax_reduce(Phase ph, const Task& t, int layers, int prev) {
    const double bytes = fp8_amax_bytes(m_, p_, layers, ph == Phase::kForward);
    if (bytes <= 0) return prev;
    const int ar = collective(ph, -1, t.mb, t.chunk, "fp8_amax_all_reduce", StreamId::kAmax,
                              GroupKind::kStage, CollectiveOp::kAllReduce, bytes, prev, false);
    return compute(ph, -1, t.mb, t.chunk, "fp8_amax_wait", KernelClass::kElementwise, 0.0, 0, 0, ar);
  }
  // FSDP2 (Plan::fsdp_copies): the gathered weights copied out of the all-gather buffer on the
  // compute stream, once the gather (pending in next_deps_) is done; `prev` where there is none.
  int fsdp_copy_out(Phase ph, int layer, int mb, int chunk, int prev) {
    if (!p_.fsdp_copies_apply()) return prev;
    const FsdpCopies c = fsdp_copies(d_, p_, layer_params(layer));
    if (c.copy_out_s <= 0) return prev;
    return compute(ph, layer, mb, chunk, "fsdp_copy_out", KernelClass::kElementwise, c.copy_out_s, 0,
                   c.copy_out_bytes, prev);
  }
  double layer_expert_params(int layer) const {
    return layer >= m_.dense_layers() ? m_.moe.experts * m_.expert_params() / (p_.etp() * p_.ep) : 0.0;
  }
  // A layer's ZeRO-3 gradient reduction after `prev` (FSDP2's copy-in first); returns the compute
  // stream's last op.
  int zero3_reduce(int layer, int mb, int chunk, int prev);
  // Plan::zero3_whole_step: a chunk's gradients reduced once its last backward is done; returns
  // the compute stream's last op.
  int chunk_reduce(int chunk, int mb, int prev);
  // ZeRO-3 / FSDP: a layer's parameters gathered before its forward and backward, and its
  // gradients reduce-scattered after its backward (`gather` false), on `stream`: the experts'
  // over the expert data-parallel group that shards them (FSDP's expert units, dp*cp/ep ranks;
  // none where that group is one rank), the rest over dp x cp. Returns the collectives.
  std::vector<int> zero3_collectives(Phase ph, int layer, int mb, int chunk, bool gather, StreamId stream,
                                     int dep) {
    const double bytes = gather ? weight_bytes(p_.precision) : grad_bytes(p_);
    const double experts = layer_expert_params(layer), dense = layer_params(layer) - experts;
    const CollectiveOp op = gather ? CollectiveOp::kAllGather : CollectiveOp::kReduceScatter;
    const char* name = gather ? "param_all_gather" : "grad_reduce_scatter";
    std::vector<int> out;
    out.push_back(
        collective(ph, layer, mb, chunk, name, stream, GroupKind::kDp, op, dense * bytes, dep, false));
    if (experts > 0 && p_.edp() > 1)
      out.push_back(collective(ph, layer, mb, chunk,
                               gather ? "expert_param_all_gather" : "expert_grad_reduce_scatter", stream,
                               GroupKind::kExpertDp, op, experts * bytes, dep, false));
    return out;
  }

  const ClusterSpec& w_cluster_;
  const ModelSpec& m_;
  const Plan& p_;
  const DeviceSpec& d_;
  const LayerKernels& dense_;
  const LayerKernels& moe_;
  LayerShape s_;
  const Workload& w_;
  StageProgram prog_;
  std::vector<int> next_deps_;         // extra dependencies of the next op added
  std::array<int, 4> ring_{};          // the forward's overlapped all-gathers, by collective (TpOverlap)
  std::vector<int> weight_grad_ends_;  // last op of each W task
  std::vector<bool> deferrable_;       // by op: part of a deferrable W task (Program::deferred)
  std::vector<int> open_sends_;        // overlapped pipeline sends, joined at the step's end
  struct Decompress {
    int after, layer;
    double seconds, bytes;
  };
  std::vector<Decompress> decompress_;  // per-layer compressed reductions, decompressed at the end
  std::vector<Op> ops_;
  std::vector<std::pair<int, int>> edges_;
  double load_s_ = 0;  // Workload::load_per_micro_batch_s
  bool load_in_loop_ = false;
  std::vector<int> act_out_;   // activation copies to the host, in order (the device keeps two layers)
  std::vector<int> grad_out_;  // offloaded gradients' copies to the host, in order (two layers' buffers)
  std::map<std::tuple<int, int, int>, int> act_copy_;  // (micro-batch, chunk, layer) -> its copy to the host
  // The stage's constants (plan_stage).
  HeadCosts head_;
  double tokens_ = 0;  // per micro-batch on this device
  int micro_batches_ = 0, chunks_ = 1, last_place_ = 0;
  bool dualpipe_ = false, zero3_ = false;
  // Plan::zero3_whole_step: gathered once, reduce-scattered after a chunk's last backward.
  bool whole_ = false;
  // ZeRO-1/2 with Plan::overlap_param_gather: the layers' parameters are gathered in the forward.
  bool gather_in_forward() const {
    return p_.overlap_param_gather && (p_.zero_stage == 1 || p_.zero_stage == 2);
  }
  // Weight gradients split off the backward somewhere in the step: their reduction cannot
  // follow each layer's last backward.
  bool split_w_ = false;
  std::map<std::pair<int, int>, int> backward_end_;  // (micro-batch, chunk) -> its B's last op
};

std::vector<int> StageBuilder::chunk_layers(int chunk) const {
  std::vector<int> out;
  const int L = m_.layers, p = p_.pp, st = prog_.stage;
  if (p_.schedule == Schedule::kDualPipe) {
    const auto [begin, end] = p_.stage_layer_range(L, chunk == 0 ? st : p - 1 - st);
    for (int i = begin; i < end; ++i) out.push_back(i);
  } else {
    const auto [begin, end] = p_.chunk_layer_range(L, st, chunk);
    for (int i = begin; i < end; ++i) out.push_back(i);
  }
  return out;
}

int StageBuilder::layer_forward(Phase ph, int layer, int mb, int chunk, int prev, RecomputeMask only) {
  const LayerKernels& k = kernels(layer);
  const bool partial = !(only & recompute_module::kFull);
  int cp_comm = -1;
  // A full re-run (Phase::kRecompute) ends with the kernels and collectives up to
  // LayerKernels::full_rerun_end (Plan::recompute_early_stop).
  const int end = ph == Phase::kRecompute && !partial ? std::min(k.count, k.full_rerun_end) : k.count;
  for (int i = 0; i < end; ++i) {
    const double share = partial ? k.rerun_share(only, i) : 1.0;
    if (share <= 0) continue;
    KernelCost kc = k.fwd[i];
    if (share < 1) {  // one of the matmuls a kernel fuses (the op policy's wk, w3)
      kc.fwd_s *= share;
      kc.host_wait_fwd_s *= share;
      kc.flops *= share;
      kc.bytes *= share;
      kc.n = static_cast<std::int64_t>(static_cast<double>(kc.n) * share);
    }
    const bool attention = i >= k.attention_first && i <= k.attention_last;
    if (attention && i == k.attention_first && p_.cp > 1 && !partial) {
      // Context parallelism: K/V of the other ranks arrive over the ring while attention runs.
      cp_comm = collective(ph, layer, mb, chunk, "cp_kv_all_gather", StreamId::kCp, GroupKind::kCp,
                           CollectiveOp::kAllGather, cp_kv_bytes(m_, s_) * p_.cp, prev);
      if (p_.cp_comm == CpComm::kAllGather) {  // gathered before the attention, exposed
        prev = cp_comm;
        cp_comm = -1;
      }
    }
    if (i == k.attention_first && k.attention_on_partner)
      prev = partner_copy(ph, layer, mb, chunk, "qkv_to_partner", k.partner_in_s, prev);
    const int before = prev;
    prev = compute(ph, layer, mb, chunk, kernel_name(kc.name).data(), kc.cls, kc.fwd_s, kc.flops, kc.bytes,
                   prev, &kc);
    if (i == k.attention_last && k.attention_on_partner)
      prev = partner_copy(ph, layer, mb, chunk, "attn_out_from_partner", k.partner_out_s, prev);
    if (attention && i == k.attention_last && cp_comm >= 0) edges_.emplace_back(cp_comm, prev);
    if (partial) continue;
    // An all-gather overlapped with this GEMM: what follows waits for both.
    for (int j = 0; j < k.tp_count; ++j)
      if (k.tp_overlap[j] == TpOverlap::kRing && k.tp_gemm[j] == i) next_deps_.push_back(ring_[j]);
    for (int j = 0; j < k.tp_count; ++j) {
      if (k.tp_after[j] != i) continue;
      switch (k.tp_overlap[j]) {
        case TpOverlap::kRing:  // runs beside the next GEMM
          ring_[j] = tp_collective(ph, layer, mb, chunk, k.tp_kind[j], k.tp_fwd_bytes[j], i, prev);
          break;
        case TpOverlap::kPipeline: {
          // The first 3/4 start with the GEMM (added after it, so that the graph's order stays
          // the data's: the runtime runs ops in that order), the last quarter after both.
          const int head = tp_collective(ph, layer, mb, chunk, k.tp_kind[j], k.tp_fwd_bytes[j], i, before,
                                         kTpPipelineHead, false, true);
          prev = tp_collective(ph, layer, mb, chunk, k.tp_kind[j], k.tp_fwd_bytes[j], i, prev,
                               1 - kTpPipelineHead, true);
          edges_.emplace_back(head, prev);
          break;
        }
        default:
          prev = tp_collective(ph, layer, mb, chunk, k.tp_kind[j], k.tp_fwd_bytes[j], i, prev);
      }
    }
    if (i == k.moe_dispatch_after)
      prev = collective(ph, layer, mb, chunk, "ep_dispatch", StreamId::kEp, GroupKind::kEp,
                        CollectiveOp::kAllToAll, k.ep_bytes, prev);
    if (i == k.moe_combine_after)
      prev = collective(ph, layer, mb, chunk, "ep_combine", StreamId::kEp, GroupKind::kEp,
                        CollectiveOp::kAllToAll, k.ep_bytes, prev);
  }
  return prev;
}

int StageBuilder::layer_backward(int layer, int mb, int chunk, int prev, bool weight_split) {
  const LayerKernels& k = kernels(layer);
  // The layer's place in its chunk decides whether it recomputes (Plan::recompute_layers); a
  // chunk's layers are consecutive.
  const std::vector<int>& in_chunk = prog_.chunk_layers[static_cast<std::size_t>(chunk)];
  const int position = layer - in_chunk.front();
  if (p_.uniform_recompute()) {
    // Uniform method: the backward reaches a group at its last layer, and first re-runs the whole
    // group's forward from the group's kept input.
    const int n = static_cast<int>(in_chunk.size()), g = p_.recompute_layers;
    const int begin = position / g * g, end = std::min(n, begin + g);
    if (position == end - 1)
      for (int i = begin; i < end; ++i)
        prev = layer_forward(Phase::kRecompute, in_chunk[static_cast<std::size_t>(i)], mb, chunk, prev);
  } else {
    const RecomputeMask mask = w_.recompute_of(layer, position);
    if (mask != 0) prev = layer_forward(Phase::kRecompute, layer, mb, chunk, prev, mask);
  }
  int cp_comm = -1;
  // Context parallelism's K and V, and whether they are gathered whole (CpComm::kAllGather).
  const double kv = cp_kv_bytes(m_, s_);
  const bool gathered = p_.cp > 1 && p_.cp_comm == CpComm::kAllGather;
  for (int i = k.count - 1; i >= 0; --i) {
    const KernelCost& kc = k.fwd[i];
    // The all-to-alls in reverse: the combine's before the experts' backward, the dispatch's
    // after it (before the permutation that preceded the dispatch).
    if (i == k.moe_combine_after)
      prev = collective(Phase::kBackward, layer, mb, chunk, "ep_combine", StreamId::kEp, GroupKind::kEp,
                        CollectiveOp::kAllToAll, k.ep_bytes, prev);
    if (i == k.moe_dispatch_after)
      prev = collective(Phase::kBackward, layer, mb, chunk, "ep_dispatch", StreamId::kEp, GroupKind::kEp,
                        CollectiveOp::kAllToAll, k.ep_bytes, prev);
    // TP overlap (TpOverlap): an all-gather at this GEMM (ring) or the reduce-scatter of its
    // input gradient (bulk, registered at the norm before it) starts with its backward, and what
    // follows the GEMM waits for it. (The reduce-scatter is added after the GEMM, in the data's
    // order, which the runtime follows.)
    int beside = -1, bulk = -1;
    for (int j = k.tp_bwd_count - 1; j >= 0; --j) {
      const TpOverlap o = k.tp_bwd_overlap[j];
      if (o == TpOverlap::kRing && k.tp_bwd_gemm[j] == i)
        beside =
            tp_collective(Phase::kBackward, layer, mb, chunk, k.tp_bwd_kind[j], k.tp_bwd_bytes[j], i, prev);
      if (o == TpOverlap::kBulk && k.tp_bwd_gemm[j] == i) bulk = j;
      if (o != TpOverlap::kNone || k.tp_bwd_after[j] != i) continue;
      prev = tp_collective(Phase::kBackward, layer, mb, chunk, k.tp_bwd_kind[j], k.tp_bwd_bytes[j], i, prev);
    }
    const int before = prev;
    const bool attention = i >= k.attention_first && i <= k.attention_last;
    if (attention && i == k.attention_last && p_.cp > 1) {
      if (gathered)  // K and V gathered again, before the attention's backward
        prev = collective(Phase::kBackward, layer, mb, chunk, "cp_kv_all_gather", StreamId::kCp,
                          GroupKind::kCp, CollectiveOp::kAllGather, kv * p_.cp, prev);
      else
        cp_comm = collective(Phase::kBackward, layer, mb, chunk, "cp_dkv_reduce_scatter", StreamId::kCp,
                             GroupKind::kCp, CollectiveOp::kReduceScatter, 2 * kv * p_.cp, prev);
    }
    const double seconds = weight_split ? kc.bwd_s - kc.bwd_weight_s : kc.bwd_s;
    const double flops = kc.cls == KernelClass::kGemm        ? (weight_split ? 1.0 : 2.0) * kc.flops
                         : kc.cls == KernelClass::kAttention ? 2.0 * kc.flops
                                                             : 0.0;
    if (i == k.attention_last && k.attention_on_partner)
      prev =
          partner_copy(Phase::kBackward, layer, mb, chunk, "attn_grad_to_partner", k.partner_grad_in_s, prev);
    prev = compute(Phase::kBackward, layer, mb, chunk, kernel_name(kc.name).data(), kc.cls, seconds, flops,
                   2 * kc.bytes, prev, &kc);
    if (bulk >= 0)
      beside = tp_collective(Phase::kBackward, layer, mb, chunk, k.tp_bwd_kind[bulk], k.tp_bwd_bytes[bulk],
                             k.tp_bwd_after[bulk], before, 1.0, false, true);
    if (beside >= 0) next_deps_.push_back(beside);
    if (i == k.attention_first && k.attention_on_partner)
      prev = partner_copy(Phase::kBackward, layer, mb, chunk, "qkv_grad_from_partner", k.partner_grad_out_s,
                          prev);
    if (attention && i == k.attention_first && cp_comm >= 0) edges_.emplace_back(cp_comm, prev);
    if (attention && i == k.attention_first && gathered)  // their gradients, after it
      prev = collective(Phase::kBackward, layer, mb, chunk, "cp_dkv_reduce_scatter", StreamId::kCp,
                        GroupKind::kCp, CollectiveOp::kReduceScatter, 2 * kv * p_.cp, prev);
  }
  return prev;
}

int StageBuilder::grad_reduce(Phase ph, int layer, int mb, int chunk, const char* name, GroupKind g,
                              double params, int dep, bool defer) {
  const double gb = grad_bytes(p_);
  if (p_.grad_compression == GradCompression::kNone) {
    const int v = collective(ph, layer, mb, chunk, name, StreamId::kDp, g,
                             p_.zero_stage == 0 ? CollectiveOp::kAllReduce : CollectiveOp::kReduceScatter,
                             params * gb, dep, !defer);
    // (A bucket reduced during the backward, or a compressed buffer, was just written.)
    ops_[v].cold = ph == Phase::kStep && cold_step_reduction(p_);
    return v;
  }
  const int ranks = g == GroupKind::kExpertDp ? p_.edp() : p_.dp * p_.cp;
  const CompressionCost c = compression_cost(p_, m_, params, gb, ranks);
  const double half_s = c.kernel_seconds(d_) / 2, half_bytes = c.kernel_bytes / 2;
  const bool expert = g == GroupKind::kExpertDp;
  const int compress = compute(ph, layer, mb, chunk, expert ? "expert_grad_compress" : "grad_compress",
                               KernelClass::kElementwise, half_s, c.kernel_flops, half_bytes, dep);
  const int wire =
      collective(ph, layer, mb, chunk, name, StreamId::kDp, g,
                 c.gather ? CollectiveOp::kAllGather : CollectiveOp::kAllReduce, c.wire_bytes, compress);
  if (defer) {
    decompress_.push_back({wire, layer, half_s, half_bytes});
    return wire;
  }
  return compute(ph, layer, mb, chunk, expert ? "expert_grad_decompress" : "grad_decompress",
                 KernelClass::kElementwise, half_s, 0, half_bytes, wire);
}

void StageBuilder::pending_decompressions() {
  for (const Decompress& d : decompress_)
    compute(Phase::kStep, d.layer, -1, 0, "grad_decompress", KernelClass::kElementwise, d.seconds, 0, d.bytes,
            d.after);
  decompress_.clear();
}

void StageBuilder::plan_stage() {
  const int v = std::max(1, p_.virtual_stages);
  micro_batches_ = static_cast<int>(p_.micro_batches());
  tokens_ = s_.batch * s_.seq;
  head_ = head_costs(m_, d_, p_, s_);
  dualpipe_ = p_.schedule == Schedule::kDualPipe;
  chunks_ = p_.schedule == Schedule::kInterleaved1F1B && v > 1 ? v : dualpipe_ ? 2 : 1;
  zero3_ = p_.zero_stage >= 3;
  whole_ = p_.zero3_whole_step();
  split_w_ = p_.schedule == Schedule::kZeroBubble || dualpipe_;
  last_place_ = dualpipe_ ? p_.pp - 1 : chunks_ * p_.pp - 1;
  for (int c = 0; c < chunks_; ++c) {
    prog_.chunk_layers.push_back(chunk_layers(c));
    prog_.layers += static_cast<int>(prog_.chunk_layers.back().size());
  }
  // About 2-3 x (kernels + collectives) ops per layer and micro-batch: reserve once.
  const std::size_t estimate =
      static_cast<std::size_t>(micro_batches_) * prog_.layers * (3 * LayerKernels::kMax + 8) + 64;
  ops_.reserve(estimate);
  edges_.reserve(estimate + estimate / 4);
}

int StageBuilder::pipeline_op(OpKind kind, Phase ph, const Task& t, const char* name, int peer, double bytes,
                              int dep) {
  Op op = base(ph, -1, t.mb, t.chunk, name);
  op.kind = kind;
  // Overlapped (Megatron's overlap_p2p_comm): the next chunk's receive is posted beside the send,
  // not queued behind it.
  op.stream = kind == OpKind::kRecv && p_.p2p_overlapped() ? StreamId::kPpRecv : StreamId::kPp;
  op.peer_stage = peer;
  op.bytes = bytes;
  return add(op, {dep});
}

int StageBuilder::send(const Task& t, Phase ph, const char* name, int peer, int dep) {
  const int s = pipeline_op(OpKind::kSend, ph, t, name, peer, p2p_bytes(), dep);
  if (!p_.p2p_overlapped()) return s;
  // The next task does not wait for the send; the step's end does.
  open_sends_.push_back(s);
  return dep;
}

int StageBuilder::first_place_input(const Task& t, int last) {
  if (load_s_ > 0) {
    // The data loader delivers this micro-batch: in the loop, after the previous task; beside
    // training, back to back from the step's start (the loader-bound steady state).
    Op op = base(Phase::kForward, -1, t.mb, t.chunk, "load_batch");
    op.kind = OpKind::kCompute;
    op.stream = StreamId::kLoader;
    op.device = DeviceKind::kCpu;
    op.seconds = load_s_;
    next_deps_.push_back(add(op, {load_in_loop_ ? last : -1}, false));
  }
  if (p_.offload_embeddings) {
    // The host gathers the micro-batch's rows of the table and sends them ahead of time.
    const double rows = tokens_ * m_.hidden * s_.bytes_per_element;
    const int gathered =
        host_op(Phase::kForward, -1, t.mb, t.chunk, "embedding_gather", StreamId::kHost, 2 * rows, -1);
    next_deps_.push_back(host_op(Phase::kForward, -1, t.mb, t.chunk, "embedding_rows_to_device",
                                 StreamId::kCopyIn, rows, gathered));
  }
  return compute(Phase::kForward, -1, t.mb, t.chunk, "embedding", KernelClass::kElementwise,
                 d_.stream_seconds(tokens_ * m_.hidden * s_.bytes_per_element), 0,
                 tokens_ * m_.hidden * s_.bytes_per_element, last);
}

int StageBuilder::forward_layers(const Task& t, const std::vector<int>& layers, int prev) {
  const double wb = weight_bytes(p_.precision);
  std::vector<int> ends;  // each layer's last op, for the offload windows
  for (int layer : layers) {
    // Offloaded weights arrive once the layer two back is done (a two-layer window), and a
    // layer starts once the activations of the layer two back have left for the host.
    const int freed =
        ends.size() >= 2 ? ends[ends.size() - 2] : -1;  // the first two: during the previous task
    if (p_.offload_params)
      next_deps_.push_back(host_op(Phase::kForward, layer, t.mb, t.chunk, "param_to_device",
                                   StreamId::kCopyIn, offloaded_params(layer) * wb, freed));
    if (p_.offload_activations && act_out_.size() >= 2) next_deps_.push_back(act_out_[act_out_.size() - 2]);
    if (zero3_ && (!whole_ || t.mb == 0)) {
      // The layer's first kernel waits for its parameters, gathered once the layer two back is
      // done: FSDP holds two layers' gathered parameters, so it prefetches one layer ahead.
      // Across pipeline stages (whole_) only the chunk's first micro-batch gathers them.
      for (int ag : zero3_collectives(Phase::kForward, layer, t.mb, t.chunk, true, StreamId::kDp, freed))
        next_deps_.push_back(ag);
      prev = fsdp_copy_out(Phase::kForward, layer, t.mb, t.chunk, prev);
    } else if (gather_in_forward() && t.mb == 0) {
      // --overlap-param-gather: the previous step's updated shards are gathered layer by layer as
      // the first forward reaches them (the end of this step gathers only the tables).
      next_deps_.push_back(collective(Phase::kForward, layer, t.mb, t.chunk, "param_all_gather",
                                      StreamId::kDp, GroupKind::kDp, CollectiveOp::kAllGather,
                                      (layer_params(layer) - layer_expert_params(layer)) * wb, -1, false));
      // The experts' own buffer is gathered the same way, over the expert data-parallel group.
      if (layer_expert_params(layer) > 0)
        next_deps_.push_back(collective(Phase::kForward, layer, t.mb, t.chunk, "expert_param_all_gather",
                                        StreamId::kDp, GroupKind::kExpertDp, CollectiveOp::kAllGather,
                                        layer_expert_params(layer) * wb, -1, false));
    }
    prev = layer_forward(Phase::kForward, layer, t.mb, t.chunk, prev);
    ends.push_back(prev);
    if (p_.offload_activations) {
      act_out_.push_back(host_op(Phase::kForward, layer, t.mb, t.chunk, "act_to_host", StreamId::kCopy,
                                 offloaded_activations(layer), prev));
      act_copy_[{t.mb, t.chunk, layer}] = act_out_.back();
    }
  }
  return prev;
}

int StageBuilder::head_forward(const Task& t, int prev) {
  prev = compute(Phase::kForward, -1, t.mb, t.chunk, "final_norm", KernelClass::kElementwise,
                 head_.norm_fwd_s, 0, head_.norm_bytes, prev);
  if (head_.sp)
    prev = collective(Phase::kForward, -1, t.mb, t.chunk, "lm_head.tp_all_gather", StreamId::kTp,
                      GroupKind::kTp, CollectiveOp::kAllGather, head_.hidden_bytes, prev);
  prev = compute(Phase::kForward, -1, t.mb, t.chunk, "lm_head_loss", KernelClass::kGemm, head_.fwd_s,
                 head_.fwd_flops, head_.fwd_bytes, prev);
  if (head_.tp) {
    prev = collective(Phase::kForward, -1, t.mb, t.chunk, "ce.tp_all_gather", StreamId::kTp, GroupKind::kTp,
                      CollectiveOp::kAllGather, head_.stats_bytes, prev);
    prev = compute(Phase::kForward, -1, t.mb, t.chunk, "cross_entropy_grad", KernelClass::kElementwise,
                   head_.grad_s, 0, head_.grad_bytes, prev);
  }
  return prev;
}

int StageBuilder::forward_task(const Task& t, int last) {
  const std::vector<int> layers = chunk_layers(t.chunk);
  const int vs = place(t.chunk);
  int prev = vs > 0 ? received(t, Phase::kForward,
                               pipeline_op(OpKind::kRecv, Phase::kForward, t, "recv_activation",
                                           rank_at(t.chunk, vs - 1), 0, -1))
                    : first_place_input(t, last);
  prev = forward_layers(t, layers, prev);
  prev = fp8_amax_reduce(Phase::kForward, t, static_cast<int>(layers.size()), prev);
  if (vs == last_place_) return head_forward(t, prev);
  return send(t, Phase::kForward, "send_activation", rank_at(t.chunk, vs + 1), prev);
}

int StageBuilder::head_backward(const Task& t, int prev) {
  prev = compute(Phase::kBackward, -1, t.mb, t.chunk, "lm_head_loss", KernelClass::kGemm, head_.bwd_s,
                 2 * head_.fwd_flops, head_.bwd_bytes, prev);
  if (head_.tp)
    prev = collective(Phase::kBackward, -1, t.mb, t.chunk,
                      head_.sp ? "lm_head.tp_reduce_scatter" : "lm_head.tp_all_reduce", StreamId::kTp,
                      GroupKind::kTp, head_.sp ? CollectiveOp::kReduceScatter : CollectiveOp::kAllReduce,
                      head_.hidden_bytes, prev);
  return compute(Phase::kBackward, -1, t.mb, t.chunk, "final_norm", KernelClass::kElementwise,
                 head_.norm_bwd_s, 0, 2 * head_.norm_bytes, prev);
}

int StageBuilder::backward_layers(const Task& t, const std::vector<int>& layers, int prev) {
  const double wb = weight_bytes(p_.precision), gb = grad_bytes(p_);
  // ZeRO-3 / FSDP backward: each layer's parameters are gathered one layer ahead (prefetch),
  // and its gradients reduce-scattered on a separate stream as soon as it is done.
  // (Gathered one layer ahead: while the layer before it computes, after the one before that.)
  auto gather = [&](int layer, int after) {
    return zero3_collectives(Phase::kBackward, layer, t.mb, t.chunk, true, StreamId::kDp, after);
  };
  const bool per_layer = zero3_ && !whole_;  // whole_: the parameters stay gathered, the reduction waits
  std::vector<int> next_gather =
      per_layer && !layers.empty() ? gather(layers.back(), -1) : std::vector<int>{};
  std::vector<int> ends;
  // Megatron's --overlap-grad-reduce: a bucket's gradients are reduced as soon as its last
  // micro-batch's backward is done, while the layers below still compute; the experts' (their own
  // buffer, over the expert data-parallel group) too. A bucket is a layer, or Megatron-Core's
  // (Plan::grad_bucket_params): the first stage's first chunk in buckets of that size, every other
  // chunk in one. `dense`, `experts`: the parameters of the buckets being filled.
  const bool reduce_here = p_.overlap_grad_reduce && !zero3_ && !split_w_ && t.mb == micro_batches_ - 1;
  const bool split = p_.grad_bucket_params <= 0 || (prog_.stage == 0 && t.chunk == 0);
  const auto bucket_size = static_cast<double>(p_.grad_bucket_params);
  double dense = 0, experts = 0;
  auto flush = [&](double& pending, bool chunk_done, int layer, int after, GroupKind g,
                   const char* all_reduce, const char* reduce_scatter) {
    if (pending <= 0 || !(chunk_done || (split && pending >= bucket_size))) return;
    grad_reduce(Phase::kBackward, layer, t.mb, t.chunk, p_.zero_stage == 0 ? all_reduce : reduce_scatter, g,
                pending, after, true);
    pending = 0;
  };
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    const int layer = *it;
    // Offload: the layer's weights and activations come back to the device once the layer two
    // back is done (the current and the prefetched layer share the device).
    const int freed =
        ends.size() >= 2 ? ends[ends.size() - 2] : -1;  // the first two: during the previous task
    if (p_.offload_params)
      next_deps_.push_back(host_op(Phase::kBackward, layer, t.mb, t.chunk, "param_to_device",
                                   StreamId::kCopyIn, offloaded_params(layer) * wb, freed));
    if (p_.offload_activations) {
      const int fetched = host_op(Phase::kBackward, layer, t.mb, t.chunk, "act_to_device", StreamId::kCopyIn,
                                  offloaded_activations(layer), freed);
      edges_.emplace_back(act_copy_.at({t.mb, t.chunk, layer}), fetched);  // it must have left first
      next_deps_.push_back(fetched);
    }
    if (p_.offload_params && grad_out_.size() >= 2) next_deps_.push_back(grad_out_[grad_out_.size() - 2]);
    if (per_layer) {
      next_deps_.insert(next_deps_.end(), next_gather.begin(), next_gather.end());
      prev = fsdp_copy_out(Phase::kBackward, layer, t.mb, t.chunk, prev);
      next_gather = std::next(it) != layers.rend() ? gather(*std::next(it), ends.empty() ? -1 : ends.back())
                                                   : std::vector<int>{};
    }
    prev = layer_backward(layer, t.mb, t.chunk, prev, t.split);
    ends.push_back(prev);
    if (p_.offload_params)
      grad_out_.push_back(host_op(Phase::kBackward, layer, t.mb, t.chunk, "grad_to_host", StreamId::kCopy,
                                  offloaded_params(layer) * gb, prev));
    if (per_layer) prev = zero3_reduce(layer, t.mb, t.chunk, prev);
    if (reduce_here) {
      dense += layer_params(layer) - layer_expert_params(layer);
      experts += layer_expert_params(layer);
      const bool chunk_done = std::next(it) == layers.rend();
      flush(dense, chunk_done, layer, prev, GroupKind::kDp, "grad_all_reduce", "grad_reduce_scatter");
      flush(experts, chunk_done, layer, prev, GroupKind::kExpertDp, "expert_grad_all_reduce",
            "expert_grad_reduce_scatter");
    }
  }
  // Across pipeline stages, the chunk's gradients are reduce-scattered after its last backward
  // (its weight gradients' last, where they are split off: at the step's end).
  if (whole_ && !split_w_ && t.mb == micro_batches_ - 1) prev = chunk_reduce(t.chunk, t.mb, prev);
  return prev;
}

int StageBuilder::zero3_reduce(int layer, int mb, int chunk, int prev) {
  // FSDP2 copies the gradients into the reduce-scatter's input on the compute stream first.
  const FsdpCopies c = p_.fsdp_copies_apply() ? fsdp_copies(d_, p_, layer_params(layer)) : FsdpCopies{};
  if (c.chunk_cat_s > 0)
    prev = compute(Phase::kBackward, layer, mb, chunk, "fsdp_grad_copy_in", KernelClass::kElementwise,
                   c.chunk_cat_s, 0, c.chunk_cat_bytes, prev);
  zero3_collectives(Phase::kBackward, layer, mb, chunk, false, StreamId::kDpReduce, prev);
  return prev;
}

int StageBuilder::chunk_reduce(int chunk, int mb, int prev) {
  // Each FSDP unit's post-backward in turn, on the reduce-scatter stream; the stage's schedule goes
  // on beside them and the optimizer waits for them (optimizer_step joins the dp streams).
  const std::vector<int>& layers = prog_.chunk_layers[static_cast<std::size_t>(chunk)];
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) prev = zero3_reduce(*it, mb, chunk, prev);
  return prev;
}

int StageBuilder::backward_task(const Task& t, int last) {
  const std::vector<int> layers = chunk_layers(t.chunk);
  const int vs = place(t.chunk);
  int prev = last;
  if (vs == last_place_) {
    prev = head_backward(t, prev);
  } else {  // the backward needs the gradient and this stage's own forward
    next_deps_.push_back(received(
        t, Phase::kBackward,
        pipeline_op(OpKind::kRecv, Phase::kBackward, t, "recv_gradient", rank_at(t.chunk, vs + 1), 0, -1)));
  }
  prev = backward_layers(t, layers, prev);
  prev = fp8_amax_reduce(Phase::kBackward, t, static_cast<int>(layers.size()), prev);
  if (vs == 0) {
    prev = compute(Phase::kBackward, -1, t.mb, t.chunk, "embedding", KernelClass::kElementwise,
                   d_.stream_seconds(2 * tokens_ * m_.hidden * s_.bytes_per_element), 0,
                   2 * tokens_ * m_.hidden * s_.bytes_per_element, prev);
    if (p_.offload_embeddings)
      host_op(Phase::kBackward, -1, t.mb, t.chunk, "embedding_grad_to_host", StreamId::kCopy,
              tokens_ * m_.hidden * grad_bytes(p_), prev);
    backward_end_[{t.mb, t.chunk}] = prev;
    return prev;
  }
  backward_end_[{t.mb, t.chunk}] = prev;  // its W needs the compute, not the send
  return send(t, Phase::kBackward, "send_gradient", rank_at(t.chunk, vs - 1), prev);
}

int StageBuilder::merged_pair(const Task& f, const Task& b, int last) {
  std::array<std::size_t, kStreamCount> from{};
  for (int s = 0; s < kStreamCount; ++s) from[static_cast<std::size_t>(s)] = prog_.streams[s].size();
  const int first = static_cast<int>(ops_.size());
  const int f_end = forward_task(f, last);
  const int b_first = static_cast<int>(ops_.size());
  const int b_end = backward_task(b, last);
  // Each task's ops in segments that end at an expert all-to-all; the streams then take the
  // backward's first segment, the forward's first, the backward's second, ... (Megatron-Core's
  // order: the backward's combine beside the forward's attention, the forward's dispatch beside
  // the backward's experts, and so on). Each task keeps its own order, so the order stays one
  // the graph allows.
  std::vector<int> key(ops_.size() - static_cast<std::size_t>(first));
  auto segments = [&](int begin, int end, int parity) {
    int seg = 0;
    for (int v = begin; v < end; ++v) {
      key[static_cast<std::size_t>(v - first)] = 2 * seg + parity;
      if (ops_[static_cast<std::size_t>(v)].stream == StreamId::kEp) ++seg;
    }
  };
  segments(first, b_first, 1);
  segments(b_first, static_cast<int>(ops_.size()), 0);
  for (int s = 0; s < kStreamCount; ++s) {
    auto& order = prog_.streams[s];
    std::stable_sort(order.begin() + static_cast<std::ptrdiff_t>(from[static_cast<std::size_t>(s)]),
                     order.end(), [&](int x, int y) {
                       return key[static_cast<std::size_t>(x - first)] <
                              key[static_cast<std::size_t>(y - first)];
                     });
  }
  next_deps_.push_back(f_end);  // what follows the pair waits for both halves
  return b_end;
}

void StageBuilder::weight_grad_task(const Task& t) {
  const std::vector<int> layers = chunk_layers(t.chunk);
  int prev = backward_end_.at({t.mb, t.chunk});
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    const LayerKernels& k = kernels(*it);
    for (int i = k.count - 1; i >= 0; --i) {
      const KernelCost& kc = k.fwd[i];
      if (kc.bwd_weight_s <= 0) continue;
      prev = compute(Phase::kWeightGrad, *it, t.mb, t.chunk, kernel_name(kc.name).data(), kc.cls,
                     kc.bwd_weight_s, kc.flops, 0, prev, &kc);
      if (t.deferrable) {
        if (deferrable_.size() <= static_cast<std::size_t>(prev)) deferrable_.resize(prev + 1);
        deferrable_[prev] = true;
      }
    }
  }
  weight_grad_ends_.push_back(prev);  // joined before the optimizer; the next F/B does not wait
}

StageBuilder::StepParams StageBuilder::step_params() const {
  StepParams s;
  for (int c = 0; c < chunks_; ++c)
    for (int layer : chunk_layers(c)) {
      s.dense += layer_params(layer) - layer_expert_params(layer);
      s.experts += layer_expert_params(layer);
    }
  // The input embedding, the LM head and the final norm (DualPipe's end ranks hold both ends, one
  // per direction).
  s.embed = m_.end_params_on_stage(prog_.stage, p_.pp, dualpipe_, p_.tp);
  s.dense += s.embed;
  return s;
}

int StageBuilder::mirror_grad_sum(int prev, double embed) {
  // Stage st's parameters live on rank st (chunk 0) and on its mirror p-1-st (chunk 1), and the
  // end ranks both hold the embedding and the head: the two copies' gradients are summed before
  // the step, as a two-rank all-reduce would (each rank sends one chunk's worth twice): this
  // rank's chunk-1 gradients go to the mirror, which adds them to its chunk 0, and the sums come
  // back into chunk 1.
  const double gb = grad_bytes(p_);
  auto chunk_grads = [&](int c) {
    double params = embed / 2;
    for (int layer : chunk_layers(c)) params += layer_params(layer);
    return params * gb;
  };
  auto p2p = [&](OpKind kind, const char* name, int tag, double bytes, int dep) {
    Op op = base(Phase::kStep, -1, -1, tag, name);
    op.kind = kind;
    op.stream = StreamId::kPp;
    op.peer_stage = p_.pp - 1 - prog_.stage;
    op.bytes = bytes;
    return add(op, {dep});
  };
  const int sent = p2p(OpKind::kSend, "mirror_grad_send", 1, chunk_grads(1), prev);
  const int got = p2p(OpKind::kRecv, "mirror_grad_recv", 1, 0, -1);
  const double add_bytes = 3 * chunk_grads(0);
  next_deps_.push_back(sent);
  const int summed = compute(Phase::kStep, -1, -1, 0, "mirror_grad_add", KernelClass::kElementwise,
                             d_.stream_seconds(add_bytes), 0, add_bytes, got);
  const int back = p2p(OpKind::kSend, "mirror_sum_send", 0, chunk_grads(0), summed);
  prev = p2p(OpKind::kRecv, "mirror_sum_recv", 0, 0, -1);
  next_deps_.push_back(back);
  return prev;
}

int StageBuilder::step_grad_reduce(int prev, const StepParams& params) {
  // The layers reduced already: bucket by bucket in the backward, or (whole_) chunk by chunk; the
  // tables (FSDP's root unit, embedding and head) are reduced here.
  const bool layers_done = (p_.overlap_grad_reduce && !split_w_) || whole_;
  const double rest = layers_done ? params.embed : params.dense;
  auto reduce = [&](double n, GroupKind g, const char* name) {
    if (n <= 0) return;
    prev = grad_reduce(Phase::kStep, -1, -1, 0, name, g, n, prev, false);
  };
  reduce(rest, GroupKind::kDp, "grad_reduce");
  if (!layers_done) reduce(params.experts, GroupKind::kExpertDp, "expert_grad_reduce");
  pending_decompressions();
  return prev;
}

int StageBuilder::optimizer_step(int prev, const StepParams& params) {
  const double wb = weight_bytes(p_.precision), gb = grad_bytes(p_);
  // The optimizer waits for every reduction issued on the dp streams.
  for (StreamId sid : {StreamId::kDp, StreamId::kDpReduce})
    for (int v2 : prog_.streams[static_cast<int>(sid)]) next_deps_.push_back(v2);
  // ... and for the gradients offloaded to the host (the copy stream runs in order: its last op).
  const auto& copies = prog_.streams[static_cast<int>(StreamId::kCopy)];
  const int last_copy = copies.empty() ? -1 : copies.back();
  if (last_copy >= 0) next_deps_.push_back(last_copy);
  const double shard = static_cast<double>(p_.dp) * p_.cp;
  // Plan::offload_embeddings: the input table is updated on the host, beside the device's step.
  const double host_table =
      p_.offload_embeddings && prog_.stage == 0 ? 1.0 * m_.vocab * m_.hidden / p_.tp : 0.0;
  const double owned =
      p_.zero_stage >= 1
          ? ((params.dense - host_table) / shard + params.experts / static_cast<double>(p_.edp()))
          : params.dense - host_table + params.experts;
  if (host_table > 0)
    host_op(Phase::kStep, -1, -1, 0, "host_embedding_optimizer", StreamId::kHost,
            host_table * kAdamBytesPerParam, last_copy);
  if (!p_.offload_optimizer) {
    const double bytes = owned * adam_bytes_per_param(p_);
    return compute(Phase::kStep, -1, -1, 0, "optimizer", KernelClass::kElementwise,
                   d_.optimizer_seconds(bytes), 0, bytes, prev);
  }
  // ZeRO-Offload: gradients to the host over the copy engine, Adam on the host CPUs, updated
  // weights back. With Plan::offload_params the layers' gradients went to the host during the
  // backward and their weights live there: only the rest (embedding, head) crosses at the step.
  const double crossing = p_.offload_params && params.dense + params.experts > 0
                              ? (params.embed - host_table) / (params.dense + params.experts - host_table)
                              : 1.0;
  const NodeSpec& node = w_cluster_.node;
  auto step_op = [&](const char* name, OpKind kind, StreamId stream, double bytes, double rate) {
    Op op = base(Phase::kStep, -1, -1, 0, name);
    op.kind = kind;
    op.stream = stream;
    op.device = stream == StreamId::kHost ? DeviceKind::kCpu : d_.kind;
    op.bytes = bytes;
    op.seconds = bytes / rate;
    return add(op, {prev});
  };
  prev = step_op("grad_to_host", OpKind::kCopy, StreamId::kCopy, owned * crossing * gb, host_link_rate(node));
  prev = step_op("host_optimizer", OpKind::kCompute, StreamId::kHost, owned * kAdamBytesPerParam,
                 host_optimizer_rate(node));
  return step_op("params_to_device", OpKind::kCopy, StreamId::kCopyIn, owned * crossing * wb,
                 host_link_rate(node));
}

StageProgram StageBuilder::finish() {
  // Weight-gradient ops run from their own queue (see Simulator: deferrable work).
  auto& compute_ops = prog_.streams[static_cast<int>(StreamId::kCompute)];
  std::vector<int> main_ops;
  auto deferred = [&](int op) {
    return static_cast<std::size_t>(op) < deferrable_.size() && deferrable_[op];
  };
  for (int op : compute_ops) (deferred(op) ? prog_.deferred : main_ops).push_back(op);
  compute_ops = std::move(main_ops);
  auto g = std::make_unique<OpGraph>(edges_.begin(), edges_.end(), ops_.size());
  for (std::size_t i = 0; i < ops_.size(); ++i) (*g)[i] = ops_[i];
  prog_.graph_ptr = std::move(g);
  return std::move(prog_);
}

StageProgram StageBuilder::build() {
  plan_stage();
  // The pipeline schedule's tasks: forward, backward and (split off) weight-gradient passes.
  int last = -1;
  const std::vector<Task> tasks =
      schedule_tasks(p_.schedule, prog_.stage, p_.pp, micro_batches_, chunks_, p_.overlap_ep_comm);
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const Task& t = tasks[i];
    if (t.type == TaskType::kF && i + 1 < tasks.size() && tasks[i + 1].merged)
      last = merged_pair(t, tasks[++i], last);
    else if (t.type == TaskType::kF)
      last = forward_task(t, last);
    else if (t.type == TaskType::kB)
      last = backward_task(t, last);
    else  // kW: weight gradients split off a B, off the F/B chain
      weight_grad_task(t);
  }
  // End of step: gradient reduction not yet done, optimizer, parameter all-gather (ZeRO-1/2).
  const StepParams params = step_params();
  int prev = last;
  for (int w : weight_grad_ends_) next_deps_.push_back(w);
  for (int s : open_sends_) next_deps_.push_back(s);
  if (dualpipe_) prev = mirror_grad_sum(prev, params.embed);
  if (whole_ && split_w_)  // the weight gradients done (joined above): every chunk's reduction
    for (int c = 0; c < chunks_; ++c) prev = chunk_reduce(c, micro_batches_ - 1, prev);
  if (!zero3_ || whole_) prev = step_grad_reduce(prev, params);
  prev = optimizer_step(prev, params);
  if (p_.zero_stage == 1 || p_.zero_stage == 2) {
    const double wb = weight_bytes(p_.precision);
    prev =
        collective(Phase::kStep, -1, -1, 0, "param_all_gather", StreamId::kDp, GroupKind::kDp,
                   CollectiveOp::kAllGather, (gather_in_forward() ? params.embed : params.dense) * wb, prev);
    if (params.experts > 0 && !gather_in_forward())
      collective(Phase::kStep, -1, -1, 0, "expert_param_all_gather", StreamId::kDp, GroupKind::kExpertDp,
                 CollectiveOp::kAllGather, params.experts * wb, prev);
  }
  return finish();
}

}  // namespace

Result<Workload> lower(const ModelSpec& model, const ClusterSpec& profile, const Plan& plan) {
  return lower(model, profile, plan, {});
}

Result<Workload> lower(const ModelSpec& model, const ClusterSpec& profile, const Plan& plan,
                       const std::vector<RecomputeMask>& layer_recompute) {
  if (!layer_recompute.empty() &&
      (plan.recompute != Recompute::kOptimal || static_cast<int>(layer_recompute.size()) != model.layers))
    return Error("lower: per-layer recompute sets need recompute optimal and one set per layer");
  // Kernels are priced on the device rates this plan sees (a cache level resolved).
  const ClusterSpec cluster = cluster_for_plan(model, profile, plan);
  Workload w;
  w.model = model;
  w.cluster = cluster;
  w.plan = plan;
  w.devices = rank_devices(plan, cluster);
  if (!plan.stage_tp.empty())
    for (int st = 0; st < plan.pp; ++st) w.stage_plans.push_back(stage_view(plan, st));
  // Kernel costs per accelerator type the stages run on (one unless Plan::stage_devices mixes)
  // and tensor-parallel degree (one unless Plan::stage_tp varies it).
  struct Kernels {
    LayerKernels dense, moe;
    LayerShape shape;
  };
  std::map<std::pair<int, int>, Kernels> by_group;
  // Data loading: in the loop it always delays the first stage; beside training (prefetch) only
  // when the loader is slower than the rest of the step, which the analytic model estimates.
  AnalyticModel am(model, cluster);
  const Prediction ref = am.evaluate(plan);
  if (plan.recompute == Recompute::kOptimal)
    w.layer_recompute = layer_recompute.empty() ? am.recompute_assignment(plan).layer_masks : layer_recompute;
  const DataLoadCost load = data_load_cost(model, cluster, plan);
  w.load_in_loop = plan.data.prefetch < 1;
  const double mbs = static_cast<double>(std::max<std::int64_t>(1, plan.micro_batches()));
  if (w.load_in_loop || load.seconds > ref.step_time_s - ref.time.data)
    w.load_per_micro_batch_s = load.seconds / mbs;
  w.stages.reserve(plan.pp);
  for (int st = 0; st < plan.pp; ++st) {
    const int g = stage_group(plan, cluster.node, st);
    const DeviceSpec& d = cluster.node.devices[g].device;
    const Plan& q = w.stage_plan(st);
    auto it = by_group.find({g, q.tp});
    if (it == by_group.end()) {
      Kernels k;
      k.shape = plan_layer_shape(model, q);
      const Partner partner = attention_partner(q, cluster.node);
      k.dense = issued_layer_kernels(model, cluster, d, q, k.shape, false, partner);
      k.moe = model.is_moe() ? issued_layer_kernels(model, cluster, d, q, k.shape, true, partner) : k.dense;
      it = by_group.emplace(std::pair{g, q.tp}, k).first;
    }
    w.stages.push_back(StageBuilder(w, st, d, it->second.dense, it->second.moe, it->second.shape).build());
  }

  // Match each send with the recv of the same micro-batch and chunk boundary in the peer stage.
  std::map<std::tuple<int, int, int, int, bool>, int> recvs;  // (stage, mb, chunk, phase) -> op
  for (const auto& sp : w.stages)
    for (auto v : boost::make_iterator_range(boost::vertices(sp.graph()))) {
      const Op& op = sp.graph()[v];
      if (op.kind == OpKind::kRecv)
        recvs[{sp.stage, op.micro_batch, op.chunk, static_cast<int>(op.phase), true}] = static_cast<int>(v);
    }
  const int p = plan.pp;
  for (auto& sp : w.stages)
    for (auto v : boost::make_iterator_range(boost::vertices(sp.graph()))) {
      Op& op = sp.graph()[v];
      if (op.kind != OpKind::kSend) continue;
      // Interleaved: the next place of the one pipeline of chunks may be the peer's next chunk.
      // DualPipe: each chunk is its own pipeline (and the mirror exchange tags its rounds).
      const int vs = op.chunk * p + sp.stage;
      const int peer_vs = op.phase == Phase::kForward ? vs + 1 : vs - 1;
      const int peer_chunk = plan.schedule == Schedule::kDualPipe ? op.chunk : peer_vs / p;
      auto it = recvs.find({op.peer_stage, op.micro_batch, peer_chunk, static_cast<int>(op.phase), true});
      if (it == recvs.end())
        return Error("internal: unmatched pipeline send in stage " + std::to_string(sp.stage));
      op.match = it->second;
    }
  // Whole-job FLOPs, as the analytic model counts them.
  w.model_flops = ref.model_flops;
  w.hardware_flops = ref.hardware_flops;
  return w;
}

}  // namespace foresight
