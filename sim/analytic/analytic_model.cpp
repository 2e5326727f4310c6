// The analytic model: per-layer costs -> per-stage times -> schedule -> step time and memory.
#include "sim/analytic/analytic_model.h"

#include <algorithm>
#include <array>
#include <boost/container/small_vector.hpp>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "sim/analytic/compression.h"
#include "sim/analytic/data_loading.h"
#include "sim/analytic/layer_cost.h"
#include "sim/analytic/layer_ops.h"
#include "sim/analytic/recompute.h"
#include "sim/analytic/schedule.h"

namespace foresight {

double weight_bytes(Precision p) { return p == Precision::kFp32 ? 4.0 : 2.0; }
// Megatron reduces fp16 gradients in fp16 and bf16 gradients in fp32 (main_grad); fp8 training
// keeps bf16/fp32 gradients.
double grad_bytes(Precision p) { return p == Precision::kFp16 ? 2.0 : 4.0; }
double grad_bytes(const Plan& p) {
  if (!p.grad_reduce_precision) return grad_bytes(p.precision);
  switch (*p.grad_reduce_precision) {
    case Precision::kFp32:
      return 4.0;
    case Precision::kFp8:
      return 1.0;
    default:
      return 2.0;
  }
}

FsdpCopies fsdp_copies(const DeviceSpec& d, const Plan& p, double params) {
  FsdpCopies c;
  if (!p.fsdp_copies_apply() || params <= 0) return c;
  const double wb = weight_bytes(p.precision);
  c.copy_out_bytes = 2 * wb * params;
  c.chunk_cat_bytes = (wb + grad_bytes(p)) * params;
  c.copy_out_s = d.stream_seconds(c.copy_out_bytes) + d.kernel_overhead_s;
  c.chunk_cat_s = d.stream_seconds(c.chunk_cat_bytes) + d.kernel_overhead_s;
  c.fwd_s = c.copy_out_s;
  c.bwd_s = c.copy_out_s + c.chunk_cat_s;
  return c;
}

// A stage of one rank has nothing to reduce: 0 there too, so that both engines ask only this.
double fp8_amax_bytes(const ModelSpec& m, const Plan& p, int layers, bool forward) {
  if (p.precision != Precision::kFp8 || p.fp8_recipe != Fp8Recipe::kDelayed || layers <= 0 ||
      p.tp * p.cp * p.dp <= 1)
    return 0.0;
  const double gemms =
      m.is_moe() ? 2.0 + 2.0 * (m.moe.experts / std::max(1, p.ep) + m.moe.shared_experts) : 4.0;
  return 4.0 * (forward ? 3.0 : 2.0) * gemms * layers;
}

namespace {

// fp32 Adam moments + master weights per parameter (Rajbhandari et al. 2020, "K = 12").
constexpr double kOptimizerStateBytes = 12.0;

// The layers a pipeline stage holds: [begin, end) of each of its model chunks, from
// Plan::chunk_layer_range as the simulator lowers them. Inline up to 16 chunks: a heap
// allocation per stage and per evaluation made evaluate 60% slower.
struct Range {
  boost::container::small_vector<std::pair<int, int>, 16> chunks;
  int count() const {
    int n = 0;
    for (const auto& [begin, end] : chunks) n += end - begin;
    return n;
  }
  int largest_chunk() const {
    int n = 0;
    for (const auto& [begin, end] : chunks) n = std::max(n, end - begin);
    return n;
  }
};

Range stage_layers(const Plan& p, int layers, int stage) {
  Range r;
  for (int c = 0; c < p.chunks(); ++c) r.chunks.push_back(p.chunk_layer_range(layers, stage, c));
  return r;
}

int dense_in(const ModelSpec& m, const Range& r) {
  const int dense_end = m.dense_layers();  // dense layers come first (DeepSeek's first_k_dense)
  int n = 0;
  for (const auto& [begin, end] : r.chunks) n += std::max(0, std::min(end, dense_end) - begin);
  return n;
}

// Costs of one layer for one micro-batch on one device.
struct LayerTime {
  double fwd_compute = 0, bwd_compute = 0, recompute = 0;
  double host_wait = 0;           // the part of the three the device waits for the host
  double bwd_weight = 0;          // the weight-gradient part of bwd_compute (ZB-H1 defers it)
  double fwd_tp = 0, bwd_tp = 0;  // exposed TP comm (bwd includes recompute's)
  double cp = 0, ep = 0;          // exposed, fwd + bwd
  double offload = 0;             // exposed host copies (Plan::offload_params/_activations), fwd + bwd
  double a2a = 0;                 // one expert all-to-all alone (not part of total())
  double hw_flops = 0;            // executed FLOPs incl. recompute, fwd + bwd
  double model_flops = 0;         // fwd + bwd without recompute
  double total() const { return fwd_compute + bwd_compute + recompute + fwd_tp + bwd_tp + cp + ep + offload; }
};

struct Links {
  GroupLink tp, cp, dp, edp, ep, pp;
};

// f * a + (1 - f) * b, field by field: a stage whose layers partly recompute (f of them).
LayerTime blend(const LayerTime& a, const LayerTime& b, double f) {
  if (f >= 1) return a;
  auto mix = [f](double x, double y) { return f * x + (1 - f) * y; };
  LayerTime t;
  t.fwd_compute = mix(a.fwd_compute, b.fwd_compute);
  t.bwd_compute = mix(a.bwd_compute, b.bwd_compute);
  t.bwd_weight = mix(a.bwd_weight, b.bwd_weight);
  t.recompute = mix(a.recompute, b.recompute);
  t.host_wait = mix(a.host_wait, b.host_wait);
  t.fwd_tp = mix(a.fwd_tp, b.fwd_tp);
  t.bwd_tp = mix(a.bwd_tp, b.bwd_tp);
  t.cp = mix(a.cp, b.cp);
  t.ep = mix(a.ep, b.ep);
  t.offload = mix(a.offload, b.offload);
  t.a2a = mix(a.a2a, b.a2a);
  t.hw_flops = mix(a.hw_flops, b.hw_flops);
  t.model_flops = mix(a.model_flops, b.model_flops);
  return t;
}

// The share of a stage's layers that recompute (Plan::recompute_layers counts per chunk).
double recomputed_fraction(const Plan& p, const Range& r) {
  const int layers = r.count();
  if (!p.partial_recompute() || layers <= 0) return 1;
  int recomputed = 0;
  for (const auto& [begin, end] : r.chunks) recomputed += std::min(end - begin, p.recompute_layers);
  return recomputed / static_cast<double>(layers);
}

}  // namespace

AnalyticModel::AnalyticModel(const ModelSpec& model, const ClusterSpec& cluster)
    : model_(model),
      cluster_(cluster),
      device_(cluster.node.accelerator()),
      per_plan_(has_per_plan_rates(cluster)) {}

bool has_per_plan_rates(const ClusterSpec& cluster) {
  for (const DeviceGroup& g : cluster.node.devices)
    if (!g.device.caches.empty() || g.device.shared_memory.shared_by > 1) return true;
  return false;
}

namespace {

// What a micro-batch's forward and backward touch, again every micro-batch (the weights, their
// gradients, the activations and buffers), and everything the step touches (the optimizer's state
// too, once per step), per device.
struct Footprint {
  double working = 0, state = 0;
};
Footprint footprint(const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan) {
  const MemoryBreakdown mem = AnalyticModel(model, cluster).memory(plan);
  return {mem.weights + mem.gradients + mem.activations + mem.buffers, mem.total - mem.reserved};
}

// The levels a device's plan takes: its kernels the smallest level that holds the working set
// (-1: memory), blended `toward_next` of the way to the next level's rates (memory's after the
// last) where the working set passes the span the level was measured over; its optimizer the
// smallest level that holds the whole state, preferring one with AdamW's own rate (a calibrated
// L2's span holds too few of AdamW's sizes to measure it there), else -1 (memory).
struct CacheChoice {
  int kernels = -1;
  double toward_next = 0;
  int optimizer = -1;
};
CacheChoice choose_levels(const DeviceSpec& d, const Footprint& f) {
  CacheChoice ch;
  const int n = static_cast<int>(d.caches.size());
  for (int i = 0; i < n && ch.kernels < 0; ++i) {
    const CacheLevel& c = d.caches[static_cast<std::size_t>(i)];
    if (f.working > c.bytes) continue;
    ch.kernels = i;
    const double span = c.span > 0 ? c.span : c.bytes;
    ch.toward_next = f.working > span ? (f.working - span) / (c.bytes - span) : 0.0;
  }
  for (bool need_rate : {true, false})
    for (int i = 0; i < n && ch.optimizer < 0; ++i) {
      const CacheLevel& c = d.caches[static_cast<std::size_t>(i)];
      if (f.state <= c.bytes && (!need_rate || c.optimizer_bandwidth > 0)) ch.optimizer = i;
    }
  return ch;
}

// `f` of the way from rate `a` to rate `b`, as times per unit of work (a rate of 0 takes no time:
// a weight pass that is not there).
double blend_rate(double a, double b, double f) {
  if (f <= 0) return a;
  const auto per = [](double rate) { return rate > 0 ? 1 / rate : 0.0; };
  const double t = (1 - f) * per(a) + f * per(b);
  return t > 0 ? 1 / t : 0.0;
}

// How many of the node's devices the plan runs at once (at least one).
int devices_running(const NodeSpec& node, const Plan& plan) {
  return std::max(1, std::min(plan.gpus(), node.accelerators()));
}

// How far the plan's memory rates go toward the device's alone rates (DeviceSpec::shared_memory):
// 1 where the plan runs one of the node's devices, 0 from shared_by of them on.
double toward_alone(const DeviceSpec& d, const NodeSpec& node, const Plan& plan) {
  const int shared_by = d.shared_memory.shared_by;
  const int running = devices_running(node, plan);
  if (shared_by < 2 || running >= shared_by) return 0;
  return static_cast<double>(shared_by - running) / (shared_by - 1);
}

// The device's memory rates `f` of the way toward its alone rates; the shared-memory rates then
// go (the device's rates are the plan's).
void take_shared_memory(DeviceSpec& d, double f) {
  const CacheLevel& a = d.shared_memory.alone;
  if (f > 0) {
    const double optimizer = d.optimizer_efficiency * d.memory_bandwidth;
    d.gemm_efficiency = blend_rate(d.gemm_efficiency, a.gemm_efficiency, f);
    d.memory_bandwidth = blend_rate(d.memory_bandwidth, a.memory_bandwidth, f);
    d.gemm_weight_fwd_bandwidth = blend_rate(d.gemm_weight_fwd_bandwidth, a.gemm_weight_fwd_bandwidth, f);
    d.gemm_weight_bwd_bandwidth = blend_rate(d.gemm_weight_bwd_bandwidth, a.gemm_weight_bwd_bandwidth, f);
    d.activation_element_s = (1 - f) * d.activation_element_s + f * a.activation_element_s;
    // AdamW's own alone rate where measured; else the optimizer keeps its ratio to the streaming rate.
    if (a.optimizer_bandwidth > 0)
      d.optimizer_efficiency =
          std::clamp(blend_rate(optimizer, a.optimizer_bandwidth, f) / d.memory_bandwidth,
                     DeviceSpec::kOptimizerEfficiencyMin, DeviceSpec::kOptimizerEfficiencyMax);
  }
  d.shared_memory = {};
}

}  // namespace

ClusterSpec cluster_for_plan(const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan) {
  if (!has_per_plan_rates(cluster)) return cluster;
  const Footprint fp = footprint(model, cluster, plan);
  ClusterSpec out = cluster;
  for (DeviceGroup& g : out.node.devices) {
    DeviceSpec& d = g.device;
    take_shared_memory(d, toward_alone(d, cluster.node, plan));
    if (d.caches.empty()) continue;
    const CacheChoice ch = choose_levels(d, fp);
    const double optimizer_rate = d.optimizer_efficiency * d.memory_bandwidth;  // its state from memory
    if (ch.kernels >= 0) {
      const auto i = static_cast<std::size_t>(ch.kernels);
      const CacheLevel& c = d.caches[i];
      const CacheLevel next =
          i + 1 < d.caches.size()
              ? d.caches[i + 1]
              : CacheLevel{d.memory_bandwidth,          d.gemm_efficiency,           d.memory_bandwidth,
                           d.gemm_weight_fwd_bandwidth, d.gemm_weight_bwd_bandwidth, d.activation_element_s};
      const double f = ch.toward_next;
      const auto mix = [f](double a, double b) { return blend_rate(a, b, f); };
      d.gemm_efficiency = mix(c.gemm_efficiency, next.gemm_efficiency);
      d.memory_bandwidth = mix(c.memory_bandwidth, next.memory_bandwidth);
      d.gemm_weight_fwd_bandwidth = mix(c.gemm_weight_fwd_bandwidth, next.gemm_weight_fwd_bandwidth);
      d.gemm_weight_bwd_bandwidth = mix(c.gemm_weight_bwd_bandwidth, next.gemm_weight_bwd_bandwidth);
      d.activation_element_s =
          f > 0 ? (1 - f) * c.activation_element_s + f * next.activation_element_s : c.activation_element_s;
    }
    if (ch.optimizer >= 0) {
      // The whole step stays in that level: the optimizer reads its state from there (at AdamW's
      // rate, else the level's streaming rate), and the gradients reduced after the backward are
      // still there (no cold fabric rate).
      const CacheLevel& holds = d.caches[static_cast<std::size_t>(ch.optimizer)];
      out.node.fabric.cold_bandwidth = 0;
      for (CollectiveOp op : kOwnRateOps) out.node.fabric.own_rates(op)->cold_bandwidth = 0;
      d.optimizer_efficiency =
          (holds.optimizer_bandwidth > 0 ? holds.optimizer_bandwidth : holds.memory_bandwidth) /
          d.memory_bandwidth;
    } else {
      d.optimizer_efficiency = optimizer_rate / d.memory_bandwidth;
    }
    d.caches.clear();
  }
  return out;
}

std::string cache_levels_taken(const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan) {
  const DeviceSpec& d = cluster.node.accelerator();
  std::string shared;
  if (const double f = toward_alone(d, cluster.node, plan); f > 0) {
    shared = "; " + std::to_string(devices_running(cluster.node, plan)) +
             " of the node's devices running, its memory rates " +
             (f >= 1 ? std::string("those measured with one alone")
                     : std::to_string(static_cast<int>(std::lround(100 * f))) +
                           "% of the way to those measured with one alone") +
             " (the profile's: " + std::to_string(d.shared_memory.shared_by) + " sharing the memory)";
  }
  if (d.caches.empty()) return shared.empty() ? "" : shared.substr(2);
  const Footprint fp = footprint(model, cluster, plan);
  const CacheChoice ch = choose_levels(d, fp);
  const auto mib = [](double bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f MiB", bytes / (1024.0 * 1024.0));
    return std::string(text);
  };
  const auto level = [&](int i) { return mib(d.caches[static_cast<std::size_t>(i)].bytes) + " cache level"; };
  std::string out = "working set " + mib(fp.working) + " per device: ";
  if (ch.kernels < 0) {
    out += "the memory rates (past the " + level(static_cast<int>(d.caches.size()) - 1) + ")";
  } else {
    out += "the " + level(ch.kernels) + "'s rates";
    if (ch.toward_next > 0)
      out += ", " + std::to_string(static_cast<int>(std::lround(100 * ch.toward_next))) + "% of the way to " +
             (ch.kernels + 1 < static_cast<int>(d.caches.size()) ? "the " + level(ch.kernels + 1) + "'s"
                                                                 : std::string("memory's"));
  }
  out += "; whole state " + mib(fp.state) + ": the optimizer " +
         (ch.optimizer < 0 ? std::string("from memory") : "in the " + level(ch.optimizer));
  // The alone rates matter where the plan takes memory's: its kernels past the last level (or
  // blended toward memory from it), or its optimizer's state from memory.
  const bool uses_memory = ch.kernels < 0 || ch.optimizer < 0 ||
                           (ch.kernels + 1 == static_cast<int>(d.caches.size()) && ch.toward_next > 0);
  return out + (uses_memory ? shared : std::string());
}

namespace {

// Exposed seconds of one layer's host copies for one micro-batch. Host-to-device and
// device-to-host run on separate copy engines (PCIe is full duplex), each beside the layer's
// compute: forward sends the activations out and fetches the weights; backward fetches the
// activations and the weights (once, for recompute and backward) and sends the gradients out.
double layer_offload_seconds(const ModelSpec& m, const Plan& p, const LayerShape& s, bool moe, double rate,
                             double fwd_s, double bwd_s) {
  if (!(p.offload_activations || p.offload_params) || rate <= 0) return 0;
  const double act =
      p.offload_activations ? layer_activation_bytes(m, s, recompute_mask(p), p.flash_attention, moe) : 0.0;
  const double shard =
      p.zero_stage >= 3 ? static_cast<double>(p.dp) * p.cp : 1.0;  // ZeRO-3: the host keeps a shard
  const double params = p.offload_params ? layer_params_per_device(m, moe, p.tp, p.ep, p.etp()) / shard : 0.0;
  const double wb = weight_bytes(p.precision), gb = grad_bytes(p);
  const double fwd = std::max(act, params * wb) / rate;
  const double bwd = std::max(act + params * wb, params * gb) / rate;
  return std::max(0.0, fwd - fwd_s) + std::max(0.0, bwd - bwd_s);
}

// One MoE layer's all-to-all seconds left exposed when its forward (of one micro-batch) and its
// backward (of another) run as one merged pair, as Megatron-Core's combined 1F1B runs them
// (TransformerLayerSchedulePlan.run): the compute stream runs the forward's attention, the
// backward's experts, the forward's experts, the backward's attention; the communication stream
// the backward's combine, the forward's dispatch, the backward's dispatch, the forward's
// combine. Each all-to-all waits for the compute before it, so a pair takes
//   max(attn_b + attn_f, 2 a2a) + max(experts_b, a2a) + max(experts_f, a2a)
// of which the compute is the rest. `rest_*`: the layer's compute and exposed collectives outside
// the experts (attention, router, norms; the backward's recompute).
double merged_pair_exposed(double rest_fwd, double experts_fwd, double rest_bwd, double experts_bwd,
                           double a2a) {
  const double pair =
      std::max(rest_bwd + rest_fwd, 2 * a2a) + std::max(experts_bwd, a2a) + std::max(experts_fwd, a2a);
  return pair - (rest_fwd + experts_fwd + rest_bwd + experts_bwd);
}

// Expert parallel: dispatch and combine all-to-alls, forward, backward and in full recompute,
// exposed; merged forward/backward pairs (Plan::overlap_ep_comm) hide them behind each other's
// compute over the steady state's share. `t`'s compute and TP times are the layer's already.
void add_expert_all_to_alls(const LayerKernels& k, const Plan& p, const Links& links, bool full,
                            LayerTime& t) {
  t.a2a = alltoall_time(links.ep, k.ep_bytes);
  // Full recompute repeats the dispatch and (unless it stops before it) the combine.
  t.ep = (full ? (k.moe_combine_after < k.full_rerun_end ? 6 : 5) : 4) * t.a2a;
  const double merged = merged_pair_share(p);
  if (merged <= 0) return;
  double experts_fwd = 0, experts_bwd = 0;  // the kernels between dispatch and combine
  for (int i = k.moe_dispatch_after + 1; i <= k.moe_combine_after; ++i) {
    experts_fwd += k.fwd[i].fwd_s;
    experts_bwd += k.fwd[i].bwd_s;
  }
  const double rest_fwd = t.fwd_compute + t.fwd_tp - experts_fwd;
  const double rest_bwd = t.bwd_compute + t.recompute + t.bwd_tp - experts_bwd;
  t.ep =
      merged * merged_pair_exposed(rest_fwd, experts_fwd, rest_bwd, experts_bwd, t.a2a) + (1 - merged) * t.ep;
}

// issue_from_host with an MoE layer's expert all-to-all priced on the expert group `ep`: the one
// place both engines' kernels get their waits for the host (layer_time, issued_layer_kernels).
void issue_with_all_to_alls(LayerKernels& k, const Plan& p, bool moe, const GroupLink& ep) {
  issue_from_host(k, moe && p.ep > 1 ? alltoall_time(ep, k.ep_bytes) : 0.0);
}

// `mask`: the modules this layer recomputes (layer_cost.h); the kernels they re-run are
// LayerKernels::rerun_share's, and full recompute repeats the forward's collectives too.
LayerTime layer_time(const ModelSpec& m, const DeviceSpec& d, const Plan& p, const LayerShape& s,
                     const Links& links, bool moe, double host_rate, const Partner& partner,
                     RecomputeMask mask) {
  LayerTime t;
  LayerKernels k = layer_kernels(m, d, p, s, moe, partner);
  issue_with_all_to_alls(k, p, moe, links.ep);
  const LayerFlops f = moe ? moe_layer_flops(m, s) : dense_layer_flops(m, s);
  const bool full = (mask & recompute_module::kFull) != 0;
  t.fwd_compute = k.fwd_seconds();
  t.bwd_compute = k.bwd_seconds();
  t.bwd_weight = k.bwd_weight_seconds();
  t.recompute = k.recompute_seconds(mask);
  for (int i = 0; i < k.count; ++i)  // the waits in the forward, backward and re-run kernels
    t.host_wait +=
        (1 + (mask ? k.rerun_share(mask, i) : 0.0)) * k.fwd[i].host_wait_fwd_s + k.fwd[i].host_wait_bwd_s;
  double attn_fwd = 0, attn_bwd = 0;
  for (int i = k.attention_first; i <= k.attention_last; ++i) {
    attn_fwd += k.fwd[i].fwd_s;
    attn_bwd += k.fwd[i].bwd_s;
  }
  // Tensor parallel: the layer's collectives, forward and again backward (and in full recompute).
  // Overlapped (Plan::overlap_tp_comm) each is exposed only where it outlasts the GEMM it pairs
  // with (TpOverlap; the pipelined reduce-scatter's last quarter always).
  if (k.tp_count > 0) {
    const auto time = [&](TpCollective kind, double bytes) {
      switch (kind) {
        case TpCollective::kAllReduce:
          return allreduce_time(links.tp, bytes);
        case TpCollective::kAllGather:
          return allgather_time(links.tp, bytes);
        case TpCollective::kReduceScatter:
          break;
      }
      return reduce_scatter_time(links.tp, bytes);
    };
    double fwd = 0, bwd = 0, rerun = 0;  // rerun: those after the kernels a full recompute re-runs
    for (int i = 0; i < k.tp_count; ++i) {
      const TpOverlap o = k.tp_overlap[i];
      const double bytes = k.tp_fwd_bytes[i];
      const double exposed =
          o == TpOverlap::kPipeline
              ? tp_overlap_exposed(o, k.fwd[k.tp_gemm[i]].fwd_s, time(k.tp_kind[i], kTpPipelineHead * bytes),
                                   time(k.tp_kind[i], (1 - kTpPipelineHead) * bytes))
              : tp_overlap_exposed(o, o == TpOverlap::kNone ? 0.0 : k.fwd[k.tp_gemm[i]].fwd_s,
                                   time(k.tp_kind[i], bytes));
      fwd += exposed;
      if (k.tp_after[i] < k.full_rerun_end) rerun += exposed;
    }
    for (int i = 0; i < k.tp_bwd_count; ++i) {
      const TpOverlap o = k.tp_bwd_overlap[i];
      bwd += tp_overlap_exposed(o, o == TpOverlap::kNone ? 0.0 : k.fwd[k.tp_bwd_gemm[i]].bwd_s,
                                time(k.tp_bwd_kind[i], k.tp_bwd_bytes[i]));
    }
    t.fwd_tp = fwd;
    t.bwd_tp = bwd + (full ? rerun : 0.0);
  }
  // Context parallel: ring exchange of K and V (cp-1 steps), hidden behind attention when it can;
  // or (CpComm::kAllGather) K and V gathered before the attention, again before its backward
  // (and in full recompute), their gradients reduce-scattered after it, all exposed.
  if (p.cp > 1) {
    const double kv = cp_kv_bytes(m, s);
    if (p.cp_comm == CpComm::kAllGather) {
      const double gather = allgather_time(links.cp, kv * p.cp);
      t.cp = (full ? 3 : 2) * gather + reduce_scatter_time(links.cp, 2 * kv * p.cp);
    } else {
      const double ring = (p.cp - 1) * sendrecv_time(links.cp, kv);
      t.cp = std::max(0.0, ring - attn_fwd) + std::max(0.0, 2 * ring - attn_bwd);
    }
  }
  if (moe && p.ep > 1) add_expert_all_to_alls(k, p, links, full, t);
  t.model_flops = 3.0 * f.total();
  t.hw_flops = t.model_flops + k.recompute_flops(mask);
  t.offload = layer_offload_seconds(m, p, s, moe, host_rate, t.fwd_compute, t.bwd_compute + t.recompute);
  // FSDP2's copies around the layer's collectives run on the compute stream, in line with its
  // kernels (after the offload's window: they do not widen it).
  if (p.fsdp_copies_apply() && !p.zero3_whole_step()) {  // whole_step: once a step (add_compute)
    const FsdpCopies copies = fsdp_copies(d, p, layer_params_per_device(m, moe, p.tp, p.ep, p.etp()));
    t.fwd_compute += copies.fwd_s;
    t.bwd_compute += copies.bwd_s;
  }
  return t;
}

// What a pipeline stage costs per micro-batch on one accelerator type, placed as the cluster
// (or its view for that accelerator group) places its ranks.
struct DeviceCosts {
  const DeviceSpec* d = nullptr;
  Links links;
  LayerTime dense, moe;
  LayerTime dense_plain, moe_plain;  // without recompute (layers past Plan::recompute_layers)
  // Recompute::kOptimal: each candidate module set's layer time, indexed by its mask (empty
  // otherwise: evaluate builds one of these per plan).
  std::vector<LayerTime> dense_mask, moe_mask;
  double head_time = 0, embed_time = 0, p2p = 0;
  double amax = 0;  // FP8 delayed scaling's amax all-reduces per micro-batch, every chunk both ways
};

}  // namespace

// Megatron-Core numbers a stage's ranks for the experts apart from the dense layers (its expert
// RankGenerator: expert tensor parallel fastest, then expert parallel, then expert data parallel):
// an expert-parallel group is ep consecutive expert-tensor-parallel groups, ranks etp apart, so
// with context parallelism it takes the cp ranks before the dp ones (Workload::group_members).
GroupLink expert_group_link(const ClusterSpec& cluster, const Plan& p) {
  return group_link(cluster, p.etp(), p.ep, p.node_order == "shuffled");
}

LayerKernels issued_layer_kernels(const ModelSpec& m, const ClusterSpec& cluster, const DeviceSpec& d,
                                  const Plan& p, const LayerShape& s, bool moe, const Partner& partner) {
  LayerKernels k = layer_kernels(m, d, p, s, moe, partner);
  issue_with_all_to_alls(k, p, moe, expert_group_link(cluster, p));
  return k;
}

namespace {

DeviceCosts device_costs(const ModelSpec& m, const ClusterSpec& cluster, const Plan& p, const LayerShape& s) {
  DeviceCosts c;
  const DeviceSpec& d = cluster.node.accelerator();
  c.d = &d;
  // Groups strided as Plan::rank_order places them (Megatron's tp-cp-dp-pp by default): the
  // gradient group spans dp x cp, one strided group when cp comes just before dp, else as wide as
  // its wider part. Expert groups are consecutive data-parallel ranks.
  const std::array<int, 4> st = p.rank_strides();  // tp, cp, dp, pp
  const bool scattered = p.node_order == "shuffled";
  const int dp_stride = p.cp == 1 ? st[2] : st[2] == st[1] * p.cp ? st[1] : std::max(st[1], st[2]);
  c.links.tp = group_link(cluster, st[0], p.tp, scattered);
  c.links.cp = group_link(cluster, st[1], p.cp, scattered);
  c.links.dp = group_link(cluster, dp_stride, p.dp * p.cp, scattered);
  // Expert groups (expert_group_link): ep expert-tensor-parallel groups in a row; the ranks
  // holding the same experts, ep groups apart, reduce their gradients together.
  c.links.ep = expert_group_link(cluster, p);
  c.links.edp = group_link(cluster, p.etp() * p.ep, p.edp(), scattered);
  c.links.pp = group_link(cluster, st[3], p.pp > 1 ? 2 : 1, scattered);
  const double host_rate = host_link_rate(cluster.node);
  const Partner partner = attention_partner(p, cluster.node);
  const RecomputeMask mask = recompute_mask(p);
  c.dense = layer_time(m, d, p, s, c.links, false, host_rate, partner, mask);
  if (m.is_moe()) c.moe = layer_time(m, d, p, s, c.links, true, host_rate, partner, mask);
  c.dense_plain = c.dense;
  c.moe_plain = c.moe;
  if (p.partial_recompute()) {
    c.dense_plain = layer_time(m, d, p, s, c.links, false, host_rate, partner, 0);
    if (m.is_moe()) c.moe_plain = layer_time(m, d, p, s, c.links, true, host_rate, partner, 0);
  }
  if (p.recompute == Recompute::kOptimal) {
    c.dense_mask.resize(recompute_module::kFull + 1);
    c.moe_mask.resize(recompute_module::kFull + 1);
    for (RecomputeMask k : candidate_recompute_masks(p.flash_attention)) {
      c.dense_mask[k] = k == 0 ? c.dense : layer_time(m, d, p, s, c.links, false, host_rate, partner, k);
      if (m.is_moe())
        c.moe_mask[k] = k == 0 ? c.moe : layer_time(m, d, p, s, c.links, true, host_rate, partner, k);
    }
  }
  // Embedding (first stage) and LM head + cross-entropy (last stage), per micro-batch.
  const double tokens = s.batch * s.seq;
  const HeadCosts h = head_costs(m, d, p, s);
  c.head_time = h.norm_fwd_s + h.norm_bwd_s + h.fwd_s + h.bwd_s + h.grad_s;
  if (h.tp)
    c.head_time +=
        allgather_time(c.links.tp, h.stats_bytes) +
        (h.sp ? allgather_time(c.links.tp, h.hidden_bytes) + reduce_scatter_time(c.links.tp, h.hidden_bytes)
              : allreduce_time(c.links.tp, h.hidden_bytes));
  c.embed_time = d.stream_seconds(tokens * m.hidden * s.bytes_per_element) +
                 d.stream_seconds(2 * tokens * m.hidden * s.bytes_per_element);  // forward, backward
  const int chunk_layers = (m.layers + p.pp * p.chunks() - 1) / (p.pp * p.chunks());
  const double amax_fwd = fp8_amax_bytes(m, p, chunk_layers, true);
  if (amax_fwd > 0) {
    const int stage_ranks = p.tp * p.cp * p.dp;
    // FP8 delayed scaling's amax group: every rank of the stage, as closely spaced as its finest
    // dimension of more than one rank (consecutive in Megatron's order; every pp-th rank with the
    // pipeline innermost).
    const std::array<int, 3> sizes = {p.tp, p.cp, p.dp};
    int stage_stride = stage_ranks;
    for (std::size_t i = 0; i < sizes.size(); ++i)
      if (sizes[i] > 1) stage_stride = std::min(stage_stride, st[i]);
    const GroupLink stage = group_link(cluster, stage_stride, stage_ranks, scattered);
    c.amax = p.chunks() * (allreduce_time(stage, amax_fwd) +
                           allreduce_time(stage, fp8_amax_bytes(m, p, chunk_layers, false)));
  }
  // Pipeline p2p per micro-batch and direction: each TP rank sends its 1/tp of the activation
  // (with SP it holds only that); without SP the TP group all-gathers it after the receive.
  if (p.pp > 1) {
    const double bytes = tokens * m.hidden * s.bytes_per_element / p.tp;
    c.p2p = sendrecv_time(c.links.pp, bytes) +
            (p.tp > 1 && !p.sequence_parallel ? allgather_time(c.links.tp, bytes * p.tp) : 0.0);
  }
  return c;
}

}  // namespace

const DeviceSpec& AnalyticModel::stage_device(const Plan& p, int stage) const {
  return stage_accelerator(p, cluster_.node, stage);
}

std::vector<int> AnalyticModel::balanced_layer_split(const Plan& p) const {
  const ModelSpec& m = model_;
  const LayerShape s = plan_layer_shape(m, p);
  std::vector<double> speed(static_cast<std::size_t>(p.pp));
  std::map<int, double> layer_s;  // accelerator group -> mean seconds per layer and micro-batch
  for (int st = 0; st < p.pp; ++st) {
    const int g = stage_group(p, cluster_.node, st);
    auto it = layer_s.find(g);
    if (it == layer_s.end()) {
      const DeviceCosts c = device_costs(m, cluster_view(cluster_, g), p, s);
      const double t =
          (m.dense_layers() * c.dense.total() + m.moe_layers() * c.moe.total()) / std::max(1, m.layers);
      it = layer_s.emplace(g, t).first;
    }
    speed[st] = it->second > 0 ? 1.0 / it->second : 1.0;
  }
  double total_speed = 0;
  for (double v : speed) total_speed += v;
  // Each stage one layer first, the rest by largest remainder of the proportional share.
  const int spare = m.layers - p.pp;
  std::vector<int> split(static_cast<std::size_t>(p.pp), 1);
  if (spare <= 0) return split;
  std::vector<std::pair<double, int>> remainder;
  int given = 0;
  for (int st = 0; st < p.pp; ++st) {
    const double share = m.layers * speed[st] / total_speed - 1.0;
    const int whole = std::clamp(static_cast<int>(std::floor(share)), 0, spare);
    split[st] += whole;
    given += whole;
    remainder.emplace_back(share - whole, st);
  }
  std::stable_sort(remainder.begin(), remainder.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (std::size_t i = 0; given < spare; i = (i + 1) % remainder.size(), ++given)
    ++split[remainder[i].second];
  while (given > spare) {  // rounding gave too many: take from the largest
    auto it = std::max_element(split.begin(), split.end());
    --*it;
    --given;
  }
  return split;
}

double AnalyticModel::mean_peak(const Plan& p) const {
  if (p.stage_devices.empty()) return mfu_peak(p.precision, device_);
  double sum = 0;
  for (int st = 0; st < p.pp; ++st) sum += mfu_peak(p.precision, stage_device(p, st));
  return sum / p.pp;
}

double embedding_output_bytes(const ModelSpec& m, const Plan& p, const LayerShape& s) {
  return s.batch * s.seq * m.hidden * weight_bytes(p.precision) / (s.sp ? p.tp : 1);
}

double activations_in_flight(const Plan& p, int stage) {
  const double mbs = static_cast<double>(p.micro_batches());
  // Merged forward/backward pairs (Plan::overlap_ep_comm): Megatron-Core's warm-up runs one
  // forward more, one chunk's activations (DualPipe's pairs are inside its own schedule).
  const double merged = p.overlap_ep_comm ? 1.0 / p.chunks() : 0.0;
  switch (p.schedule) {
    case Schedule::kGpipe:
      return mbs;
    case Schedule::kDualPipe:
      return std::min(mbs, p.pp + 1.0);
    case Schedule::kInterleaved1F1B:
      // One model chunk per rank is plain 1F1B (Megatron runs the non-interleaved schedule
      // without virtual stages; the bubble and the transfers count it so too).
      // Interleaved: Megatron's warm-up runs 2(pp-1-stage) + (vp-1) pp chunk forwards before the
      // first backward (schedules.py, get_pp_rank_microbatches), one more is live when it starts,
      // and a chunk holds 1/vp of the stage's layers: pp + (pp-1)/vp micro-batches on the first
      // stage (Korthikanti et al. 2022), and nearly as many on the last (pp - (pp-1)/vp), not one.
      if (p.virtual_stages > 1) {
        const double v = p.virtual_stages;
        return std::min(mbs, (2.0 * (p.pp - 1 - stage) + (v - 1) * p.pp + 1) / v + merged);
      }
      [[fallthrough]];
    default:
      return std::min(mbs, p.pp - stage + merged);
  }
}

namespace {

// Weights, gradients and optimizer state of the parameters a stage's rank holds, on the device
// and on the host, by ZeRO stage and the offload options.
void add_parameter_memory(const ModelSpec& m, const Plan& p, int stage, const Range& r,
                          MemoryBreakdown& mem) {
  const int dense = dense_in(m, r), moe = r.count() - dense;
  // DualPipe keeps two copies of the parameters (DeepSeek-V3 report, Table 2): a rank also holds
  // the layers of its mirror stage pp-1-stage, and both end ranks hold embedding and head.
  const bool dualpipe = p.schedule == Schedule::kDualPipe;
  int dense_held = dense, moe_held = moe;
  if (dualpipe) {
    const Range mirror = stage_layers(p, m.layers, p.pp - 1 - stage);
    const int mirror_dense = dense_in(m, mirror);
    dense_held += mirror_dense;
    moe_held += mirror.count() - mirror_dense;
  }

  // Parameters held, split into the part replicated over dp*cp and the experts (over dp*cp/ep).
  const double dense_params = dense_held * layer_params_per_device(m, false, p.tp, 1) +
                              moe_held * (layer_params_per_device(m, true, p.tp, p.ep, p.etp()) -
                                          m.moe.experts * m.expert_params() / (p.etp() * p.ep));
  const double expert_params = moe_held * m.moe.experts * m.expert_params() / (p.etp() * p.ep);
  // Plan::offload_embeddings keeps the input table (and its gradients and optimizer state) on the
  // host.
  const double input_table = static_cast<double>(m.vocab) * m.hidden / p.tp;
  const double host_table = p.offload_embeddings && stage == 0 ? input_table : 0.0;
  const double embed = m.end_params_on_stage(stage, p.pp, dualpipe, p.tp) - host_table;
  const double replicated = dense_params + embed;
  const double shard = static_cast<double>(p.dp) * p.cp;
  const double expert_shard = static_cast<double>(p.edp());

  const double wb = weight_bytes(p.precision), gb = grad_bytes(p);
  // ZeRO-3 across pipeline stages holds the stage's parameters and gradients whole through the
  // step (Plan::zero3_whole_step): only the optimizer's state stays sharded.
  const bool whole = p.zero3_whole_step();
  const double zero_w = p.zero_stage >= 3 && !whole ? 1.0 : 0.0,
               zero_g = p.zero_stage >= 2 && !whole ? 1.0 : 0.0, zero_o = p.zero_stage >= 1 ? 1.0 : 0.0;
  auto sharded = [&](double bytes_per_param, double on) {
    return bytes_per_param *
           (replicated / (on > 0 ? shard : 1.0) + expert_params / (on > 0 ? expert_shard : 1.0));
  };
  mem.weights = sharded(wb, zero_w);
  mem.gradients = sharded(gb, zero_g);
  // Adam's moments and the master weights: 12 bytes in fp32 (8 for an fp32 model, whose weights
  // are the master copy), 6 in bf16 (Plan::optimizer_state_precision).
  const double opt_bytes = p.precision == Precision::kFp32                   ? 8.0
                           : p.optimizer_state_precision == Precision::kBf16 ? kOptimizerStateBytes / 2
                                                                             : kOptimizerStateBytes;
  mem.optimizer = p.offload_optimizer ? 0.0 : sharded(opt_bytes, zero_o);
  // ZeRO-Offload keeps fp32 master weights, moments and gradients on the host (16 bytes per
  // parameter, Ren et al. 2021).
  if (p.offload_optimizer) mem.host += sharded(opt_bytes + 4.0, zero_o);
  const double window =
      2.0 * layer_params_per_device(m, moe > 0, p.tp, p.ep, p.etp());  // the current and the next layer
  if (p.offload_params) {
    // Only embedding and head stay; the layers' weights and gradients stream through a two-layer
    // window. The host adds the layers' low-precision weights (a 1/dp shard each under ZeRO-3):
    // their gradients land in the optimizer's fp32 gradient buffer counted above (ZeRO-Infinity:
    // 18 bytes per parameter on the host).
    const double layers = replicated - embed;
    const double on_device = embed / (zero_w > 0 ? shard : 1.0);
    mem.host +=
        wb * (layers / (zero_w > 0 ? shard : 1.0) + expert_params / (zero_w > 0 ? expert_shard : 1.0));
    mem.weights = wb * (on_device + window);
    mem.gradients = gb * (embed / (zero_g > 0 ? shard : 1.0) + window);
  } else if (p.zero_stage >= 3 && !whole) {
    mem.weights += wb * window;  // two layers gathered at a time (the current one and the prefetched next)
  }
  mem.host += host_table * (wb + gb + opt_bytes);
}

// The activations a stage keeps per micro-batch in flight, and those of a layer (or a group of
// layers) while it recomputes in the backward.
struct KeptActivations {
  double per_mb = 0, transient = 0;
  double dense_layer = 0, moe_layer = 0;  // one layer's under the plan's recompute (0: no MoE layer)
};
KeptActivations kept_activations(const ModelSpec& m, const Plan& p, const LayerShape& s, int stage,
                                 const Range& r, const std::vector<RecomputeMask>* layer_masks) {
  const int dense = dense_in(m, r), moe = r.count() - dense;
  // Layers past Plan::recompute_layers keep everything.
  const double f = recomputed_fraction(p, r);
  auto act = [&](bool is_moe) {
    const double with = layer_activation_bytes(m, s, recompute_mask(p), p.flash_attention, is_moe);
    return f >= 1 ? with
                  : f * with +
                        (1 - f) * layer_activation_bytes(m, s, Recompute::kNone, p.flash_attention, is_moe);
  };
  KeptActivations k;
  k.dense_layer = act(false);
  k.moe_layer = moe > 0 ? act(true) : 0.0;
  k.per_mb = dense * k.dense_layer + moe * k.moe_layer;
  // One layer's full activations while it (or its group) recomputes in the backward.
  auto whole_layer = [&] {
    return layer_activation_bytes(m, s, RecomputeMask{0}, p.flash_attention, moe > 0);
  };
  k.transient = p.recompute == Recompute::kFull && f > 0 ? whole_layer() : 0.0;
  // The op policy rebuilds one layer's dropped tensors at a time beside what it kept.
  if (p.recompute == Recompute::kSelectiveOp && f > 0)
    k.transient = std::max(0.0, whole_layer() - std::max(k.dense_layer, k.moe_layer));
  if (layer_masks != nullptr) {
    // Per-layer module sets (Recompute::kOptimal): each layer keeps what its set leaves.
    k.per_mb = 0;
    bool any_full = false, any_moe = false;
    for (int layer : stage_layer_list(p, m.layers, stage)) {
      const RecomputeMask mask = (*layer_masks)[static_cast<std::size_t>(layer)];
      k.per_mb += layer_activation_bytes(m, s, mask, p.flash_attention, layer >= m.dense_layers());
      any_full = any_full || (mask & recompute_module::kFull) != 0;
      any_moe = any_moe || layer >= m.dense_layers();
    }
    // As recompute_assignment counts it: the largest layer of the stage's list.
    k.transient = any_full ? layer_activation_bytes(m, s, RecomputeMask{0}, p.flash_attention, any_moe) : 0.0;
  } else if (p.uniform_recompute()) {
    // Uniform method: only the input of each group of recompute_layers layers is kept, and a
    // group's layers all hold their full activations while it recomputes.
    int groups = 0;
    for (const auto& [begin, end] : r.chunks)
      groups += (end - begin + p.recompute_layers - 1) / p.recompute_layers;
    const bool any = r.count() > 0;
    k.per_mb =
        any ? groups * layer_activation_bytes(m, s, recompute_module::kFull, p.flash_attention, false) : 0.0;
    k.transient = any ? std::min(p.recompute_layers, r.largest_chunk()) * whole_layer() : 0.0;
  }
  return k;
}

// Activations: micro-batches in flight on this stage times the per-layer footprint, the
// embedding's output on the first stage and the logits on the last.
void add_activation_memory(const ModelSpec& m, const Plan& p, int stage, const Range& r,
                           const std::vector<RecomputeMask>* layer_masks, MemoryBreakdown& mem) {
  const LayerShape s = plan_layer_shape(m, p);
  const KeptActivations k = kept_activations(m, p, s, stage, r, layer_masks);
  const int dense = dense_in(m, r);
  const double in_flight = activations_in_flight(p, stage);
  mem.activations = k.per_mb * in_flight;
  if (p.offload_activations && r.count() > 0) {
    // Two layers' activations on the device (the one computing, the one in flight to or from the
    // host); every micro-batch's live activations on the host.
    mem.host += mem.activations;
    mem.activations = 2.0 * std::max(k.dense_layer * (dense > 0), k.moe_layer);
  }
  mem.activations += k.transient;
  const double tokens = s.batch * s.seq;
  if (stage == 0) mem.activations += in_flight * embedding_output_bytes(m, p, s);
  if (stage == p.pp - 1) {
    // fp32 logits and their gradient for the micro-batch in flight.
    mem.buffers += 2.0 * 4.0 * tokens * static_cast<double>(m.vocab) / p.tp;
  }
}

}  // namespace

MemoryBreakdown AnalyticModel::stage_memory(const Plan& p, int stage,
                                            const std::vector<RecomputeMask>* layer_masks) const {
  const Range r = stage_layers(p, model_.layers, stage);
  MemoryBreakdown mem;
  mem.stage = stage;
  add_parameter_memory(model_, p, stage, r, mem);
  add_activation_memory(model_, p, stage, r, layer_masks, mem);
  const DeviceSpec& dev = stage_device(p, stage);
  mem.reserved = dev.memory_reserved_bytes;
  mem.capacity = dev.memory_bytes;
  if (mem.host > 0)
    mem.host_capacity = cluster_.node.host_memory_bytes / std::max(1, cluster_.node.accelerator_slots());
  mem.total = mem.weights + mem.gradients + mem.optimizer + mem.activations + mem.buffers + mem.reserved;
  return mem;
}

MemoryBreakdown AnalyticModel::memory(const Plan& p) const {
  if (p.recompute != Recompute::kOptimal) return memory_with(p, nullptr);
  const RecomputeAssignment a = recompute_assignment(p);
  return memory_with(p, &a.layer_masks);
}

std::vector<MemoryBreakdown> AnalyticModel::stage_memories(const Plan& p) const {
  RecomputeAssignment a;
  if (p.recompute == Recompute::kOptimal) a = recompute_assignment(p);
  const std::vector<RecomputeMask>* masks = p.recompute == Recompute::kOptimal ? &a.layer_masks : nullptr;
  std::vector<MemoryBreakdown> out;
  out.reserve(static_cast<std::size_t>(p.pp));
  for (int st = 0; st < p.pp; ++st)
    out.push_back(p.stage_tp.empty() ? stage_memory(p, st, masks)
                                     : stage_memory(stage_view(p, st), st, masks));
  return out;
}

MemoryBreakdown AnalyticModel::memory_with(const Plan& p, const std::vector<RecomputeMask>* masks) const {
  if (!p.stage_tp.empty()) {
    // Stages of different degrees: the stage with the least headroom.
    MemoryBreakdown worst = stage_memory(stage_view(p, 0), 0, masks);
    for (int st = 1; st < p.pp; ++st) {
      const MemoryBreakdown m = stage_memory(stage_view(p, st), st, masks);
      if (m.total - m.capacity > worst.total - worst.capacity) worst = m;
    }
    return worst;
  }
  MemoryBreakdown first = stage_memory(p, 0, masks);
  if (p.pp == 1) return first;
  if (!p.stage_devices.empty() || masks != nullptr) {
    // Devices of different sizes, or stages whose layers each chose their recompute: the stage
    // with the least headroom, whichever it is.
    MemoryBreakdown worst = first;
    for (int st = 1; st < p.pp; ++st) {
      MemoryBreakdown m = stage_memory(p, st, masks);
      if (m.total - m.capacity > worst.total - worst.capacity) worst = m;
    }
    return worst;
  }
  MemoryBreakdown last = stage_memory(p, p.pp - 1, masks);
  MemoryBreakdown worst = last.total > first.total ? last : first;
  if (p.offload_optimizer || p.offload_params || p.offload_activations || p.offload_embeddings) {
    // Offloaded state can fill a stage's share of host memory first: report a stage that does.
    for (int st = 0; st < p.pp && worst.fits(); ++st) {
      MemoryBreakdown m = st == 0 ? first : st == p.pp - 1 ? last : stage_memory(p, st, masks);
      if (!m.fits()) worst = m;
    }
  }
  return worst;
}

namespace {

// The fixed policies: by each layer's place in its chunk (Plan::recomputes).
RecomputeAssignment fixed_recompute_assignment(const ModelSpec& m, const Plan& p) {
  RecomputeAssignment out;
  out.layer_masks.assign(static_cast<std::size_t>(m.layers), 0);
  const RecomputeMask mask = recompute_mask(p);
  for (int st = 0; st < p.pp; ++st)
    for (int c = 0; c < p.chunks(); ++c) {
      const auto [begin, end] = p.chunk_layer_range(m.layers, st, c);
      for (int layer = begin; layer < end; ++layer)
        if (p.recomputes(layer - begin)) out.layer_masks[static_cast<std::size_t>(layer)] = mask;
    }
  return out;
}

// The recompute options of a dense and of a MoE layer on one accelerator group at one tp.
struct LayerOptions {
  std::vector<RecomputeOption> dense, moe;
};
LayerOptions recompute_options(const ModelSpec& m, const ClusterSpec& view, const Plan& q,
                               const LayerShape& s) {
  const DeviceCosts c = device_costs(m, view, q, s);
  LayerOptions o;
  // Seconds: what the layer's time grows by (re-run kernels, full recompute's collectives).
  for (RecomputeMask k : candidate_recompute_masks(q.flash_attention)) {
    o.dense.push_back({k, layer_activation_bytes(m, s, k, q.flash_attention, false),
                       c.dense_mask[k].total() - c.dense_mask[0].total()});
    if (m.is_moe())
      o.moe.push_back({k, layer_activation_bytes(m, s, k, q.flash_attention, true),
                       c.moe_mask[k].total() - c.moe_mask[0].total()});
  }
  o.dense = undominated(o.dense);
  o.moe = undominated(o.moe);
  return o;
}

// The module set per layer (`items`: each layer's options) that keeps a stage's activations
// within `room` bytes at the least recompute time, or nullopt when nothing fits. Full recompute
// anywhere adds one layer's activations (`whole_layer`) during its backward (stage_memory): solve
// without full, and with full in a room that smaller, and keep the faster.
std::optional<std::vector<RecomputeMask>> cheapest_recompute(
    const std::vector<std::vector<RecomputeOption>>& items, double room, double in_flight,
    double whole_layer) {
  std::vector<std::vector<RecomputeOption>> partial_items = items;
  for (auto& opts : partial_items)
    std::erase_if(opts, [](const RecomputeOption& o) { return (o.mask & recompute_module::kFull) != 0; });
  auto seconds = [](const std::vector<std::vector<RecomputeOption>>& its, const std::vector<int>& pick) {
    double t = 0;
    for (std::size_t i = 0; i < pick.size(); ++i) t += its[i][static_cast<std::size_t>(pick[i])].seconds;
    return t;
  };
  const auto a = choose_recompute(partial_items, room / in_flight);
  // A choice with full recompute costs at least one layer's full recompute, and one without it
  // fits the first, larger room: when the first answer is already that cheap, it stands.
  double full_s = std::numeric_limits<double>::infinity();
  for (const auto& opts : items)
    for (const RecomputeOption& o : opts)
      if (o.mask & recompute_module::kFull) full_s = std::min(full_s, o.seconds);
  const auto b = a && seconds(partial_items, *a) <= full_s
                     ? std::nullopt
                     : choose_recompute(items, (room - whole_layer) / in_flight);
  const std::vector<std::vector<RecomputeOption>>* chosen_items = nullptr;
  const std::vector<int>* chosen = nullptr;
  if (a) {
    chosen_items = &partial_items;
    chosen = &*a;
  }
  if (b && (!a || seconds(items, *b) < seconds(partial_items, *a))) {
    chosen_items = &items;
    chosen = &*b;
  }
  if (!chosen) return std::nullopt;
  std::vector<RecomputeMask> masks;
  for (std::size_t i = 0; i < chosen->size(); ++i)
    masks.push_back((*chosen_items)[i][static_cast<std::size_t>((*chosen)[i])].mask);
  return masks;
}

}  // namespace

RecomputeAssignment AnalyticModel::recompute_assignment(const Plan& p) const {
  const ModelSpec& m = model_;
  if (p.recompute != Recompute::kOptimal) return fixed_recompute_assignment(m, p);
  RecomputeAssignment out;
  out.layer_masks.assign(static_cast<std::size_t>(m.layers), 0);
  // Each (accelerator group, tp) the stages run on: the options of a dense and a MoE layer.
  std::map<std::pair<int, int>, LayerOptions> options;
  const std::vector<RecomputeMask> none(static_cast<std::size_t>(m.layers), 0);
  for (int st = 0; st < p.pp; ++st) {
    const Plan q = p.stage_tp.empty() ? p : stage_view(p, st);
    const LayerShape s = plan_layer_shape(m, q);
    const int g = stage_group(p, cluster_.node, st);
    auto it = options.find({g, q.tp});
    if (it == options.end()) {
      const ClusterSpec view = p.stage_devices.empty() ? cluster_ : cluster_view(cluster_, g);
      it = options.emplace(std::pair{g, q.tp}, recompute_options(m, view, q, s)).first;
    }
    const std::vector<int> layers = stage_layer_list(q, m.layers, st);
    // The room the layers' kept activations have: capacity (less the plan's headroom) less
    // everything else on the stage.
    const MemoryBreakdown mem0 = stage_memory(q, st, &none);
    const double in_flight = std::max(1e-9, activations_in_flight(q, st));
    const double capacity = mem0.capacity * (1.0 - p.recompute_headroom);
    std::vector<std::vector<RecomputeOption>> items;
    double kept0 = 0;
    bool stage_moe = false;
    for (int layer : layers) {
      const bool moe = layer >= m.dense_layers();
      stage_moe = stage_moe || moe;
      items.push_back(moe ? it->second.moe : it->second.dense);
      kept0 += layer_activation_bytes(m, s, RecomputeMask{0}, q.flash_attention, moe);
    }
    const double room = capacity - (mem0.total - in_flight * kept0);
    if (kept0 * in_flight <= room) continue;  // no recompute needed
    const double whole_layer = layer_activation_bytes(m, s, RecomputeMask{0}, q.flash_attention, stage_moe);
    const auto masks = cheapest_recompute(items, room, in_flight, whole_layer);
    for (std::size_t i = 0; i < layers.size(); ++i)
      out.layer_masks[static_cast<std::size_t>(layers[i])] = masks ? (*masks)[i] : recompute_module::kFull;
    if (!masks) out.fits = false;
  }
  return out;
}

namespace {

// The costs of the accelerators (or, with Plan::stage_tp, the tensor-parallel degrees) the plan's
// stages run on, each costed once: one, unless the stages differ (that common case allocates
// nothing).
struct StageCosts {
  DeviceCosts first;
  std::vector<DeviceCosts> mixed;
  std::vector<ClusterSpec> views;  // Plan::stage_devices: each accelerator group's view of the cluster
  std::vector<int> stage_cost;     // per stage: its entry of `mixed` (empty: `first` for every stage)
  std::vector<Plan> stage_plans;   // Plan::stage_tp: each stage as it runs (its tp, dp, micro-batch)

  StageCosts() = default;
  StageCosts(const StageCosts&) = delete;  // DeviceCosts::d points into `views`
  StageCosts(StageCosts&&) = default;
  const DeviceCosts& of(int stage) const { return stage_cost.empty() ? first : mixed[stage_cost[stage]]; }
  const Plan& plan_of(const Plan& p, int stage) const { return stage_plans.empty() ? p : stage_plans[stage]; }
};

StageCosts stage_costs(const ModelSpec& m, const ClusterSpec& cluster, const Plan& p, const LayerShape& s) {
  StageCosts c;
  c.first = device_costs(m, cluster, p, s);
  if (!p.stage_tp.empty()) {
    std::map<int, int> cost_of_tp;
    c.stage_cost.resize(static_cast<std::size_t>(p.pp));
    for (int st = 0; st < p.pp; ++st) {
      c.stage_plans.push_back(stage_view(p, st));
      const Plan& q = c.stage_plans.back();
      auto [it, fresh] = cost_of_tp.emplace(q.tp, static_cast<int>(c.mixed.size()));
      if (fresh) c.mixed.push_back(device_costs(m, cluster, q, plan_layer_shape(m, q)));
      c.stage_cost[st] = it->second;
    }
  } else if (!p.stage_devices.empty()) {
    std::vector<int> cost_of_group(cluster.node.devices.size(), -1);
    c.stage_cost.resize(static_cast<std::size_t>(p.pp));
    c.views.reserve(cluster.node.devices.size());  // no reallocation: DeviceCosts::d points into them
    for (int st = 0; st < p.pp; ++st) {
      const int g = stage_group(p, cluster.node, st);
      if (cost_of_group[g] < 0) {
        cost_of_group[g] = static_cast<int>(c.mixed.size());
        c.views.push_back(cluster_view(cluster, g));
        c.mixed.push_back(device_costs(m, c.views.back(), p, s));
      }
      c.stage_cost[st] = cost_of_group[g];
    }
  }
  return c;
}

// Per stage, the time of one of its dense and of one of its MoE layers per micro-batch: blended
// between recomputing and not by the share of its layers that recompute (Plan::recompute_layers),
// or under Recompute::kOptimal the mean over its layers of each one's time under its module set.
struct StageLayerTimes {
  // Per stage (Recompute::kOptimal only): dense, MoE. Otherwise of() blends on demand, so the
  // common case allocates nothing.
  std::vector<std::array<LayerTime, 2>> optimal_stage;
  // Recompute::kOptimal: FLOPs over every stage's layers, dense and MoE (executed, and the model's).
  std::array<double, 2> optimal_hw{0, 0}, optimal_model{0, 0};
  const ModelSpec* m = nullptr;
  const Plan* p = nullptr;
  const StageCosts* costs = nullptr;

  std::array<LayerTime, 2> of(int i) const {
    if (!optimal_stage.empty()) return optimal_stage[static_cast<std::size_t>(i)];
    const DeviceCosts& c = costs->of(i);
    const Range r = stage_layers(*p, m->layers, i);
    const double f = recomputed_fraction(*p, r);
    return {blend(c.dense, c.dense_plain, f), blend(c.moe, c.moe_plain, f)};
  }
};

StageLayerTimes stage_layer_times(const ModelSpec& m, const Plan& p, const StageCosts& costs,
                                  const RecomputeAssignment* optimal) {
  StageLayerTimes out;
  out.m = &m;
  out.p = &p;
  out.costs = &costs;
  if (optimal == nullptr) return out;
  for (int i = 0; i < p.pp; ++i) {
    const DeviceCosts& c = costs.of(i);
    std::array<LayerTime, 2> t{c.dense, c.moe};
    std::array<int, 2> n{0, 0};
    for (int layer : stage_layer_list(costs.plan_of(p, i), m.layers, i)) {
      const int kind = layer >= m.dense_layers() ? 1 : 0;
      const LayerTime& x =
          (kind == 1 ? c.moe_mask : c.dense_mask)[optimal->layer_masks[static_cast<std::size_t>(layer)]];
      t[kind] = n[kind] == 0 ? x : blend(t[kind], x, n[kind] / (n[kind] + 1.0));  // running mean
      ++n[kind];
      out.optimal_hw[kind] += x.hw_flops;
      out.optimal_model[kind] += x.model_flops;
    }
    out.optimal_stage.push_back(t);
  }
  return out;
}

// What a stage runs per micro-batch: its layers, and the embedding's and the head's passes.
struct StageLoad {
  double dense = 0, moe = 0, embed = 0, head = 0;
};
StageLoad stage_load(const ModelSpec& m, const Plan& p, int i) {
  const Range r = stage_layers(p, m.layers, i);
  const int nd = dense_in(m, r);
  return StageLoad{static_cast<double>(nd), static_cast<double>(r.count() - nd), i == 0 ? 1.0 : 0.0,
                   i == p.pp - 1 ? 1.0 : 0.0};
}

// The stages' times per micro-batch (all their chunks), summed and the slowest's, and which stage
// that is. A DualPipe rank runs half the micro-batches through its own stage and half through its
// mirror's, so its load per micro-batch is the mean of the two (the end ranks share the LM head).
struct SlowestStage {
  double sum = 0, max = 0;
  int stage = 0;
  StageLoad load;
};
SlowestStage slowest_stage(const ModelSpec& m, const Plan& p, const StageCosts& costs,
                           const StageLayerTimes& times) {
  const bool dualpipe = p.schedule == Schedule::kDualPipe && p.pp > 1;
  SlowestStage out;
  for (int i = 0; i < p.pp; ++i) {
    StageLoad l = stage_load(m, p, i);
    if (dualpipe) {
      const StageLoad mirror = stage_load(m, p, p.pp - 1 - i);
      l = {(l.dense + mirror.dense) / 2, (l.moe + mirror.moe) / 2, (l.embed + mirror.embed) / 2,
           (l.head + mirror.head) / 2};
    }
    const DeviceCosts& c = costs.of(i);
    const std::array<LayerTime, 2> t = times.of(i);
    const double x = l.dense * t[0].total() + l.moe * t[1].total() + l.embed * c.embed_time +
                     l.head * c.head_time + c.amax;
    out.sum += x;
    if (x > out.max) {
      out.max = x;
      out.stage = i;
      out.load = l;
    }
  }
  return out;
}

// The slowest stage, which sets the step: its accelerator's costs, its own degrees
// (Plan::stage_tp; the plan's otherwise), its layers' times and its load per micro-batch.
struct CriticalStage {
  const DeviceCosts& costs;
  const Plan& plan;
  int stage;
  LayerTime dense, moe;
  StageLoad load;
  double mbs;  // micro-batches per step
  // What `f` takes of a layer's time, over the stage's layers (dense and MoE), per micro-batch.
  template <class F>
  double per_mb(F f) const {
    return load.dense * f(dense) + load.moe * f(moe);
  }
};

// Compute, and the layers' exposed tensor-, context- and expert-parallel collectives, per step.
void add_compute(const CriticalStage& c, TimeBreakdown& tb) {
  const double nd = c.load.dense, nm = c.load.moe;
  const LayerTime &dense = c.dense, &moe = c.moe;
  tb.compute = c.mbs * (nd * (dense.fwd_compute + dense.bwd_compute + dense.recompute) +
                        nm * (moe.fwd_compute + moe.bwd_compute + moe.recompute) +
                        c.load.embed * c.costs.embed_time + c.load.head * c.costs.head_time);
  tb.recompute = c.mbs * (nd * dense.recompute + nm * moe.recompute);
  tb.host_wait = c.mbs * (nd * dense.host_wait + nm * moe.host_wait);
  tb.tp_comm = c.mbs * (nd * (dense.fwd_tp + dense.bwd_tp) + nm * (moe.fwd_tp + moe.bwd_tp));
  tb.cp_comm = c.mbs * (nd * dense.cp + nm * moe.cp);
  tb.ep_comm = c.mbs * nm * moe.ep;
  // FP8 delayed scaling's amax all-reduces, in each chunk's time (reported with the data-parallel
  // collectives, whose ranks they span).
  tb.dp_comm = c.mbs * c.costs.amax;
}

// The parameters the slowest stage's rank holds, as the gradient reduction and the optimizer
// see them.
struct HeldParams {
  double experts = 0;     // its MoE layers' experts (reduced over dp*cp/ep)
  double tables = 0;      // the embedding, head and final norm it holds
  double chunk = 0;       // one chunk's parameters but the experts (DualPipe: half the tables each)
  double replicated = 0;  // all its parameters but the experts (DualPipe: its mirror's too)
  int layers = 0;         // layers on the stage
};
HeldParams held_params(const ModelSpec& m, const Plan& p, const CriticalStage& c) {
  const bool dualpipe = p.schedule == Schedule::kDualPipe && p.pp > 1;
  const Range cr = stage_layers(p, m.layers, c.stage);
  const int cd = dense_in(m, cr), cm = cr.count() - cd;
  HeldParams h;
  h.layers = cr.count();
  h.experts = cm * m.moe.experts * m.expert_params() / (c.plan.etp() * p.ep);
  h.tables = m.end_params_on_stage(c.stage, p.pp, dualpipe, c.plan.tp);
  h.chunk = cd * layer_params_per_device(m, false, c.plan.tp, 1) +
            cm * layer_params_per_device(m, true, c.plan.tp, p.ep, c.plan.etp()) - h.experts +
            (dualpipe ? h.tables / 2 : h.tables);
  // DualPipe: the rank also holds its mirror stage (two copies of every parameter).
  h.replicated = (dualpipe ? 2.0 : 1.0) * h.chunk;
  return h;
}

// Pipeline: the schedule's bubble (tb.bubble) and its point-to-point transfers (tb.pp_comm); with
// DualPipe the two copies' gradients are summed before the step -- one chunk's gradients to the
// mirror rank and the sums back, as in the simulator's lowering. Returns the pipeline's part of
// the step: busy time, bubble and transfers.
double add_pipeline(const Plan& p, const CriticalStage& c, const SlowestStage& slowest,
                    const HeldParams& held, TimeBreakdown& tb) {
  // ZB-H1's bubble: the weight gradients' share of the critical (slowest) stage's time per
  // micro-batch, which is slowest.max.
  const double weights = c.per_mb([](const LayerTime& t) { return t.bwd_weight; });
  // DualPipe's bubble: the full backward's share too (its own compute, recompute and exposed
  // tensor-parallel collectives; half of the context- and expert-parallel ones, which run both ways).
  double backward_share = 2.0 / 3.0;
  const double layers_time = c.per_mb([](const LayerTime& t) { return t.total(); });
  if (p.schedule == Schedule::kDualPipe && layers_time > 0) {
    auto backward = [](const LayerTime& t) {
      return t.bwd_compute + t.recompute + t.bwd_tp + 0.5 * (t.cp + t.ep);
    };
    backward_share = c.per_mb(backward) / layers_time;
  }
  const PipelineTime pipe =
      pipeline_time(p.schedule, slowest.sum, slowest.max, p.pp, c.mbs, p.virtual_stages,
                    slowest.max > 0 ? weights / slowest.max : 1.0 / 3.0, backward_share);
  double p2p_total = 2 * c.costs.p2p * pipeline_p2p_count(p.schedule, p.pp, c.mbs, p.virtual_stages);
  if (p.p2p_overlapped()) {
    // Megatron's overlap_p2p_comm: a chunk's send and the next chunk's receive run beside the
    // next chunk's compute; only the fill's and the drain's hops (p-1 each way) wait whole, each
    // other transfer only for what one chunk's forward does not cover.
    const double chunk_fwd =
        c.per_mb([](const LayerTime& t) { return t.fwd_compute; }) / std::max(1, p.virtual_stages);
    p2p_total =
        2 * c.costs.p2p * (p.pp - 1) + 2 * c.mbs * p.virtual_stages * std::max(0.0, c.costs.p2p - chunk_fwd);
    // Except in the forward-only warm-up and the backward-only cool-down: there a rank runs a
    // group of pp micro-batches through one chunk, and the group's first micro-batch comes back
    // for the next chunk only after all pp stages ran it and pp hops carried it, pp transfers
    // after the rank ran out of work. Megatron's warm-up (2(pp-1-rank) + (vp-1) pp chunks)
    // crosses vp-1 such chunk boundaries, and the cool-down as many.
    p2p_total += 2.0 * (p.virtual_stages - 1) * p.pp * c.costs.p2p;
  }
  // Merged forward/backward pairs (Plan::overlap_ep_comm) on an interleaved schedule: a pair's
  // sends leave only at its end, and the two chunks of slack the schedule keeps between
  // neighbouring stages are the pair itself, so each pair's period grows by the mean of its two
  // sends (the forward's to the next stage, the backward's to the previous one). A send that
  // leaves the node shares its NIC with the all-to-all's off-node flows (max-min fair) for the
  // share of the pair the all-to-alls run.
  if (p.overlap_ep_comm && p.schedule == Schedule::kInterleaved1F1B && p.virtual_stages > 1 && p.pp > 1) {
    const GroupLink &ep = c.costs.links.ep, &pp = c.costs.links.pp;
    const double per_mb = c.per_mb([](const LayerTime& t) { return t.total(); });
    const double busy = per_mb > 0 ? std::min(1.0, 4 * c.load.moe * c.moe.a2a / per_mb) : 0.0;
    const double flows = ep.crosses_nodes && pp.crosses_nodes ? busy * (ep.size - ep.ranks_per_node) : 0.0;
    p2p_total += c.mbs * p.virtual_stages * merged_pair_share(p) * c.costs.p2p * (1 + flows);
  }
  const bool dualpipe = p.schedule == Schedule::kDualPipe && p.pp > 1;
  const double mirror_sync = dualpipe ? 2 * sendrecv_time(c.costs.links.pp, held.chunk * grad_bytes(p)) : 0.0;
  tb.pp_comm = p2p_total;
  tb.bubble = pipe.bubble;
  tb.pp_comm += mirror_sync;
  return pipe.total() + p2p_total + mirror_sync;
}

// The gradient reduction at the step, inside a node, over gradients the caches no longer hold
// (the link's own rates with the cold bandwidth, and none of its measured times, which are hot).
GroupLink cold(const Plan& p, const NodeSpec& node, const GroupLink& link, CollectiveOp op) {
  if (!cold_step_reduction(p) || link.crosses_nodes) return link;
  GroupLink l = link.as(op);
  l.bus_bandwidth = std::min(l.bus_bandwidth, node.fabric.cold_rate_of(op));
  return l;
}

// One step's data-parallel collectives for `params` parameters over `link`, unhidden: the
// gradient reduction and, with ZeRO-1/2, the parameter all-gather after the optimizer step
// (ZeRO-3's, a layer at a time, are zero3_exposed's).
struct DpCollectives {
  double reduce = 0, gather = 0;
};
DpCollectives data_parallel_collectives(const ModelSpec& m, const Plan& p, const NodeSpec& node,
                                        const DeviceSpec& d, const GroupLink& link, double params) {
  if (link.size <= 1 || params <= 0) return {};
  const double wb = weight_bytes(p.precision), gb = grad_bytes(p);
  const double gather = p.zero_stage == 1 || p.zero_stage == 2 || p.zero3_whole_step()
                            ? allgather_time(link, params * wb)
                            : 0.0;
  if (p.grad_compression != GradCompression::kNone) {
    // Compressed gradients: a smaller all-reduce (or an all-gather of sparse sets, whose ranks
    // then keep their shard under ZeRO-1/2) plus the compression kernels on the device.
    const CompressionCost comp = compression_cost(p, m, params, gb, link.size);
    const double grads =
        (comp.gather ? allgather_time(link, comp.wire_bytes) : allreduce_time(link, comp.wire_bytes)) +
        comp.kernel_seconds(d);
    return {grads, gather};
  }
  switch (p.zero_stage) {
    case 0:
      return {allreduce_time(cold(p, node, link, CollectiveOp::kAllReduce), params * gb), 0.0};
    default:
      return {reduce_scatter_time(cold(p, node, link, CollectiveOp::kReduceScatter), params * gb), gather};
  }
}

// ZeRO-3 / FSDP, a layer (FSDP unit) at a time and every micro-batch. The forward gathers each
// layer's parameters one layer ahead, behind the layer before it; the backward gathers them again
// while the gradients of the layer after are reduce-scattered, two collectives on their own
// streams that share the links (their bandwidth terms add, their latencies overlap). What a
// layer's pass cannot hide waits, phase by phase (the forward's spare time does not hide the
// backward's collectives); so do the step's first gather and its last reduce-scatter.
// `forward_mb`, `backward_mb`: the stage's passes per micro-batch (what the collectives run
// beside: its kernels and its exposed TP collectives), spread evenly over its layers.
double zero3_exposed(const Plan& p, const NodeSpec& node, const CriticalStage& c, const HeldParams& held,
                     double forward_mb, double backward_mb) {
  struct Part {
    double total = 0, latency = 0;
  };
  const double layers = std::max(1, held.layers);
  auto part = [&](const GroupLink& l, CollectiveOp op, double bytes) {
    Part r;
    if (l.size <= 1 || bytes <= 0) return r;
    r.total = op == CollectiveOp::kAllGather ? allgather_time(l, bytes) : reduce_scatter_time(l, bytes);
    r.latency = std::min(r.total, collective_latency(l, op, bytes));
    return r;
  };
  auto both = [&](CollectiveOp op, double bytes_per_param) {
    const Part a = part(c.costs.links.dp, op, held.replicated * bytes_per_param / layers);
    const Part b = part(c.costs.links.edp, op, held.experts * bytes_per_param / layers);
    return Part{a.total + b.total, a.latency + b.latency};
  };
  const Part gather = both(CollectiveOp::kAllGather, weight_bytes(p.precision));
  const Part reduce = both(CollectiveOp::kReduceScatter, grad_bytes(p));
  const double backward_comm = gather.total - gather.latency + reduce.total - reduce.latency +
                               std::max(gather.latency, reduce.latency);
  // Behind the compute: each layer's gather beside its forward, its gather and reduction beside
  // its backward, every micro-batch; the compute beside them runs without the collectives' SMs.
  const double hidden =
      c.mbs * layers *
      (std::min(gather.total, forward_mb / layers) + std::min(backward_comm, backward_mb / layers));
  return c.mbs * layers *
             (std::max(0.0, gather.total - forward_mb / layers) +
              std::max(0.0, backward_comm - backward_mb / layers)) +
         gather.total + reduce.total + hidden * (collective_compute_stretch(node, *c.costs.d) - 1);
}

// Megatron-Core's gradient buckets on a stage (Plan::grad_bucket_params): how many its first model
// chunk has, and the share of the chunk's gradients the last of them holds (the dense and expert
// buffers are bucketed apart; the last buckets of both together). Taken as equal buckets of at
// least the size; Megatron closes a bucket at the parameter that fills it, so its last bucket,
// the remainder, may be smaller (the simulator lowers them so).
struct MegatronBuckets {
  bool on = false;
  double first_chunk = 1, last_share = 1;
};
MegatronBuckets megatron_buckets(const Plan& p, const HeldParams& held) {
  MegatronBuckets b;
  const double dense = held.replicated - held.tables, experts = held.experts;
  if (p.grad_bucket_params <= 0 || dense + experts <= 0) return b;
  b.on = true;
  const double size = static_cast<double>(p.grad_bucket_params), v = p.chunks();
  auto count = [&](double params) { return params > 0 ? std::max(1.0, std::floor(params / v / size)) : 0.0; };
  const double nd = count(dense), ne = count(experts);
  b.first_chunk = nd + ne;  // at least 1: dense + experts > 0
  b.last_share = ((nd > 0 ? dense / nd : 0.0) + (ne > 0 ? experts / ne : 0.0)) / (dense + experts);
  return b;
}

// Data parallel: gradients (and with ZeRO, parameters) over dp*cp, experts over dp*cp/ep; what
// the compute does not hide. Megatron's --overlap-grad-reduce hides the gradient reduction behind
// the backward of the last micro-batch; --overlap-param-gather hides the ZeRO-1/2 parameter
// all-gather behind the next forward (the first layer's share always waits); ZeRO-3 / FSDP
// prefetches layer by layer (zero3_exposed). ZeRO-3 across pipeline stages (Plan::zero3_whole_step)
// gathers as the first micro-batch's forward reaches each layer and reduce-scatters each chunk
// after its last backward, beside the rest of the stage's schedule.
double data_parallel_exposed(const ModelSpec& m, const Plan& p, const NodeSpec& node, const CriticalStage& c,
                             const HeldParams& held) {
  const Links& links = c.costs.links;
  const double backward_mb = c.per_mb([](const LayerTime& t) { return t.bwd_compute + t.recompute; });
  const double forward_mb = c.per_mb([](const LayerTime& t) { return t.fwd_compute; });
  const bool whole = p.zero3_whole_step();
  if (p.zero_stage >= 3 && !whole) {
    // A layer's gathers and reductions run beside everything the layer's pass waits for: its
    // kernels and its exposed tensor-parallel collectives (another communicator, on NVLink).
    const double tp_fwd = c.per_mb([](const LayerTime& t) { return t.fwd_tp; });
    const double tp_bwd = c.per_mb([](const LayerTime& t) { return t.bwd_tp; });
    return zero3_exposed(p, node, c, held, forward_mb + tp_fwd, backward_mb + tp_bwd);
  }
  const DpCollectives dense = data_parallel_collectives(m, p, node, *c.costs.d, links.dp, held.replicated);
  const DpCollectives experts = data_parallel_collectives(m, p, node, *c.costs.d, links.edp, held.experts);
  const double reduce = dense.reduce + experts.reduce, gather = dense.gather + experts.gather;
  const double layers_on_stage = std::max(1, held.layers);
  // Interleaved, a model chunk's gradients are complete after its last micro-batch's backward, and
  // the last group of micro-batches runs its backward chunk by chunk (Megatron-Core's interleaved
  // schedule: a group of pp micro-batches per chunk, the chunks in reverse): the first chunk's
  // reduction starts while the group's backward of the v-1 others remains. Without chunks, one
  // micro-batch's backward is the window. The parameter gather mirrors it: a chunk's parameters
  // are first needed by the group's first micro-batch, after the group ran the chunks before it
  // (Megatron-Core gathers a bucket ahead, each chunk's first bucket from the optimizer step on).
  const int v = p.chunks();
  const double group = std::min(static_cast<double>(p.pp), c.mbs);
  const double window = v > 1 && p.schedule == Schedule::kInterleaved1F1B ? (1 + (v - 1) * group) / v : 1.0;
  // The tables' (embedding, head) share of the dense collectives: reduced and gathered after the
  // step's passes, as the simulator's lowering does, so they wait whole.
  const double table_share = held.replicated > 0 ? held.tables / held.replicated : 0.0;
  // Overlapped, the reduction runs bucket by bucket as the last micro-batch's backward frees
  // their gradients: every bucket pays the ring's latency steps, and the last one waits whole
  // after the backward. The tables' gradients (embedding, head) are reduced after the backward,
  // as the simulator's lowering does.
  double reduce_exposed = reduce;
  if (whole && v > 1) {
    // Across pipeline stages each chunk's reduce-scatter follows its last backward, one after the
    // other on their stream; the last chunk's waits whole, an earlier one only for what the
    // later chunks' last group of backwards does not cover.
    reduce_exposed = 0;
    for (int j = 1; j <= v; ++j)
      reduce_exposed = std::max(reduce_exposed, j * reduce / v - (j - 1) * group * backward_mb / v);
  }
  if (p.overlap_grad_reduce && !whole && reduce > 0) {
    const CollectiveOp op = p.zero_stage == 0 ? CollectiveOp::kAllReduce : CollectiveOp::kReduceScatter;
    const double per_bucket =
        collective_latency(links.dp, op) + (held.experts > 0 ? collective_latency(links.edp, op) : 0.0);
    const double tables = dense.reduce * table_share;
    const MegatronBuckets b = megatron_buckets(p, held);
    const double buckets = b.on ? b.first_chunk + (v - 1) : layers_on_stage;
    const double bucketed = reduce - tables + (buckets - 1) * per_bucket;
    // The last bucket: a layer's share (a bucket a layer), or Megatron-Core's last bucket of the
    // first chunk, its share of the bandwidth term and a latency of its own.
    const double bandwidth = std::max(0.0, reduce - tables - per_bucket);
    const double last = b.on ? bandwidth / v * b.last_share + per_bucket : bucketed / layers_on_stage;
    // Megatron-Core: a later stage reduces its first chunk in one bucket, which starts a chunk's
    // backward (of one micro-batch) before the first stage's backward ends.
    const double later_stage = b.on && p.pp > 1 ? bandwidth / v + per_bucket - backward_mb / v : 0.0;
    reduce_exposed = std::max({last, bucketed - window * backward_mb, later_stage}) + tables;
  }
  // Overlapped, the layers' parameters are gathered as the first forward reaches them, a bucket
  // ahead; the tables' after the optimizer step.
  double gather_exposed = gather;
  if ((p.overlap_param_gather || whole) && gather > 0) {
    const double tables = whole ? 0.0 : dense.gather * table_share;  // FSDP's root gathers them first
    const double layered = gather - tables;
    gather_exposed = std::max(layered / layers_on_stage, layered - window * forward_mb) + tables;
    // Across pipeline stages every stage gathers in its first forward, and the pipeline's fill
    // runs those forwards one stage after another: each stage's wait delays the ones after it.
    if (whole) gather_exposed *= p.pp;
  }
  // The compute beside the hidden part runs without the collectives' SMs (NodeSpec::collective_sms).
  const double hidden = reduce - reduce_exposed + gather - gather_exposed;
  return reduce_exposed + gather_exposed + hidden * (collective_compute_stretch(node, *c.costs.d) - 1);
}

// Optimizer: one Adam pass over the parameters this device owns (tb.optimizer); returns the
// host's part, exposed: ZeRO-Offload's step and copies, and Plan::offload_embeddings' table.
double add_optimizer(const ModelSpec& m, const Plan& p, const NodeSpec& node, const CriticalStage& c,
                     const HeldParams& held, TimeBreakdown& tb) {
  const Plan& pc = c.plan;
  const double wb = weight_bytes(p.precision), gb = grad_bytes(p);
  const double owned = p.zero_stage >= 1 ? held.replicated / (static_cast<double>(pc.dp) * p.cp) +
                                               held.experts / static_cast<double>(pc.edp())
                                         : held.replicated + held.experts;
  // The input table of Plan::offload_embeddings is updated on the host (rank 0's stage), beside
  // the device's own step.
  const double host_table =
      p.offload_embeddings && c.stage == 0 ? static_cast<double>(m.vocab) * m.hidden / pc.tp : 0.0;
  const double owned_here =
      owned - (p.zero_stage >= 1 ? host_table / (static_cast<double>(pc.dp) * p.cp) : host_table);
  double offload_step = 0;
  if (p.offload_optimizer) {
    // ZeRO-Offload: gradients down, Adam on the host, weights back. With Plan::offload_params the
    // layers' gradients went down during the backward and their weights live on the host: only
    // the embedding and head still cross.
    const double streamed = p.offload_params && held.replicated + held.experts > 0
                                ? 1.0 - held.tables / (held.replicated + held.experts)
                                : 0.0;
    offload_step = owned_here * (1 - streamed) * (gb + wb) / host_link_rate(node) +
                   owned_here * kAdamBytesPerParam / host_optimizer_rate(node);
  } else {
    tb.optimizer = c.costs.d->optimizer_seconds(owned_here * adam_bytes_per_param(p));
  }
  if (host_table > 0)
    offload_step += std::max(0.0, host_table * kAdamBytesPerParam / host_optimizer_rate(node) - tb.optimizer);
  return offload_step;
}

// FLOPs of the whole job per step: the model's, and those executed (recompute's too).
void add_flops(const ModelSpec& m, const Plan& p, const CriticalStage& c, const StageLayerTimes& times,
               Prediction& out) {
  const int seq = effective_seq_len(p, m);
  const double sequences = static_cast<double>(p.global_batch);
  const double head_model =
      3.0 * logits_flops(m, LayerShape{1, static_cast<double>(seq), static_cast<double>(seq), 1, false, 2});
  LayerShape full{1, static_cast<double>(seq), static_cast<double>(seq), 1, false, 2};
  const double dense_model = 3.0 * dense_layer_flops(m, full).total();
  const double moe_model = m.is_moe() ? 3.0 * moe_layer_flops(m, full).total() : 0.0;
  out.model_flops = sequences * (m.dense_layers() * dense_model + m.moe_layers() * moe_model + head_model);
  // Recompute's extra FLOPs, over the whole model's layers (Plan::recompute_layers: some of them).
  const bool partial = p.partial_recompute();
  double model_f = partial ? 0.0 : 1.0;
  for (int st = 0; partial && st < p.pp; ++st) {
    const Range r = stage_layers(p, m.layers, st);
    model_f += recomputed_fraction(p, r) * r.count() / std::max(1, m.layers);
  }
  const LayerTime model_dense = blend(c.costs.dense, c.costs.dense_plain, model_f),
                  model_moe = blend(c.costs.moe, c.costs.moe_plain, model_f);
  double hw_ratio_dense = model_dense.model_flops > 0 ? model_dense.hw_flops / model_dense.model_flops : 1.0;
  double hw_ratio_moe = model_moe.model_flops > 0 ? model_moe.hw_flops / model_moe.model_flops : 1.0;
  if (p.recompute == Recompute::kOptimal) {
    // Every stage's layers under their own module sets.
    for (int kind = 0; kind < 2; ++kind)
      (kind == 0 ? hw_ratio_dense : hw_ratio_moe) =
          times.optimal_model[kind] > 0 ? times.optimal_hw[kind] / times.optimal_model[kind] : 1.0;
  }
  out.hardware_flops = sequences * (m.dense_layers() * dense_model * hw_ratio_dense +
                                    m.moe_layers() * moe_model * hw_ratio_moe + head_model);
}

// MFU, HFU and the throughputs, from the step time and the FLOPs.
void add_rates(const ModelSpec& m, const Plan& p, double peak, Prediction& out) {
  const double sequences = static_cast<double>(p.global_batch);
  const double denom = out.step_time_s * out.devices * peak;
  out.mfu = denom > 0 ? out.model_flops / denom : 0.0;
  out.hfu = denom > 0 ? out.hardware_flops / denom : 0.0;
  out.tokens_per_s = out.step_time_s > 0 ? sequences * effective_seq_len(p, m) / out.step_time_s : 0.0;
  out.tflops_per_device =
      out.step_time_s > 0 ? out.hardware_flops / out.step_time_s / out.devices / 1e12 : 0.0;
}

}  // namespace

Prediction AnalyticModel::evaluate(const Plan& p) const {
  if (per_plan_) return AnalyticModel(model_, cluster_for_plan(model_, cluster_, p)).evaluate(p);
  const ModelSpec& m = model_;
  const NodeSpec& node = cluster_.node;
  // Costs per layer on each accelerator the stages use; what each layer recomputes.
  const StageCosts costs = stage_costs(m, cluster_, p, plan_layer_shape(m, p));
  const bool optimal = p.recompute == Recompute::kOptimal;
  const RecomputeAssignment assignment = optimal ? recompute_assignment(p) : RecomputeAssignment{};
  const StageLayerTimes times = stage_layer_times(m, p, costs, optimal ? &assignment : nullptr);
  // The slowest stage sets the step.
  const SlowestStage slowest = slowest_stage(m, p, costs, times);
  const int crit = slowest.stage;
  const CriticalStage c{costs.of(crit),
                        costs.plan_of(p, crit),
                        crit,
                        times.of(crit)[0],
                        times.of(crit)[1],
                        slowest.load,
                        static_cast<double>(p.micro_batches())};
  Prediction out;
  out.devices = p.gpus();
  out.micro_batches = p.micro_batches();
  TimeBreakdown& tb = out.time;

  add_compute(c, tb);
  const HeldParams held = held_params(m, p, c);
  const double pipeline = add_pipeline(p, c, slowest, held, tb);
  const double dp_exposed = data_parallel_exposed(m, p, node, c, held);
  tb.dp_comm += dp_exposed;
  const double offload_step = add_optimizer(m, p, node, c, held, tb);
  tb.offload = c.mbs * c.per_mb([](const LayerTime& t) { return t.offload; }) + offload_step;
  // ZeRO-3 across pipeline stages: FSDP2's copies once a step, the gathered weights copied out in
  // the first forward and the gradients copied in before their reduction (per micro-batch, they
  // are the layers' own: layer_time).
  double copies = 0;
  if (p.zero3_whole_step() && p.fsdp_copies_apply()) {
    auto once = [&](bool moe) {
      const FsdpCopies f =
          fsdp_copies(*c.costs.d, p, layer_params_per_device(m, moe, c.plan.tp, p.ep, p.etp()));
      return f.copy_out_s + f.chunk_cat_s;
    };
    copies = c.load.dense * once(false) + c.load.moe * (c.load.moe > 0 ? once(true) : 0.0);
    tb.compute += copies;
  }
  tb.total = pipeline + dp_exposed + copies + tb.optimizer + offload_step;
  // Input: what the data loader cannot hide behind the rest of the step.
  const DataLoadCost load = data_load_cost(m, cluster_, p);
  out.data_load_s = load.seconds;
  tb.data = input_stall(load, p, tb.total);
  tb.total += tb.data;
  out.step_time_s = tb.total;

  out.memory = memory_with(p, optimal ? &assignment.layer_masks : nullptr);
  out.fit = out.memory.fits() ? FitVerdict::kFits : FitVerdict::kOutOfMemory;
  add_flops(m, p, c, times, out);
  add_rates(m, p, mean_peak(p), out);
  return out;
}

LayerShape plan_layer_shape(const ModelSpec& m, const Plan& p) {
  const int seq = effective_seq_len(p, m);
  LayerShape s;
  s.batch = p.micro_batch;
  s.seq = static_cast<double>(seq) / p.cp;
  s.kv_seq = seq;
  if (m.sliding_window > 0 && m.sliding_window < seq) {
    // A window of w keys: the causal half of a seq x w band (seq*w - w^2/2 pairs), as the keys
    // per query over the full square the attention kernels halve for causality: 2w - w^2/seq.
    const double w = m.sliding_window;
    s.kv_seq = 2 * w - w * w / seq;
  }
  s.tp = p.tp;
  s.sp = p.sequence_parallel && p.tp > 1;
  s.experts_folded = p.experts_folded() && p.tp > 1;
  s.repeat_kv = p.repeat_kv && !m.mla.enabled() && m.q_dim() > m.kv_dim();
  s.bytes_per_element = weight_bytes(p.precision);
  if (p.precision == Precision::kFp8) s.linear_input_bytes = 1;
  return s;
}

double host_optimizer_rate(const NodeSpec& node) {
  double rate = node.host_link.bandwidth;
  for (const auto& g : node.devices)
    if (g.device.kind == DeviceKind::kCpu)
      rate =
          g.device.memory_bandwidth * g.device.memory_efficiency * g.count / std::max(1, node.accelerators());
  return rate;
}

double host_link_rate(const NodeSpec& node) {
  return node.host_link.bandwidth > 0 ? node.host_link.bandwidth * node.host_link.efficiency
                                      : host_optimizer_rate(node);
}

Status check_prediction(const Prediction& p, const ClusterSpec& cluster, const Plan& plan,
                        const std::string& plan_file) {
  const DeviceSpec& d = cluster.node.accelerator();
  if (plan.stage_devices.empty() && plan.precision == Precision::kFp8 && d.peak(DType::kFp8) <= 0)
    return Error(plan_file + ": /precision: fp8 is not supported by " + d.name);
  FS_RETURN_IF_ERROR(check_finite(p, plan_file));
  if (!p.fits()) return Error(plan_file + ": plan does not fit in memory: " + describe_memory(p.memory));
  return Status::Ok();
}

Result<Prediction> predict(const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan,
                           const std::string& plan_file) {
  FS_RETURN_IF_ERROR(validate_plan_on(plan, model, cluster, plan_file));
  AnalyticModel am(model, cluster);
  Prediction p = am.evaluate(plan);
  FS_RETURN_IF_ERROR(check_prediction(p, cluster, plan, plan_file));
  return p;
}

}  // namespace foresight
