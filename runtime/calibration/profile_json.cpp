// The cluster profile a calibration writes: the base cluster with the calibrated device, fabric
// and host link, each rate with its source, and the measurements as notes.
#include <fmt/core.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/calibration/calibrate.h"
#include "runtime/calibration/calibrate_internal.h"
#include "sim/spec/hardware.h"

namespace foresight::runtime {

namespace {
// The profile's source line for its cache levels.
std::string cache_source(const Calibration& c) {
  std::string out = "fitted, smallest level first:";
  for (std::size_t i = 0; i < c.caches.size(); ++i) {
    const CacheFit& level = c.caches[i];
    out += fmt::format(
        "{} {} ({}): the same GEMMs and streaming kernels with operands cycled over {}, those of which "
        "two copies fit; GEMM rms error {:.1f}%, streaming {:.1f}%",
        i ? ";" : "", size_label(static_cast<double>(level.bytes)), level.what,
        size_label(static_cast<double>(level.footprint)), 100 * level.gemm.rms_rel_error,
        100 * level.stream.rms_rel_error);
  }
  return out +
         ". A plan whose working set per device fits a level takes the smallest such level's rates, blended "
         "toward the next level's (memory's after the last) as far as the working set passes the span "
         "measured "
         "on its way to the level's size";
}

// The sources of the device's compute rates: the peak GEMM, the GEMM and attention fits.
nlohmann::json compute_sources(const Calibration& c, const std::string& provenance) {
  return {
      {"peak",
       fmt::format(
           "measured: a {0}^3 fp32 GEMM on the runtime's {1} backend ({2}), best of 3-20 calls{4} ({3})",
           c.backend == "cpu" ? 1024 : 4096, c.backend, c.backend == "cpu" ? "Eigen" : "cuBLAS, no TF32",
           provenance,
           c.device.peak(DType::kFp32) > c.peak_gemm_flops
               ? fmt::format(" at {:.1f} GFLOP/s; raised to the fastest GEMM rate of the sweep or its fits",
                             c.peak_gemm_flops / 1e9)
               : "")},
      {"efficiency.gemm",
       fmt::format(
           "fitted: {} GEMMs (forward and backward at the transformer shapes of calibrate.cpp's sizes_for) "
           "with "
           "weights, weight gradients and saved inputs cycled over {} (a forward's input and a backward's "
           "output gradient hot, forward outputs allocated per call), t = calls a + FLOPs/(peak*eff) + "
           "weight "
           "bytes/gemm_weight_(fwd|bwd), rms error {:.1f}%, worst {:.1f}%",
           std::count_if(c.points.begin(), c.points.end(),
                         [](const Measurement& m) { return m.kind == "gemm"; }),
           size_label(static_cast<double>(c.memory_footprint)), 100 * c.gemm.rms_rel_error,
           100 * c.gemm.max_rel_error)},
      {"efficiency.attention",
       fmt::format("fitted: fused attention forward+backward, {} shapes, the saved q, k, v and probabilities "
                   "cycled over {} (activations come back within their micro-batch), t = a + heads x "
                   "attention_head + "
                   "causal score elements x attention_score + 3.5 x half the full-square FLOPs (the model's "
                   "flash forward plus "
                   "its 2.5x backward) / (peak x eff); rms error {:.1f}%",
                   std::count_if(c.points.begin(), c.points.end(),
                                 [](const Measurement& m) { return m.kind == "attention"; }),
                   size_label(static_cast<double>(c.activation_footprint)), 100 * c.attention.rms_rel_error)},
      {"efficiency.attention_score",
       "fitted: the score-element term of the same fit (forward and backward together)"},
      {"efficiency.attention_head",
       "fitted: the per-head term of the same fit (forward and backward together)"},
      {"efficiency.attention_backward",
       "measured: the same pairs' time over their forwards' (each forward timed alone, as in the pair), less "
       "1, over "
       "every shape; the model splits the pair's time by it"},
      {"efficiency.activation_element",
       "fitted: the exponentials' term of the streaming fit (each cache level its own)"}};
}

// The sources of the device's memory rates, set-up times and executor overhead.
nlohmann::json memory_sources(const Calibration& c, const ClusterSpec& base) {
  return {
      {"memory_bandwidth",
       fmt::format(
           "fitted: residual, rmsnorm and swiglu (forward, their outputs allocated per call as new "
           "activations; rmsnorm and swiglu backward, their saved inputs cycled over {}), t = a + bytes/B + "
           "exponentials x activation_element (SwiGLU's, one per output each way); rms error {:.1f}%",
           size_label(static_cast<double>(c.memory_footprint)), 100 * c.stream.rms_rel_error)},
      {"efficiency.optimizer",
       fmt::format(
           "fitted: AdamW at {} parameter counts, its state (parameters, gradients, moments) cycled over {} "
           "(a step's other data evicts it), t = a + kAdamBytesPerParam x parameters/B; B / "
           "memory_bandwidth; "
           "rms error {:.1f}%",
           std::count_if(c.points.begin(), c.points.end(),
                         [](const Measurement& m) { return m.kind == "optimizer"; }),
           size_label(static_cast<double>(c.optimizer_footprint)), 100 * c.optimizer.rms_rel_error)},
      {"efficiency.gemm_setup",
       fmt::format("fitted: the intercept of the GEMM line over {} of operands",
                   size_label(static_cast<double>(c.caches.empty() ? c.memory_footprint
                                                                   : c.caches.front().footprint)))},
      {"efficiency.gemm_weight_fwd",
       "fitted: the forward points' weight-bytes term of the GEMM fit over " +
           size_label(static_cast<double>(c.memory_footprint)) +
           " (the BLAS's pass over the weight; each cache level's from its own fit)"},
      {"efficiency.gemm_weight_bwd",
       "fitted: the backward points' weight-bytes term of the same fits (data and weight gradients: the "
       "weight "
       "packed, its gradient read and written)"},
      {"efficiency.attention_setup",
       "fitted: half the attention line's intercept (a forward and backward pair)"},
      {"efficiency.kernel_overhead",
       "measured: the executor's cost per op, a training step of a micro model (2 layers, "
       "hidden 8) divided by its op count"},
      {"rest", "from the base profile " + base.node.accelerator().name}};
}

// The calibrated device with every rate's source.
nlohmann::json device_json(const Calibration& c, const ClusterSpec& base, const std::string& name,
                           const std::string& provenance) {
  nlohmann::json device = device_to_json(c.device);
  device["name"] = name + "-core";
  device["sources"] = compute_sources(c, provenance);
  device["sources"].update(memory_sources(c, base));
  if (!c.caches.empty()) device["sources"]["cache"] = cache_source(c);
  if (c.device.shared_memory.shared_by > 1)
    device["sources"]["shared_memory"] = fmt::format(
        "fitted: the memory-level GEMMs, streaming kernels and AdamW (as memory_bandwidth's, "
        "efficiency.gemm's and "
        "efficiency.optimizer's, which every one of the {} ranks measured at once) measured again on rank 0 "
        "while the "
        "other ranks waited at a barrier; GEMM rms error {:.1f}%, streaming {:.1f}%, AdamW {:.1f}%. A plan "
        "running fewer "
        "of the node's devices takes rates blended toward these",
        c.ranks, 100 * c.alone_gemm.rms_rel_error, 100 * c.alone_stream.rms_rel_error,
        100 * c.alone_optimizer.rms_rel_error);
  for (const auto& [p, rate] : c.precision_peaks)
    device["sources"][p == Precision::kBf16 ? "peak.bf16" : "peak.fp16"] =
        fmt::format("measured: the same GEMM with {} ({:.1f} GFLOP/s){}",
                    p == Precision::kBf16 ? "bf16 operands" : "TF32 operands", rate / 1e9,
                    p == Precision::kFp16 ? ", which the runtime's fp16 plans run; also the tf32 peak" : "");
  return device;
}

// The fitted fabric (the all-reduce's lines, the cold bandwidth, each other collective's own
// rates) with its sources.
void add_fitted_fabric(nlohmann::json& node, const Calibration& c) {
  node["fabric"]["bandwidth"] = fmt::format("{:.6g}GB/s", c.fabric.bandwidth / 1e9);
  node["fabric"]["latency"] = fmt::format("{:.6g}us", c.fabric.latency_s * 1e6);
  node["fabric"]["efficiency"] = 1.0;
  if (c.fabric.cold_bandwidth > 0)
    node["fabric"]["cold_bandwidth"] = fmt::format("{:.6g}GB/s", c.fabric.cold_bandwidth / 1e9);
  if (c.fabric.small_message_bytes > 0)
    node["fabric"]["small_messages"] = {
        {"below", size_label(c.fabric.small_message_bytes)},
        {"latency", fmt::format("{:.6g}us", c.fabric.small_message_latency_s * 1e6)}};
  node["sources"] = {
      {"fabric", fmt::format("fitted: {} all-reduce over {} ranks, 1 KiB-16 MiB, ring model "
                             "t = 2(n-1)*latency + 2(n-1)/n*S/B{}; rms error {:.1f}%",
                             c.backend == "cpu" ? "MPI" : "NCCL", c.ranks,
                             c.fabric.small_message_bytes > 0
                                 ? ", the latency its own below the first size of the slower protocol"
                                 : "",
                             100 * c.all_reduce.rms_rel_error)}};
  if (c.fabric.cold_bandwidth > 0)
    node["sources"]["fabric.cold_bandwidth"] = fmt::format(
        "fitted: MPI all-reduce over {} ranks, {}-{}, each rank first writing {} of other data (untimed), "
        "the same latency; rms error {:.1f}%",
        c.ranks, size_label(kColdCollectiveFrom), size_label(kFitCollective),
        size_label(static_cast<double>(c.optimizer_footprint)), 100 * c.all_reduce_cold.rms_rel_error);
  const std::string lib = c.backend == "cpu" ? "MPI" : "NCCL";
  for (const OwnCollective& own : kOwnCollectives) {
    const std::string coll(to_string(own.op));
    const CollectiveOp op = own.op;
    const CollectiveRates& r = *c.fabric.own_rates(op);
    if (r.bandwidth <= 0) continue;
    nlohmann::json& o = node["fabric"]["collectives"][coll];
    o["bandwidth"] = fmt::format("{:.6g}GB/s", r.bandwidth / 1e9);
    if (r.latency_s > 0) o["latency"] = fmt::format("{:.6g}us", r.latency_s * 1e6);
    if (r.small_message_latency_s > 0)
      o["small_message_latency"] = fmt::format("{:.6g}us", r.small_message_latency_s * 1e6);
    if (r.small_message_bytes > 0) o["small_messages_below"] = size_label(r.small_message_bytes);
    if (r.cold_bandwidth > 0) o["cold_bandwidth"] = fmt::format("{:.6g}GB/s", r.cold_bandwidth / 1e9);
    node["sources"][std::string("fabric.collectives.") + coll] = fmt::format(
        "fitted: {} {} over {} ranks, 1 KiB-16 MiB, t = steps*latency + {}{}; rms error {:.1f}%", lib, coll,
        op == CollectiveOp::kSendRecv ? 2 : c.ranks, own.model,
        r.small_message_bytes > 0
            ? ", split in two where its protocol changes (" + size_label(r.small_message_bytes) + ")"
        : r.small_message_latency_s > 0 ? ", the latency its own below the all-reduce's protocol split"
                                        : "",
        100 * (c.*own.fit).rms_rel_error);
    if (r.cold_bandwidth > 0)
      node["sources"][std::string("fabric.collectives.") + coll + ".cold_bandwidth"] = fmt::format(
          "fitted: {} {} over {} ranks, {}-{}, each rank first writing {} of other data (untimed), the "
          "same "
          "latency; rms error {:.1f}%",
          lib, coll, c.ranks, size_label(kColdCollectiveFrom), size_label(kFitCollective),
          size_label(static_cast<double>(c.optimizer_footprint)), 100 * c.reduce_scatter_cold.rms_rel_error);
  }
}

// The measured collective times themselves (LinkSpec::measured), replacing the base's.
void add_measured_times(nlohmann::json& node, const Calibration& c) {
  node["fabric"].erase("measured");  // the base's, if it had some
  if (!c.fabric.measured.empty()) {
    nlohmann::json& m = node["fabric"]["measured"];
    m["ranks"] = c.fabric.measured.ranks;
    for (CollectiveOp op : kMeasuredOps) {
      const std::vector<MeasuredTimes::Point>& v = *c.fabric.measured.of(op);
      if (v.empty()) continue;
      nlohmann::json a = nlohmann::json::array();
      for (const MeasuredTimes::Point& p : v)
        a.push_back({{"size", size_label(p.bytes)}, {"time", fmt::format("{:.6g}us", p.seconds * 1e6)}});
      m[std::string(to_string(op))] = std::move(a);
    }
    const bool in_step = std::any_of(c.points.begin(), c.points.end(),
                                     [](const Measurement& p) { return p.kind.ends_with(kInStepSuffix); });
    node["sources"]["fabric.measured"] = fmt::format(
        "measured: {} collectives over {} ranks (a send/recv: half a ping-pong between ranks 0 and 1), "
        "each size's "
        "median sample averaged over the ranks; {}up to {} measured twice and the faster kept; a plan's "
        "group of {} ranks "
        "inside the node takes them up to the largest size measured, interpolated in log size and log time "
        "(below the "
        "smallest, its time). Each size left out and interpolated from its neighbours: {} rms",
        c.backend == "cpu" ? "MPI" : "NCCL", c.ranks,
        in_step ? fmt::format("up to {} as a step calls them (before each call, untimed, each rank writes "
                              "as much other data "
                              "as its first cache level holds and rewrites the call's input; each call "
                              "timed alone, up to "
                              "64 KiB {} per sample), larger ones back to back; ",
                              size_label(kInStepUpTo), kCollectiveBackToBack)
                : fmt::format("up to 64 KiB {} calls in a row per sample; ", kCollectiveBackToBack),
        size_label(kRemeasureCollectiveUpTo), c.ranks, measured_times_summary(c.fabric.measured));
  }
}

// The host link fitted from a device backend's uploads and downloads.
void add_host_link(nlohmann::json& node, const Calibration& c, const ClusterSpec& base) {
  double smallest = 1e300, largest = 0;
  for (const Measurement& m : c.points)
    if (m.kind == "host_copy") {
      smallest = std::min(smallest, m.work);
      largest = std::max(largest, m.work);
    }
  node["host_link"]["kind"] = base.node.host_link.kind.empty() ? "pcie" : base.node.host_link.kind;
  node["host_link"]["bandwidth"] = fmt::format("{:.6g}GB/s", 1e-9 / c.host_copy.slope);
  node["host_link"]["latency"] = fmt::format("{:.6g}us", c.host_copy.intercept_s * 1e6);
  node["host_link"]["efficiency"] = 1.0;
  node["sources"]["host_link"] = fmt::format(
      "fitted: the {} backend's uploads and downloads of {}-{} between pageable host memory and the "
      "device (offload engines pin their buffers, which can run faster), t = latency + bytes/B over both "
      "directions; rms error {:.1f}%",
      c.backend, size_label(smallest), size_label(largest), 100 * c.host_copy.rms_rel_error);
}

// The measurements, and the peak GEMM that `run --predict` compares the machine's speed with.
nlohmann::json notes_json(const Calibration& c) {
  nlohmann::json pts = nlohmann::json::array();
  for (const auto& p : c.points)
    pts.push_back({{"kind", p.kind},
                   {"shape", p.shape},
                   {"work", p.work},
                   {"seconds", p.seconds},
                   {"fitted_s", p.fitted_s}});
  nlohmann::json notes = {{"measurements", pts}};
  if (c.peak_n > 0)  // for `run --predict`'s comparison of the machine's speed with the calibration's
    notes["peak_gemm"] = {{"n", c.peak_n},
                          {"backend", c.backend},
                          {"flops_per_s", c.peak_gemm_flops},
                          {"start_flops_per_s", c.peak_gemm_start_flops},
                          {"end_flops_per_s", c.peak_gemm_end_flops}};
  if (c.peak_n > 0 && c.small_gemm_start_s > 0 && c.small_gemm_end_s > 0)
    notes["peak_gemm"]["small"] = {{"shape", c.small_gemm},
                                   {"seconds", 0.5 * (c.small_gemm_start_s + c.small_gemm_end_s)},
                                   {"start_s", c.small_gemm_start_s},
                                   {"end_s", c.small_gemm_end_s}};
  return notes;
}
}  // namespace

nlohmann::json calibrated_cluster_json(const Calibration& c, const ClusterSpec& base, const std::string& name,
                                       const std::string& provenance) {
  nlohmann::json node = node_to_json(base.node);
  node["name"] = name;
  node["devices"] = nlohmann::json::array(
      {{{"device", device_json(c, base, name, provenance)}, {"count", base.node.accelerators()}}});
  if (c.fabric_measured) {
    add_fitted_fabric(node, c);
    add_measured_times(node, c);
  }
  if (c.host_copy.slope > 0) add_host_link(node, c, base);
  nlohmann::json cluster = cluster_to_json(base);
  cluster["name"] = name;
  cluster["description"] = "calibrated by `foresight calibrate` (" + provenance + ")";
  cluster["node"] = node;
  cluster["sources"] = {{"all", "measured on this machine: " + provenance}};
  cluster["notes"] = notes_json(c);
  return cluster;
}

}  // namespace foresight::runtime
