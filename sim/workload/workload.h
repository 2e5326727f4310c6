// Workload: a plan lowered to op graphs -- one DAG (Boost.Graph) per rank class. Ranks of the same
// pipeline stage run the same program; they differ only in which devices their collectives and
// sends reach, which the executor derives from the rank's coordinates. Both executors consume
// this: the discrete-event simulator (sim/des) and, later, the runtime.
//
//   Result<Workload> w = lower(model, cluster, plan);
//   const StageProgram& s0 = w->stages[0];
//   for (auto v : boost::make_iterator_range(boost::vertices(s0.graph))) s0.graph[v].name ...
//
// Every op has a stable id, e.g. "r12/L3/mb2/fwd/qkv" (rank 12, layer 3, micro-batch 2), so a
// predicted and a measured trace align op by op.
#pragma once

#include <array>
#include <boost/graph/adjacency_list.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sim/analytic/layer_ops.h"
#include "sim/core/status.h"
#include "sim/net/collective_flows.h"
#include "sim/spec/hardware.h"
#include "sim/spec/model.h"
#include "sim/spec/plan.h"

namespace foresight {

enum class OpKind : std::uint8_t { kCompute, kCollective, kSend, kRecv, kCopy };
enum class Phase : std::uint8_t { kForward, kBackward, kWeightGrad, kRecompute, kStep };
// kCopy: the accelerator's copy engine device -> host (and the optimizer offload's copies);
// kCopyIn: the host -> device engine (PCIe is full duplex); kHost: work on the host CPUs;
// kDpReduce: gradient reduce-scatters of ZeRO-3/FSDP (its post-backward stream); kLoader: the
// data loader delivering micro-batches to the first stage; kPartner: the partner device of
// Plan::attention_device (its kernels and the transfers to and from it, in order); kPpRecv: the
// pipeline's receives where they are posted ahead of the sends (Plan::p2p_overlapped); kAmax:
// FP8 delayed scaling's amax reductions (Transformer Engine's amax group has a communicator, and
// so an NCCL stream, of its own).
enum class StreamId : std::uint8_t {
  kCompute = 0,
  kTp,
  kPp,
  kDp,
  kEp,
  kCp,
  kCopy,
  kHost,
  kDpReduce,
  kCopyIn,
  kLoader,
  kPartner,
  kPpRecv,
  kAmax,
  kCount
};
constexpr int kStreamCount = static_cast<int>(StreamId::kCount);
// Which communicator a collective uses (the rank's own group of that kind). kStage: every rank of
// the pipeline stage (tp x cp x dp), Megatron-Core's amax reduction group.
enum class GroupKind : std::uint8_t { kNone, kTp, kCp, kDp, kEp, kExpertDp, kStage };

std::string_view to_string(Phase p);
std::string_view to_string(StreamId s);
std::string_view to_string(GroupKind g);

struct Op {
  OpKind kind = OpKind::kCompute;
  Phase phase = Phase::kForward;
  StreamId stream = StreamId::kCompute;
  GroupKind group = GroupKind::kNone;
  CollectiveOp collective = CollectiveOp::kAllReduce;
  KernelClass cls = KernelClass::kElementwise;
  DType dtype = DType::kBf16;            // compute datatype (compute ops)
  DeviceKind device = DeviceKind::kGpu;  // device class the op runs on
  // Communication whose data the caches no longer hold: the gradient reduction after the backward
  // (LinkSpec::cold_bandwidth applies inside a node).
  bool cold = false;
  const char* name = "";    // kernel or op name: "qkv", "mlp.tp_all_reduce", "grad_reduce", ...
  std::int16_t layer = -1;  // model layer, -1 for none
  std::int16_t chunk = 0;   // virtual pipeline chunk
  std::int32_t micro_batch = -1;
  double seconds = 0;                // modelled duration (compute ops)
  double host_wait = 0;              // the part of `seconds` the device waits for the host
  double flops = 0;                  // executed FLOPs (compute ops)
  double bytes = 0;                  // memory traffic (compute) or message/buffer size (communication)
  std::int64_t m = 0, n = 0, k = 0;  // GEMM shape
  std::int32_t peer_stage = -1;      // send/recv: the other pipeline stage
  std::int32_t match = -1;           // send: the index of the matching recv op in the peer stage
};

using OpGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, Op>;

struct StageProgram {
  int stage = 0;
  // Held by pointer so that moving a program never copies its graph.
  std::unique_ptr<OpGraph> graph_ptr = std::make_unique<OpGraph>();
  OpGraph& graph() { return *graph_ptr; }
  const OpGraph& graph() const { return *graph_ptr; }
  // Ops of each stream in issue order (CUDA stream semantics: one at a time, in order).
  std::array<std::vector<int>, kStreamCount> streams;
  // Deferrable compute ops (zero-bubble weight gradients), in order: the compute stream runs the
  // next of these only when its next regular op is not ready yet.
  std::vector<int> deferred;
  int layers = 0;                              // layers on this stage (all chunks)
  std::vector<std::vector<int>> chunk_layers;  // model layers of each virtual chunk, in order
};

struct Workload {
  ModelSpec model;
  ClusterSpec cluster;
  Plan plan;
  std::vector<StageProgram> stages;  // one per pipeline stage (rank class)
  // Each stage's own view of the plan (Plan::stage_tp: its tp, dp and micro-batch size); empty
  // when every stage runs the plan itself.
  std::vector<Plan> stage_plans;
  std::vector<int> devices;  // rank -> device index in the cluster's topology (rank_devices)
  // Recompute::kOptimal: the modules each layer recomputes (recompute_assignment), by layer index;
  // empty for the fixed policies.
  std::vector<RecomputeMask> layer_recompute;
  double model_flops = 0;     // per step, whole job (6N-style, no recompute)
  double hardware_flops = 0;  // per step, whole job, recompute included
  // Data loading the first stage waits for, per micro-batch (0: the loader keeps ahead), and
  // whether it runs in the training loop (no prefetch) or beside it (sim/analytic/data_loading.h).
  double load_per_micro_batch_s = 0;
  bool load_in_loop = false;

  int ranks() const { return plan.gpus(); }
  // The modules layer `layer`, at `position` in its stage (or chunk), recomputes: the optimal
  // assignment's choice, else the plan's policy for that position.
  RecomputeMask recompute_of(int layer, int position) const {
    if (!layer_recompute.empty()) return layer_recompute[static_cast<std::size_t>(layer)];
    return plan.recomputes(position) ? recompute_mask(plan) : RecomputeMask{0};
  }
  // Ranks per pipeline stage (the same for every stage, whatever its own tp and dp).
  int stage_ranks() const { return plan.tp * plan.cp * plan.dp; }
  const Plan& stage_plan(int stage) const { return stage_plans.empty() ? plan : stage_plans[stage]; }
  // Megatron's rank order: tp fastest, then cp, then dp, then pp (tp, cp, dp of the stage's plan).
  int stage_of(int rank) const { return rank / stage_ranks(); }
  int rank_of(int tp, int cp, int dp, int pp) const {
    const Plan& s = stage_plan(pp);
    return pp * stage_ranks() + tp + s.tp * (cp + s.cp * dp);
  }
  // The same place in another stage (pipeline sends go there).
  int counterpart(int rank, int stage) const { return stage * stage_ranks() + rank % stage_ranks(); }
  // Members (ranks, in group order) of `rank`'s group of kind `g`.
  std::vector<int> group_members(int rank, GroupKind g) const;
  // All groups of kind `g` in pipeline stage `stage` (the siblings of a symmetric simulation).
  std::vector<std::vector<int>> stage_groups(int stage, GroupKind g) const;
  // The stable id of op `v` of stage program `stage` as run by `rank`.
  std::string op_id(int rank, int stage, int v) const;
  std::size_t op_count() const;
};

// Lowers a validated plan. Errors: schedules the simulator does not model yet.
Result<Workload> lower(const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan);
// The same with given per-layer recompute module sets (by layer index) for a Recompute::kOptimal
// plan, instead of recompute_assignment's: what a test or a caller with its own choice runs.
Result<Workload> lower(const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan,
                       const std::vector<RecomputeMask>& layer_recompute);

}  // namespace foresight
