// Hardware specs: a device (GPU, NPU or CPU), a node (devices + intra-node fabric + NICs) and a
// cluster (nodes + network tiers). Every number in the preset files cites its source.
//
//   Result<ClusterSpec> c = load_cluster("dgx-a100-hdr");     // preset name or file path
//   const DeviceSpec& gpu = c->node.accelerator();            // a100-sxm4-80gb
//   double bw = c->node.nic_bandwidth_per_device();           // bytes/s across nodes, per GPU
#pragma once

#include <array>
#include <limits>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "sim/core/status.h"

namespace foresight {

enum class DeviceKind { kGpu, kNpu, kCpu };
enum class DType { kFp32 = 0, kTf32, kBf16, kFp16, kFp8, kInt8, kCount };
constexpr int kDTypeCount = static_cast<int>(DType::kCount);

std::string to_string(DeviceKind k);
std::string to_string(DType d);

// One cache level of a device (DeviceSpec::caches): its size and the rates its data runs at.
struct CacheLevel {
  double bytes = 0;
  double gemm_efficiency = 0;
  double memory_bandwidth = 0;  // bytes/s, as DeviceSpec::memory_bandwidth (memory_efficiency applies)
  double gemm_weight_fwd_bandwidth = 0, gemm_weight_bwd_bandwidth = 0;  // as the DeviceSpec's, in this level
  double activation_element_s = 0;                                      // as the DeviceSpec's, in this level
  // AdamW's rate over its state in this level (bytes/s, kAdamBytesPerParam per parameter; 0: the
  // level's streaming rate), for a plan whose whole state fits the level.
  double optimizer_bandwidth = 0;
  // The span of operands the rates were measured over, where smaller than `bytes` (0: `bytes`): a
  // working set between the two runs at rates blended toward the next level's (or memory's), in
  // proportion to how far past the span it reaches (see cluster_for_plan).
  double span = 0;
  bool operator==(const CacheLevel&) const = default;
};

struct DeviceSpec {
  std::string name;
  std::string vendor;
  DeviceKind kind = DeviceKind::kGpu;
  std::array<double, kDTypeCount> peak_flops{};  // dense FLOP/s per dtype; 0 = not supported
  double memory_bytes = 0;                       // HBM (or DRAM for a CPU) capacity
  double memory_bandwidth = 0;                   // bytes/s
  // Fitted, physical efficiencies (see each preset's sources). The defaults below apply only to a
  // device file that gives none; they are generic assumptions, not measurements.
  double gemm_efficiency = 0.7;  // sustained fraction of peak for large training GEMMs
  // FP8 GEMMs (Transformer Engine's linear layers) as a fraction of the FP8 peak; 0: as
  // gemm_efficiency. Hopper's FP8 Tensor Cores reach a smaller share of their doubled peak.
  double gemm_fp8_efficiency = 0;
  double fp8_gemm_efficiency() const {
    return gemm_fp8_efficiency > 0 ? gemm_fp8_efficiency : gemm_efficiency;
  }
  // The output tile a GPU's GEMM library computes on one SM (the tile in its kernels' names: cuBLAS's
  // ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3, sm90_xmma_gemm_..._tilesize128x256x64)
  // and the fixed cost of each tile in main-loop iterations (the pipeline's fill and the epilogue's
  // store). With a tile and sm_count, gemm_efficiency is the rate of a GEMM large in every
  // dimension, and gemm_shape_efficiency() the share of it a given shape reaches; without (m 0, the
  // CPU and calibrated profiles) every GEMM runs at gemm_efficiency.
  struct GemmTile {
    int m = 0, n = 0, k = 0;  // k: the main loop's step in 16-bit elements (FP8: twice as many)
    double fixed_k_steps = 0;
    bool operator==(const GemmTile&) const = default;
  } gemm_tile;
  // The share of gemm_efficiency a GEMM with an m x n output and reduction k reaches (`groups` of
  // them in one launch: a grouped GEMM's experts; `fp8`: FP8 operands, a main-loop step twice as
  // deep): the tiles' padding of m, n and k and each tile's fixed cost, the tiles spread evenly over
  // the SMs; a problem with fewer tiles than SMs splits its reduction (split-K). 1 without a tile.
  double gemm_shape_efficiency(double m, double n, double k, double groups = 1, bool fp8 = false) const;
  double attention_efficiency = 0.5;  // fused (flash) attention, fraction of peak
  // The blocks a GPU's flash-attention kernels work in (FlashAttention's kBlockM x kBlockN: a block
  // of q query rows per thread block, looping over blocks of kv keys) and each thread block's fixed
  // cost in loop iterations (loading its queries, rescaling and storing its output). With a tile
  // and sm_count, the attention efficiencies are the rates of a long sequence, and
  // attention_shape_efficiency() the share of it a given call reaches.
  struct AttentionTile {
    int q = 0, kv = 0;
    double fixed_kv_steps = 0;
    bool operator==(const AttentionTile&) const = default;
  } attention_tile;
  // The share of the long-sequence attention rate one flash-attention call reaches: `heads` (heads
  // times sequences) thread-block rows of q_len queries each against kv_len keys, causal (a query
  // sees the keys up to its own position; the queries are the last q_len of the kv_len), in
  // `calls` launches (context parallelism's steps, each paying the fixed cost again). The blocks
  // the causal diagonal cuts are computed whole; a call with fewer blocks than SMs waits for its
  // longest block row. 1 without a tile.
  double attention_shape_efficiency(double q_len, double kv_len, double heads, double calls = 1) const;
  // Exponentials per second (the SMs' special-function units: 16 per clock per SM on sm_80 to
  // sm_100, CUDA C++ Programming Guide, arithmetic instruction throughput); 0: not modelled.
  // Flash attention computes one per score element forward and one backward (re-forming P).
  double special_function_rate = 0;
  // Whether the device's best attention kernels (attention_efficiency, not flash2) overlap the
  // exponentials with the matrix multiplies (FlashAttention-3's and cuDNN's ping-pong and
  // intra-warpgroup pipelining on Hopper and later); FlashAttention-2 runs them in turn.
  bool attention_exp_overlap = false;
  // Attention's time per FLOP at head dimension `head_dim` against at 128, the width the
  // efficiencies were measured at: matrix-multiply work per score grows with the width, the
  // exponential per score does not. `efficiency` is the kernel's rate at 128 (fraction of `peak`),
  // `overlap` whether its exponentials hide under the multiplies. 1 without special_function_rate.
  double attention_head_dim_factor(double head_dim, double efficiency, double peak, bool overlap) const;
  // FlashAttention-2-class kernels (Plan::attention_kernel kFlash2), fraction of peak; 0: the same
  // as attention_efficiency (where they are the device's best kernels, as on A100).
  double attention_flash2_efficiency = 0;
  double memory_efficiency = 0.8;  // streaming kernels, fraction of memory bandwidth
  // The optimizer's rate as a multiple of stream_rate(). The elementwise kernels meet tensors that
  // the step just wrote; the optimizer streams the parameters and moments, untouched since the last
  // step: where a cache holds part of a step (a CPU's last level), it reads them from memory
  // instead. `foresight calibrate` fits it from AdamW with its state evicted; the GPU profiles
  // leave it 1 (their step's data is far beyond the L2: every kernel streams from HBM).
  double optimizer_efficiency = 1.0;
  static constexpr double kOptimizerEfficiencyMin = 0.01,
                          kOptimizerEfficiencyMax = 4.0;  // what a profile may say
  double kernel_overhead_s = 5e-6;                        // launch + tail per kernel
  // Per kernel inside a CUDA graph (Plan::cuda_graphs): the host's launch work is gone, the
  // device still schedules each node. Assumption (1 us) until calibrate measures it.
  double graph_kernel_overhead_s = 1e-6;
  // The host's time to issue one operation of an eager framework (PyTorch's Python and dispatcher,
  // the library's set-up, cudaLaunchKernel): the CPU, not the device, pays it, and the device
  // waits only where the host falls behind (layer_ops.h, issue_from_host). Graph-captured kernels
  // (Plan::cuda_graphs) cost the host nothing each. 0: not modelled (the CPU and calibrated
  // profiles, whose kernels are timed as the host runs them).
  double host_op_s = 0;
  // Fixed time per GEMM and per attention call (forward or backward) beyond the launch: library
  // set-up, per-head loops. `foresight calibrate` fits them as the intercepts of its lines (the
  // CPU backend's Eigen calls); the GPU profiles leave them 0 (the launch overhead covers it).
  double gemm_setup_s = 0;
  double attention_setup_s = 0;
  // Attention's work on its scores that does not scale with the head width (scale, softmax, the
  // probabilities' gradient), in seconds per causal score element (one head, one query-key pair;
  // forward and backward together, half each). `foresight calibrate` fits it on a CPU; the GPU
  // profiles leave it 0 (their efficiency covers flash attention's softmax).
  double attention_score_s = 0;
  // A fixed time per (sequence, head) an attention call loops over, forward and backward together
  // (half each): a CPU backend runs small GEMMs per head. `foresight calibrate` fits it on a CPU;
  // the GPU profiles leave it 0 (one fused kernel covers every head).
  double attention_head_s = 0;
  // Flash attention's backward against its forward, whole calls (0: the flash kernels' 2.5, which
  // re-run Q.K^T). `foresight calibrate` measures a CPU backend's, which keeps the probabilities
  // instead (about 1x); the model splits the attention pair's time by it.
  double attention_backward_ratio = 0;
  // The cost of an exponential (or tanh) per element beyond the bytes moved: the MLP's activation
  // (SiLU, GeLU) forward and backward, and cross-entropy's softmax over the logits. `foresight
  // calibrate` fits it on a CPU, where those kernels are compute-bound at the models' sizes (the
  // tiny model's SwiGLU forward ran 45% above the streaming line); the GPU profiles leave it 0.
  double activation_element_s = 0;
  // A GEMM's passes over its weight matrix beyond the math, as the rate at which they move its
  // bytes (0 = none): a CPU BLAS packs the weight panel before multiplying, and the backward also
  // reads and writes the weight's gradient (dW += X^T dY). `foresight calibrate` fits both on a CPU
  // (forward about one pass at the streaming rate, backward about five); cuBLAS packs nothing and
  // the GPU profiles leave them 0.
  double gemm_weight_fwd_bandwidth = 0;  // bytes of weight per second, forward
  double gemm_weight_bwd_bandwidth = 0;  // the same, backward (data and weight gradients together)
  // Cache levels that can hold a whole training step, smallest first (none: the GPU presets, which
  // model HBM only). A plan whose working set per device (weights, gradients, activations and
  // buffers) fits a level runs its GEMMs and streaming kernels at the smallest such level's rates;
  // one whose whole state (the optimizer's too) fits a level also finds the optimizer's state and
  // the reduced gradients there (the smallest such level with an optimizer_bandwidth, else the
  // smallest such level; see cluster_for_plan). `foresight calibrate`
  // measures a CPU's: its per-core L2, a span the size of a few L2s and, where the L3 holds it, a
  // larger span.
  std::vector<CacheLevel> caches;
  // Where the node's devices share one memory (a CPU's cores its DRAM channels), the memory rates
  // above (memory_bandwidth, the weight passes, the exponentials, the optimizer's, the GEMM
  // efficiency over operands beyond the caches) are one device's while `shared_by` of them run at
  // once, and `alone` holds the same rates measured with this device running alone (alone.bytes
  // and alone.span unused). A plan that runs fewer of the node's devices than `shared_by` takes
  // rates blended toward `alone`'s (see cluster_for_plan). `mpirun -np 2 foresight calibrate`
  // measures both on a CPU; on a 2-core machine one rank alone streams and runs AdamW faster than
  // each of two ranks at once. shared_by 0: none.
  struct SharedMemory {
    int shared_by = 0;
    CacheLevel alone;
    bool operator==(const SharedMemory&) const = default;
  } shared_memory;
  double memory_reserved_bytes = 0;  // runtime context, allocator fragmentation, workspaces
  // Streaming multiprocessors (NVIDIA) from the datasheet; 0: not stated. Communication kernels
  // that run beside a GEMM take some of them (Transformer Engine's userbuffers TP overlap reserves
  // its SMs from the GEMM: layer_ops.h, tp_overlap_seconds).
  int sm_count = 0;
  double power_load_w = 0, power_idle_w = 0;
  double price_per_hour_usd = 0;
  std::string reference_cluster;  // the usual system this device ships in (a cluster preset)

  double peak(DType d) const { return peak_flops[static_cast<int>(d)]; }
  // Achieved bytes/s of streaming (memory-bound) kernels, and the seconds of one that moves `bytes`.
  double stream_rate() const { return memory_bandwidth * memory_efficiency; }
  double stream_seconds(double bytes) const { return bytes > 0 ? bytes / stream_rate() : 0.0; }
  // The optimizer's step over `bytes` of parameters, gradients and moments.
  double optimizer_seconds(double bytes) const { return stream_seconds(bytes) / optimizer_efficiency; }
  // A GEMM's weight passes (gemm_weight_*_bandwidth) for a weight of `bytes`, forward or backward.
  double weight_pass_s(double bytes, bool backward) const {
    const double rate = backward ? gemm_weight_bwd_bandwidth : gemm_weight_fwd_bandwidth;
    return rate > 0 ? bytes / rate : 0.0;
  }
  bool operator==(const DeviceSpec&) const = default;
};

struct DeviceGroup {
  DeviceSpec device;
  int count = 0;
  bool operator==(const DeviceGroup&) const = default;
};

// The collectives (nccl-tests' names; a send/recv is one point-to-point transfer).
enum class CollectiveOp { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kSendRecv, kBroadcast };
std::string_view to_string(CollectiveOp op);  // "all_reduce", "all_gather", ...

// A collective's own rates on a link, where they differ from the all-reduce's, which are the
// link's own fields (LinkSpec). NCCL moves every collective at about the same bus bandwidth; MPI
// over shared memory does not: its all-gather only copies, and Open MPI's reduce-scatter is
// slower than its all-reduce (on the 2-core VM, 4 MiB: all-gather 20 GB/s algbw, all-reduce 7.5,
// reduce-scatter 4). `foresight calibrate` fits each one it measures. A field left 0 takes the
// link's.
struct CollectiveRates {
  double bandwidth = 0;                // bytes/s, busbw convention, as LinkSpec::bandwidth (x efficiency)
  double latency_s = 0;                // per algorithm step, as LinkSpec::latency_s
  double small_message_latency_s = 0;  // below its small-message size (its own, else the link's)
  // Its own small-message size where its protocol changes elsewhere than the link's (0: the
  // link's): a send/recv of 4 KiB already takes Open MPI's rendezvous, the all-reduce's 4 KiB
  // messages (8 KiB collectives) do.
  double small_message_bytes = 0;
  double cold_bandwidth = 0;  // as LinkSpec::cold_bandwidth
  bool empty() const {
    return bandwidth <= 0 && latency_s <= 0 && small_message_latency_s <= 0 && small_message_bytes <= 0 &&
           cold_bandwidth <= 0;
  }
  bool operator==(const CollectiveRates&) const = default;
};

// Collectives' times as measured on one group of `ranks` inside a node (`foresight calibrate`'s
// points, nccl-tests' sizes): where a plan's group has as many ranks and a size lies between the
// first and the last measured, its time is interpolated between the two neighbouring sizes
// (linearly in log size and log time) in place of the alpha-beta formulas; a smaller size takes
// the first size's time (latency-bound there: on the VM a tiny plan's 768 B all-gathers ran in
// 0.4-0.8 us, its 1 KiB ones measured in step 0.5-0.7); above the last, the rates apply. Open MPI over shared
// memory switches algorithms and protocols at sizes of its own (on the 2-core VM its reduce-scatter took 9.9
// us at 128 KiB and 45 us at 256 KiB), which no one line follows: its fit was 34% rms, the measured points
// are exact where they were taken. Send/recv times do not depend on the group's size. Data the caches no
// longer hold (Op::cold) takes the cold rates, not these.
struct MeasuredTimes {
  struct Point {
    double bytes = 0;
    double seconds = 0;
    bool operator==(const Point&) const = default;
  };
  int ranks = 0;
  // Sizes strictly increasing, two at least, per collective (all-reduce, all-gather, reduce-scatter,
  // send/recv, all-to-all: nccl-tests' alltoall_perf); empty: not measured.
  std::vector<Point> all_reduce, all_gather, reduce_scatter, send_recv, all_to_all;
  bool empty() const {
    return all_reduce.empty() && all_gather.empty() && reduce_scatter.empty() && send_recv.empty() &&
           all_to_all.empty();
  }
  const std::vector<Point>* of(CollectiveOp op) const;
  std::vector<Point>* of(CollectiveOp op);
  // The measured time of `op` over `bytes` (> 0) on a group of `group_ranks`, or a negative number
  // where none applies (not measured, another group size, a size above the measured ones).
  double time(CollectiveOp op, int group_ranks, double bytes) const;
  // The time at `bytes` between two measured sizes a and b, linear in log size and log time.
  static double between(const Point& a, const Point& b, double bytes);
  bool operator==(const MeasuredTimes&) const = default;
};

// A link class with a line rate and a measured efficiency (achieved / line rate).
struct LinkSpec {
  std::string kind;         // nvlink4, pcie5, infiniband, roce, ethernet, omnipath, ...
  double bandwidth = 0;     // bytes/s per direction, per device (fabric) or per port (NIC)
  double latency_s = 0;     // one-way latency of a message (alpha)
  double efficiency = 1.0;  // achieved bus bandwidth / line rate for large collectives
  // Collectives smaller than `small_message_bytes` (their size in the nccl-tests convention) run
  // another protocol with its own latency per step: MPI's eager sends below the eager limit
  // (rendezvous above it), NCCL's low-latency protocol. 0: one protocol at every size.
  double small_message_bytes = 0;
  double small_message_latency_s = 0;
  double latency_for(double bytes) const {
    return bytes < small_message_bytes ? small_message_latency_s : latency_s;
  }
  // A fabric that moves data through the CPUs' caches (shared memory between processes) is slower
  // for data the caches no longer hold: this is its bandwidth, as `bandwidth`, for the gradient
  // reduction after the backward (gradients written over the whole backward, evicted by the rest
  // of its data). 0: the same (a GPU fabric reads HBM either way). `foresight calibrate` measures
  // the all-reduce with its buffer evicted on a CPU.
  double cold_bandwidth = 0;
  // The most bytes/s a flow of such data moves (cold_bandwidth x efficiency; infinite: no limit).
  double cold_rate() const {
    return cold_bandwidth > 0 ? cold_bandwidth * efficiency : std::numeric_limits<double>::infinity();
  }
  // Collectives with rates of their own (CollectiveRates; kOwnRateOps); the all-reduce, all-to-all
  // and broadcast take the fields above.
  CollectiveRates all_gather, reduce_scatter, send_recv;
  // Measured times that take the place of the rates where they apply (a node's fabric only).
  MeasuredTimes measured;
  bool has_own_rates() const {
    return !all_gather.empty() || !reduce_scatter.empty() || !send_recv.empty() || !measured.empty();
  }
  // `op`'s own rates on this link, or null where it takes the link's.
  const CollectiveRates* own_rates(CollectiveOp op) const;
  CollectiveRates* own_rates(CollectiveOp op);
  // The link as `op` sees it: its own rates in place of the link's where it has them.
  double bandwidth_of(CollectiveOp op) const;              // as `bandwidth`
  double latency_of(CollectiveOp op, double bytes) const;  // as latency_for(bytes)
  double small_message_bytes_of(CollectiveOp op) const;    // as small_message_bytes
  double cold_rate_of(CollectiveOp op) const;              // as cold_rate()
  bool operator==(const LinkSpec&) const = default;
};
// The collectives a fabric may carry measured times for (MeasuredTimes::of is not null for them).
inline constexpr CollectiveOp kMeasuredOps[] = {CollectiveOp::kAllReduce, CollectiveOp::kAllGather,
                                                CollectiveOp::kReduceScatter, CollectiveOp::kSendRecv,
                                                CollectiveOp::kAllToAll};
// The collectives a link may give rates of their own (LinkSpec::own_rates is not null for them).
inline constexpr CollectiveOp kOwnRateOps[] = {CollectiveOp::kAllGather, CollectiveOp::kReduceScatter,
                                               CollectiveOp::kSendRecv};

struct NodeSpec {
  std::string name;
  std::vector<DeviceGroup> devices;  // the first GPU/NPU group is the node's accelerator
  LinkSpec fabric;                   // intra-node accelerator fabric (NVLink, HCCS, xGMI, PCIe)
  bool in_switch_reduction = false;  // NVLink SHARP (NVLS) available for all-reduce
  double in_switch_efficiency = 0;   // NVLS busbw / (2(n-1)/n * line rate), measured
  LinkSpec host_link;                // accelerator <-> host memory, per device
  double host_memory_bytes = 0;
  int nics = 0;
  LinkSpec nic;  // one NIC port
  // SMs (streaming multiprocessors) a collective library's kernel holds while it runs: NCCL
  // launches one block per channel, each on an SM of its own that no compute kernel shares, so the
  // compute overlapped with a collective runs on the others (collective_compute_stretch). 0: not
  // modelled.
  int collective_sms = 0;

  const DeviceSpec& accelerator() const;
  int accelerators() const;  // accelerators per node (of the first accelerator group)
  // Every accelerator of the node, all groups (a mixed node: GPUs and NPUs); CPUs are hosts.
  int accelerator_slots() const;
  // Index in `devices` of the accelerator group with this device name; -1 if none.
  int accelerator_group(const std::string& device_name) const;
  double nic_bandwidth_per_device() const;  // achieved inter-node bytes/s per accelerator
  bool operator==(const NodeSpec&) const = default;
};

// How much longer compute takes while an overlapped collective holds NodeSpec::collective_sms of
// the device's SMs: sm_count / (sm_count - collective_sms); 1 where the node sets none or the
// device has no more SMs than that.
inline double collective_compute_stretch(const NodeSpec& n, const DeviceSpec& d) {
  return n.collective_sms > 0 && d.sm_count > n.collective_sms
             ? static_cast<double>(d.sm_count) / (d.sm_count - n.collective_sms)
             : 1.0;
}

// One level of the inter-node network. Level i joins `span_nodes` nodes (0: the whole cluster).
struct NetworkTier {
  std::string name;
  std::string kind;  // infiniband, ethernet, roce, omnipath
  // "tree" (switched: fat tree, leaf/spine; each group of the first tier one aggregated leaf),
  // "rail" (first tier only: a rail-optimised fat tree, one leaf switch per rail -- NIC index --
  // in each group, the tier above joining the leaves of one rail; traffic between different rails
  // of two nodes crosses the node's fabric first, as NCCL's PXN sends it) or "torus" (nodes on a
  // 2D/3D torus, each joined to its neighbours by direct links of `link_bandwidth`; `dims` multiply
  // to the node count).
  std::string topology = "tree";
  std::vector<int> dims;
  double link_bandwidth = 0;  // torus: bytes/s per link and direction
  int span_nodes = 0;
  double bandwidth_per_node = 0;  // bytes/s a node can push through this tier; 0 = its NICs
  double oversubscription = 1.0;  // downlink : uplink ratio of this tier's switches
  double latency_s = 0;           // added by crossing this tier
  bool operator==(const NetworkTier&) const = default;
};

struct ClusterSpec {
  std::string name;
  std::string description;
  NodeSpec node;
  int nodes = 1;
  std::vector<NetworkTier> tiers;
  double storage_bandwidth = 0;  // bytes/s, aggregate (checkpoints, data)

  int total_accelerators() const { return nodes * node.accelerators(); }
  bool operator==(const ClusterSpec&) const = default;
};

// The cluster as one of its accelerator groups sees it: the same nodes and network, with group
// `group` (an index in node.devices) first, so accelerator() and accelerators() describe it. The
// analytic model prices a pipeline stage that runs on that group this way.
ClusterSpec cluster_view(const ClusterSpec& c, int group);

// The device as it runs `factor` times as fast (a machine whose speed moved since its profile
// was measured): every rate (peaks, bandwidths, the cache levels' too) times `factor`, every fixed
// time (overheads, set-ups, per-element and per-head costs) divided by it; the efficiencies, the
// capacities and the network are unchanged. `factor` must be positive.
DeviceSpec device_at_speed(DeviceSpec d, double factor);

// Loading: `name_or_path` is a preset name ("h100-sxm5-80gb") or a path to a JSON file.
Result<DeviceSpec> load_device(const std::string& name_or_path);
Result<NodeSpec> load_node(const std::string& name_or_path);
Result<ClusterSpec> load_cluster(const std::string& name_or_path);

// `pointer` is where `doc` sits inside `file` (for objects nested in another spec).
Result<DeviceSpec> device_from_json(const nlohmann::json& doc, const std::string& file,
                                    const std::string& pointer = "");
Result<NodeSpec> node_from_json(const nlohmann::json& doc, const std::string& file,
                                const std::string& pointer = "");
Result<ClusterSpec> cluster_from_json(const nlohmann::json& doc, const std::string& file,
                                      const std::string& pointer = "");
nlohmann::json device_to_json(const DeviceSpec& d);
nlohmann::json node_to_json(const NodeSpec& n);
nlohmann::json cluster_to_json(const ClusterSpec& c);

// Checks what depends on the final node count (a torus's dims must multiply to it).
Status check_cluster_shape(const ClusterSpec& c, const std::string& context);

// Sets the node count so the cluster has `accelerators` devices; errors if it is not a multiple
// of the node size.
Status resize_cluster(ClusterSpec& c, int accelerators, const std::string& context);

}  // namespace foresight
