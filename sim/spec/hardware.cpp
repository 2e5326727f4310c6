// Device, node and cluster specs: JSON load/save with units inside values.
#include "sim/spec/hardware.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <utility>

#include "sim/spec/json_reader.h"
#include "sim/spec/presets.h"

namespace foresight {

using nlohmann::json;

namespace {

constexpr std::string_view kDTypeNames[kDTypeCount] = {"fp32", "tf32", "bf16", "fp16", "fp8", "int8"};

// {"all_gather": {"bandwidth": "25GB/s", "latency": "0.4us"}, ...}: collectives' own rates
// (CollectiveRates); each field is optional and, where given, positive.
void read_collective_rates(JsonReader r, LinkSpec& link) {
  r.reject_unknown_keys({"all_gather", "reduce_scatter", "send_recv"});
  for (CollectiveOp op : kOwnRateOps) {
    JsonReader o = r.object(to_string(op));
    if (o.node().empty()) continue;
    o.reject_unknown_keys(
        {"bandwidth", "latency", "small_message_latency", "small_messages_below", "cold_bandwidth"});
    CollectiveRates& c = *link.own_rates(op);
    const auto positive = [&](std::string_view key, Dimension dim) {
      const double v = o.quantity(key, dim, 0.0);
      if (o.has(key) && !(v > 0)) o.fail(key, "must be positive (leave it out to take the link's)");
      return v;
    };
    c.bandwidth = positive("bandwidth", Dimension::kBandwidth);
    c.latency_s = positive("latency", Dimension::kSeconds);
    c.small_message_latency_s = positive("small_message_latency", Dimension::kSeconds);
    c.small_message_bytes = positive("small_messages_below", Dimension::kBytes);
    c.cold_bandwidth = positive("cold_bandwidth", Dimension::kBandwidth);
    if (c.small_message_latency_s > 0 && link.small_message_bytes <= 0 && c.small_message_bytes <= 0)
      o.fail("small_message_latency",
             "neither the link nor the collective has a small-message size (\"small_messages\", "
             "\"small_messages_below\")");
    if (c.small_message_bytes > 0 && c.small_message_latency_s <= 0)
      o.fail("small_messages_below", "needs the collective's \"small_message_latency\"");
  }
}

// {"ranks": 2, "all_reduce": [{"size": "1KiB", "time": "0.33us"}, ...], ...}: MeasuredTimes.
void read_measured_times(JsonReader r, MeasuredTimes& m) {
  r.reject_unknown_keys({"ranks", "all_reduce", "all_gather", "reduce_scatter", "send_recv", "all_to_all"});
  m.ranks = static_cast<int>(r.required_integer("ranks", 2, 1 << 20));
  for (CollectiveOp op : kMeasuredOps) {
    const std::string_view key = to_string(op);
    std::vector<MeasuredTimes::Point>& pts = *m.of(op);
    for (JsonReader p : r.array(key)) {
      p.reject_unknown_keys({"size", "time"});
      const MeasuredTimes::Point pt{p.required_quantity("size", Dimension::kBytes),
                                    p.required_quantity("time", Dimension::kSeconds)};
      if (!p.ok()) return;
      if (!(pt.bytes > 0)) return p.fail("size", "must be positive");
      if (!(pt.seconds > 0)) return p.fail("time", "must be positive");
      if (!pts.empty() && pt.bytes <= pts.back().bytes)
        return p.fail("size", "sizes must increase (the previous one was " +
                                  format_quantity(pts.back().bytes, Dimension::kBytes) + ")");
      pts.push_back(pt);
    }
    if (pts.size() == 1) return r.fail(key, "needs two sizes at least to interpolate between");
  }
  if (r.ok() && m.empty()) r.fail("all_reduce", "no collective has measured times");
}

json measured_times_to_json(const MeasuredTimes& m) {
  json j = {{"ranks", m.ranks}};
  for (CollectiveOp op : kMeasuredOps) {
    const std::vector<MeasuredTimes::Point>& pts = *m.of(op);
    if (pts.empty()) continue;
    json a = json::array();
    for (const MeasuredTimes::Point& p : pts)
      a.push_back({{"size", format_quantity(p.bytes, Dimension::kBytes)},
                   {"time", format_quantity(p.seconds, Dimension::kSeconds)}});
    j[std::string(to_string(op))] = std::move(a);
  }
  return j;
}

// `fabric`: the node's fabric, the only link that may carry measured times.
void read_link(JsonReader r, LinkSpec& link, bool need_bandwidth, bool fabric = false) {
  r.reject_unknown_keys({"kind", "bandwidth", "latency", "efficiency", "small_messages", "cold_bandwidth",
                         "collectives", "measured"});
  if (r.has("measured")) {
    if (fabric)
      read_measured_times(r.object("measured"), link.measured);
    else
      r.fail("measured",
             "measured collective times belong to the node's fabric, where the groups inside a node run");
  }
  link.kind = r.string("kind", link.kind);
  link.bandwidth = need_bandwidth ? r.required_quantity("bandwidth", Dimension::kBandwidth)
                                  : r.quantity("bandwidth", Dimension::kBandwidth, link.bandwidth);
  link.latency_s = r.quantity("latency", Dimension::kSeconds, link.latency_s);
  link.efficiency = r.number("efficiency", link.efficiency, 0.01, 1.0);
  link.cold_bandwidth = r.quantity("cold_bandwidth", Dimension::kBandwidth, link.cold_bandwidth);
  // {"below": "8 KiB", "latency": "0.3us"}: the small-message protocol (LinkSpec::small_message_bytes).
  JsonReader small = r.object("small_messages");
  small.reject_unknown_keys({"below", "latency"});
  if (!small.node().empty()) {
    link.small_message_bytes = small.required_quantity("below", Dimension::kBytes);
    link.small_message_latency_s = small.required_quantity("latency", Dimension::kSeconds);
  }
  if (r.has("collectives")) read_collective_rates(r.object("collectives"), link);
}

json link_to_json(const LinkSpec& l) {
  json j = {{"kind", l.kind},
            {"bandwidth", format_quantity(l.bandwidth, Dimension::kBandwidth)},
            {"latency", format_quantity(l.latency_s, Dimension::kSeconds)},
            {"efficiency", l.efficiency}};
  if (l.small_message_bytes > 0)
    j["small_messages"] = {{"below", format_quantity(l.small_message_bytes, Dimension::kBytes)},
                           {"latency", format_quantity(l.small_message_latency_s, Dimension::kSeconds)}};
  if (l.cold_bandwidth > 0) j["cold_bandwidth"] = format_quantity(l.cold_bandwidth, Dimension::kBandwidth);
  for (CollectiveOp op : kOwnRateOps) {
    const CollectiveRates& c = *l.own_rates(op);
    if (c.empty()) continue;
    json o = json::object();
    if (c.bandwidth > 0) o["bandwidth"] = format_quantity(c.bandwidth, Dimension::kBandwidth);
    if (c.latency_s > 0) o["latency"] = format_quantity(c.latency_s, Dimension::kSeconds);
    if (c.small_message_latency_s > 0)
      o["small_message_latency"] = format_quantity(c.small_message_latency_s, Dimension::kSeconds);
    if (c.small_message_bytes > 0)
      o["small_messages_below"] = format_quantity(c.small_message_bytes, Dimension::kBytes);
    if (c.cold_bandwidth > 0) o["cold_bandwidth"] = format_quantity(c.cold_bandwidth, Dimension::kBandwidth);
    j["collectives"][std::string(to_string(op))] = std::move(o);
  }
  if (!l.measured.empty()) j["measured"] = measured_times_to_json(l.measured);
  return j;
}

template <typename Link>
auto own_rates_of(Link& l, CollectiveOp op) -> decltype(&l.all_gather) {
  switch (op) {
    case CollectiveOp::kAllGather:
      return &l.all_gather;
    case CollectiveOp::kReduceScatter:
      return &l.reduce_scatter;
    case CollectiveOp::kSendRecv:
      return &l.send_recv;
    default:
      return nullptr;
  }
}
}  // namespace

std::string_view to_string(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce:
      return "all_reduce";
    case CollectiveOp::kAllGather:
      return "all_gather";
    case CollectiveOp::kReduceScatter:
      return "reduce_scatter";
    case CollectiveOp::kAllToAll:
      return "all_to_all";
    case CollectiveOp::kSendRecv:
      return "send_recv";
    case CollectiveOp::kBroadcast:
      return "broadcast";
  }
  return "collective";
}

namespace {
template <typename Times>
auto measured_of(Times& m, CollectiveOp op) -> decltype(&m.all_reduce) {
  switch (op) {
    case CollectiveOp::kAllReduce:
      return &m.all_reduce;
    case CollectiveOp::kAllGather:
      return &m.all_gather;
    case CollectiveOp::kReduceScatter:
      return &m.reduce_scatter;
    case CollectiveOp::kSendRecv:
      return &m.send_recv;
    case CollectiveOp::kAllToAll:
      return &m.all_to_all;
    default:
      return nullptr;
  }
}
}  // namespace

const std::vector<MeasuredTimes::Point>* MeasuredTimes::of(CollectiveOp op) const {
  return measured_of(*this, op);
}
std::vector<MeasuredTimes::Point>* MeasuredTimes::of(CollectiveOp op) { return measured_of(*this, op); }

double MeasuredTimes::time(CollectiveOp op, int group_ranks, double bytes) const {
  const std::vector<Point>* pts = of(op);
  if (!pts || pts->size() < 2 || (op != CollectiveOp::kSendRecv && group_ranks != ranks)) return -1.0;
  if (!(bytes > 0) || bytes > pts->back().bytes) return -1.0;
  if (bytes <= pts->front().bytes) return pts->front().seconds;
  const auto hi =
      std::lower_bound(pts->begin(), pts->end(), bytes, [](const Point& p, double b) { return p.bytes < b; });
  return hi->bytes == bytes ? hi->seconds : between(*(hi - 1), *hi, bytes);
}

double MeasuredTimes::between(const Point& a, const Point& b, double bytes) {
  const double f = std::log(bytes / a.bytes) / std::log(b.bytes / a.bytes);
  return a.seconds * std::pow(b.seconds / a.seconds, f);
}

const CollectiveRates* LinkSpec::own_rates(CollectiveOp op) const { return own_rates_of(*this, op); }
CollectiveRates* LinkSpec::own_rates(CollectiveOp op) { return own_rates_of(*this, op); }

double LinkSpec::bandwidth_of(CollectiveOp op) const {
  const CollectiveRates* c = own_rates(op);
  return c && c->bandwidth > 0 ? c->bandwidth : bandwidth;
}

double LinkSpec::small_message_bytes_of(CollectiveOp op) const {
  const CollectiveRates* c = own_rates(op);
  return c && c->small_message_bytes > 0 ? c->small_message_bytes : small_message_bytes;
}

double LinkSpec::latency_of(CollectiveOp op, double bytes) const {
  const CollectiveRates* c = own_rates(op);
  if (!c) return latency_for(bytes);
  if (bytes < small_message_bytes_of(op)) {
    if (c->small_message_latency_s > 0) return c->small_message_latency_s;
    return small_message_latency_s > 0 ? small_message_latency_s : latency_s;
  }
  return c->latency_s > 0 ? c->latency_s : latency_s;
}

double LinkSpec::cold_rate_of(CollectiveOp op) const {
  const CollectiveRates* c = own_rates(op);
  return c && c->cold_bandwidth > 0 ? c->cold_bandwidth * efficiency : cold_rate();
}

namespace {

// A field that is either a preset name (string) or an inline object.
template <typename T, typename FromJson, typename Load>
Result<T> inline_or_preset(JsonReader& r, std::string_view key, FromJson from_json, Load load) {
  static const json kNull;
  auto it = r.node().is_object() ? r.node().find(std::string(key)) : r.node().end();
  const json& v = (r.node().is_object() && it != r.node().end()) ? *it : kNull;
  if (v.is_string()) {
    auto loaded = load(v.get<std::string>());
    if (!loaded)
      return loaded.error().with_context(r.file() + ": " + r.pointer() + "/" + json_pointer_escape(key));
    return loaded;
  }
  if (v.is_object()) return from_json(v, r.file(), r.pointer() + "/" + json_pointer_escape(key));
  r.fail(key, "expected a preset name or an object");
  return r.error();
}

}  // namespace

std::string to_string(DeviceKind k) {
  switch (k) {
    case DeviceKind::kGpu:
      return "gpu";
    case DeviceKind::kNpu:
      return "npu";
    case DeviceKind::kCpu:
      return "cpu";
  }
  return "gpu";
}

std::string to_string(DType d) { return std::string(kDTypeNames[static_cast<int>(d)]); }

const DeviceSpec& NodeSpec::accelerator() const {
  for (const auto& g : devices)
    if (g.device.kind != DeviceKind::kCpu) return g.device;
  return devices.front().device;
}

int NodeSpec::accelerators() const {
  for (const auto& g : devices)
    if (g.device.kind != DeviceKind::kCpu) return g.count;
  return devices.empty() ? 0 : devices.front().count;
}

int NodeSpec::accelerator_slots() const {
  int n = 0;
  for (const auto& g : devices)
    if (g.device.kind != DeviceKind::kCpu) n += g.count;
  return n > 0 ? n : accelerators();
}

int NodeSpec::accelerator_group(const std::string& device_name) const {
  for (std::size_t i = 0; i < devices.size(); ++i)
    if (devices[i].device.kind != DeviceKind::kCpu && devices[i].device.name == device_name)
      return static_cast<int>(i);
  return -1;
}

ClusterSpec cluster_view(const ClusterSpec& c, int group) {
  ClusterSpec v = c;
  if (group > 0 && group < static_cast<int>(v.node.devices.size()))
    std::rotate(v.node.devices.begin(), v.node.devices.begin() + group, v.node.devices.begin() + group + 1);
  return v;
}

namespace {
// The device's sets of rates beside its own: each cache level's and, where the node's devices
// share their memory, those of one device alone.
std::vector<CacheLevel*> rate_sets(DeviceSpec& d) {
  std::vector<CacheLevel*> out;
  for (CacheLevel& c : d.caches) out.push_back(&c);
  if (d.shared_memory.shared_by > 1) out.push_back(&d.shared_memory.alone);
  return out;
}

// A set of rates' fields (a cache level's, one device's alone), read from `r` into `c`; the GEMM
// efficiency defaults to the device's.
void read_rates(JsonReader& r, CacheLevel& c, double gemm_efficiency) {
  c.gemm_efficiency = r.number("gemm_efficiency", gemm_efficiency, 0.01, 1.0);
  c.memory_bandwidth = r.required_quantity("memory_bandwidth", Dimension::kBandwidth);
  c.gemm_weight_fwd_bandwidth = r.quantity("gemm_weight_fwd", Dimension::kBandwidth, 0.0);
  c.gemm_weight_bwd_bandwidth = r.quantity("gemm_weight_bwd", Dimension::kBandwidth, 0.0);
  c.activation_element_s = r.quantity("activation_element", Dimension::kSeconds, 0.0);
  c.optimizer_bandwidth = r.quantity("optimizer_bandwidth", Dimension::kBandwidth, 0.0);
  if (r.ok() && c.memory_bandwidth <= 0) r.fail("memory_bandwidth", "must be positive");
}
constexpr std::array<std::string_view, 6> kRateKeys = {"gemm_efficiency",    "memory_bandwidth",
                                                       "gemm_weight_fwd",    "gemm_weight_bwd",
                                                       "activation_element", "optimizer_bandwidth"};

// The same fields as JSON (those that are 0 left out).
json rates_to_json(const CacheLevel& c) {
  json j = {{"gemm_efficiency", c.gemm_efficiency},
            {"memory_bandwidth", format_quantity(c.memory_bandwidth, Dimension::kBandwidth)}};
  if (c.gemm_weight_fwd_bandwidth > 0)
    j["gemm_weight_fwd"] = format_quantity(c.gemm_weight_fwd_bandwidth, Dimension::kBandwidth);
  if (c.gemm_weight_bwd_bandwidth > 0)
    j["gemm_weight_bwd"] = format_quantity(c.gemm_weight_bwd_bandwidth, Dimension::kBandwidth);
  if (c.activation_element_s > 0)
    j["activation_element"] = format_quantity(c.activation_element_s, Dimension::kSeconds);
  if (c.optimizer_bandwidth > 0)
    j["optimizer_bandwidth"] = format_quantity(c.optimizer_bandwidth, Dimension::kBandwidth);
  return j;
}
}  // namespace

namespace {
// Ceiling and floor of a positive count below 2^53, inline: std::ceil and std::floor are library
// calls on x86-64 without SSE4.1, and the shape model takes a dozen per GEMM, several GEMMs per plan.
inline double floor_of(double x) { return static_cast<double>(static_cast<std::int64_t>(x)); }
inline double ceil_of(double x) {
  const double f = floor_of(x);
  return f < x ? f + 1 : f;
}
}  // namespace

double DeviceSpec::gemm_shape_efficiency(double m, double n, double k, double groups, bool fp8) const {
  if (gemm_tile.m <= 0 || sm_count <= 0 || !(m > 0 && n > 0 && k > 0 && groups > 0)) return 1.0;
  const double sms = sm_count, step = gemm_tile.k * (fp8 ? 2.0 : 1.0), fixed = gemm_tile.fixed_k_steps;
  // The tiles are spread evenly over the SMs: the library balances them (cuBLAS picks among tile
  // shapes, and on Hopper splits tiles' main loops across SMs, stream-K), so a last wave's idle SMs
  // are not charged; a problem with fewer tiles than SMs splits its reduction (split-K), each slice
  // at least this many main-loop steps deep.
  constexpr double kMinStepsPerSplit = 4;
  const double k_steps = k / step, k_share = k_steps / (ceil_of(k_steps) + fixed);
  // The library runs the problem or its transpose (C^T = B^T A^T): the better of the two. A
  // dimension narrower than the tile gets a narrower kernel, one tile rounded up to the MMA
  // instructions' 16.
  const double tile_a = gemm_tile.m, tile_b = gemm_tile.n, inv_a = 1 / tile_a, inv_b = 1 / tile_b;
  auto cover = [](double dim, double tile, double inv) {  // the tiles' span over `dim`, and their count
    if (dim < tile) return std::pair{16 * ceil_of(dim * (1.0 / 16)), 1.0};
    double count = ceil_of(dim * inv);
    if ((count - 1) * tile >= dim) count -= 1;  // dim * inv rounded up past a whole count
    return std::pair{count * tile, count};
  };
  auto with_tile = [&](std::pair<double, double> rows, std::pair<double, double> cols) {
    const double tiles = groups * rows.second * cols.second;
    const double filled = m * n / (rows.first * cols.first);  // the output's share of the tiles
    if (tiles >= sms) return filled * k_share;
    const double split =
        std::max(1.0, std::min(floor_of(sms / tiles), floor_of(k_steps / kMinStepsPerSplit)));
    // tiles * split slices on as many SMs (at most one wave), each ceil(k_steps / split) steps deep
    return filled * tiles * k_steps / (sms * (ceil_of(k_steps / split) + fixed));
  };
  return std::min(1.0, std::max(with_tile(cover(m, tile_a, inv_a), cover(n, tile_b, inv_b)),
                                with_tile(cover(m, tile_b, inv_b), cover(n, tile_a, inv_a))));
}

double DeviceSpec::attention_shape_efficiency(double q_len, double kv_len, double heads, double calls) const {
  if (attention_tile.q <= 0 || sm_count <= 0 || !(q_len > 0 && kv_len > 0 && heads > 0 && calls > 0))
    return 1.0;
  const double bq = attention_tile.q, bk = attention_tile.kv, fixed = calls * attention_tile.fixed_kv_steps;
  const double rows = ceil_of(q_len / bq), cols = ceil_of(kv_len / bk);
  // Causal: a block row runs the key blocks up to its last query, half of them on average, and the
  // blocks the diagonal cuts in full (bq / bk of them per row, half wasted on average). The work is
  // the causal half of the scores, the model's FLOP count, in block-iteration units.
  const double steps = rows * (cols + bq / bk) / 2;
  const double useful = 0.5 * q_len * kv_len / (bq * bk);
  const double sms = sm_count;
  // The block rows spread evenly over the SMs, but none finishes before its own loop: with few
  // rows (a short sequence, few heads per tensor-parallel rank) the longest one sets the time.
  const double time = std::max(heads * (steps + rows * fixed) / sms, cols + fixed);
  return std::min(1.0, heads * useful / sms / time);
}

double DeviceSpec::attention_head_dim_factor(double head_dim, double efficiency, double peak,
                                             bool overlap) const {
  if (special_function_rate <= 0 || !(head_dim > 0 && efficiency > 0 && peak > 0)) return 1.0;
  // Per score element, forward and backward together: 14 x head_dim multiply FLOPs (Q.K^T and P.V
  // forward; Q.K^T again, dV, dP, dQ and dK backward) and two exponentials. `efficiency` was
  // measured at head dimension 128 with the exponentials included.
  constexpr double kReference = 128;
  const double at_reference = 14 * kReference / (efficiency * peak), exps = 2 / special_function_rate;
  const double scale = head_dim / kReference;
  const double t =
      overlap ? std::max(at_reference * scale, exps) : std::max(0.0, at_reference - exps) * scale + exps;
  return t / (at_reference * scale);
}

DeviceSpec device_at_speed(DeviceSpec d, double factor) {
  for (double& f : d.peak_flops) f *= factor;
  d.memory_bandwidth *= factor;
  d.special_function_rate *= factor;
  d.gemm_weight_fwd_bandwidth *= factor;
  d.gemm_weight_bwd_bandwidth *= factor;
  for (double* t : {&d.kernel_overhead_s, &d.graph_kernel_overhead_s, &d.gemm_setup_s, &d.attention_setup_s,
                    &d.attention_score_s, &d.attention_head_s, &d.activation_element_s})
    *t /= factor;
  for (CacheLevel* c : rate_sets(d)) {
    c->memory_bandwidth *= factor;
    c->gemm_weight_fwd_bandwidth *= factor;
    c->gemm_weight_bwd_bandwidth *= factor;
    c->optimizer_bandwidth *= factor;
    c->activation_element_s /= factor;
  }
  return d;
}

double NodeSpec::nic_bandwidth_per_device() const {
  const int n = accelerators();
  return n > 0 ? nics * nic.bandwidth * nic.efficiency / n : 0.0;
}

namespace {

// The device's /efficiency: the fitted rates and fixed costs its kernels are priced with.
void read_efficiency(JsonReader& r, DeviceSpec& d) {
  JsonReader eff = r.object("efficiency");
  eff.reject_unknown_keys({"gemm", "gemm_fp8", "attention", "memory", "kernel_overhead",
                           "graph_kernel_overhead", "host_op", "gemm_setup", "attention_setup",
                           "gemm_weight_fwd", "gemm_weight_bwd", "optimizer", "attention_score",
                           "activation_element", "attention_head", "attention_backward", "attention_flash2"});
  d.gemm_efficiency = eff.number("gemm", d.gemm_efficiency, 0.01, 1.0);
  if (eff.has("gemm_fp8")) d.gemm_fp8_efficiency = eff.number("gemm_fp8", 0.0, 0.01, 1.0);
  d.attention_efficiency = eff.number("attention", d.attention_efficiency, 0.01, 1.0);
  if (eff.has("attention_flash2"))
    d.attention_flash2_efficiency = eff.number("attention_flash2", 0.0, 0.01, 1.0);
  d.memory_efficiency = eff.number("memory", d.memory_efficiency, 0.01, 1.0);
  d.optimizer_efficiency =
      eff.number("optimizer", 1.0, DeviceSpec::kOptimizerEfficiencyMin, DeviceSpec::kOptimizerEfficiencyMax);
  d.kernel_overhead_s = eff.quantity("kernel_overhead", Dimension::kSeconds, d.kernel_overhead_s);
  d.graph_kernel_overhead_s =
      eff.quantity("graph_kernel_overhead", Dimension::kSeconds, d.graph_kernel_overhead_s);
  d.host_op_s = eff.quantity("host_op", Dimension::kSeconds, 0.0);
  d.gemm_setup_s = eff.quantity("gemm_setup", Dimension::kSeconds, 0.0);
  d.attention_setup_s = eff.quantity("attention_setup", Dimension::kSeconds, 0.0);
  d.attention_score_s = eff.quantity("attention_score", Dimension::kSeconds, 0.0);
  d.attention_head_s = eff.quantity("attention_head", Dimension::kSeconds, 0.0);
  d.attention_backward_ratio = eff.number("attention_backward", 0.0, 0.0, 10.0);
  d.activation_element_s = eff.quantity("activation_element", Dimension::kSeconds, 0.0);
  d.gemm_weight_fwd_bandwidth = eff.quantity("gemm_weight_fwd", Dimension::kBandwidth, 0.0);
  d.gemm_weight_bwd_bandwidth = eff.quantity("gemm_weight_bwd", Dimension::kBandwidth, 0.0);
}

// The device's /cache: one level (an object) or several (an array, smallest first).
void read_caches(JsonReader& r, DeviceSpec& d) {
  auto level = [&](JsonReader cache) {
    std::vector<std::string_view> keys{"size", "span"};
    keys.insert(keys.end(), kRateKeys.begin(), kRateKeys.end());
    cache.reject_unknown_keys(keys);
    CacheLevel c;
    c.bytes = cache.required_quantity("size", Dimension::kBytes);
    read_rates(cache, c, d.gemm_efficiency);
    c.span = cache.quantity("span", Dimension::kBytes, 0.0);
    if (r.ok() && c.bytes <= 0) cache.fail("size", "must be positive");
    if (r.ok() && (c.span < 0 || c.span > c.bytes))
      cache.fail("span", "must be between 0 and the level's size");
    if (r.ok() && !d.caches.empty() && c.bytes <= d.caches.back().bytes)
      cache.fail("size", "must be larger than the level before (levels go smallest first)");
    d.caches.push_back(c);
  };
  if (r.node()["cache"].is_array())
    for (JsonReader& cache : r.array("cache")) level(cache);
  else
    level(r.object("cache"));
}

// The device's /shared_memory: {"shared_by": N, "alone": {rates}}: the memory rates above are one
// device's while N run at once; "alone" holds them measured with one device running
// (DeviceSpec::shared_memory).
void read_shared_memory(JsonReader& r, DeviceSpec& d) {
  JsonReader sm = r.object("shared_memory");
  sm.reject_unknown_keys({"shared_by", "alone"});
  d.shared_memory.shared_by = static_cast<int>(sm.required_integer("shared_by", 2, 1 << 20));
  JsonReader alone = sm.object("alone");
  alone.reject_unknown_keys(kRateKeys);
  if (r.ok() && !sm.has("alone"))
    sm.fail("alone", "is required: the memory rates of one device running alone");
  if (r.ok()) read_rates(alone, d.shared_memory.alone, d.gemm_efficiency);
}

}  // namespace

Result<DeviceSpec> device_from_json(const json& doc, const std::string& file, const std::string& pointer) {
  JsonReader r(doc, file, pointer);
  r.reject_unknown_keys({"name", "vendor", "kind", "peak", "memory", "memory_bandwidth", "efficiency",
                         "memory_reserved", "power", "price_per_hour_usd", "reference_cluster", "cache",
                         "shared_memory", "sm_count", "gemm_tile", "attention_tile", "special_functions",
                         "attention_exp_overlap"});
  DeviceSpec d;
  d.name = r.required_string("name");
  d.vendor = r.string("vendor", "");
  const std::string kind = r.choice("kind", {"gpu", "npu", "cpu"}, "gpu");
  d.kind = kind == "cpu" ? DeviceKind::kCpu : kind == "npu" ? DeviceKind::kNpu : DeviceKind::kGpu;
  JsonReader peak = r.object("peak");
  peak.reject_unknown_keys({"fp32", "tf32", "bf16", "fp16", "fp8", "int8"});
  for (int i = 0; i < kDTypeCount; ++i)
    d.peak_flops[i] = peak.quantity(kDTypeNames[i], Dimension::kFlopRate, 0.0);
  if (r.ok() && d.peak(DType::kBf16) == 0 && d.peak(DType::kFp16) == 0 && d.peak(DType::kFp32) == 0)
    r.fail("peak", "needs at least one of fp32, bf16, fp16");
  d.memory_bytes = r.required_quantity("memory", Dimension::kBytes);
  d.memory_bandwidth = r.required_quantity("memory_bandwidth", Dimension::kBandwidth);
  read_efficiency(r, d);
  d.memory_reserved_bytes = r.quantity("memory_reserved", Dimension::kBytes, 0.0);
  d.sm_count = static_cast<int>(r.integer("sm_count", 0, 0, 1 << 16));
  if (r.has("gemm_tile")) {
    JsonReader t = r.object("gemm_tile");
    t.reject_unknown_keys({"m", "n", "k", "fixed_k_steps"});
    d.gemm_tile.m = static_cast<int>(t.integer("m", 0, 1, 4096));
    d.gemm_tile.n = static_cast<int>(t.integer("n", 0, 1, 4096));
    d.gemm_tile.k = static_cast<int>(t.integer("k", 0, 1, 4096));
    d.gemm_tile.fixed_k_steps = t.number("fixed_k_steps", 0.0, 0.0, 1000.0);
    if (r.ok() && (d.gemm_tile.m == 0 || d.gemm_tile.n == 0 || d.gemm_tile.k == 0))
      r.fail("gemm_tile", "needs m, n and k (the GEMM kernels' tile, in elements)");
    if (r.ok() && d.sm_count == 0)
      r.fail("gemm_tile", "needs sm_count (the tiles run in waves over the SMs)");
  }
  if (r.has("attention_tile")) {
    JsonReader t = r.object("attention_tile");
    t.reject_unknown_keys({"q", "kv", "fixed_kv_steps"});
    d.attention_tile.q = static_cast<int>(t.integer("q", 0, 1, 4096));
    d.attention_tile.kv = static_cast<int>(t.integer("kv", 0, 1, 4096));
    d.attention_tile.fixed_kv_steps = t.number("fixed_kv_steps", 0.0, 0.0, 1000.0);
    if (r.ok() && (d.attention_tile.q == 0 || d.attention_tile.kv == 0))
      r.fail("attention_tile",
             "needs q and kv (the flash-attention kernels' query and key blocks, in tokens)");
    if (r.ok() && d.sm_count == 0)
      r.fail("attention_tile", "needs sm_count (the block rows run over the SMs)");
  }
  d.special_function_rate = r.quantity("special_functions", Dimension::kFlopRate, 0.0);
  d.attention_exp_overlap = r.boolean("attention_exp_overlap", false);
  if (r.has("cache")) read_caches(r, d);
  if (r.has("shared_memory")) read_shared_memory(r, d);
  JsonReader power = r.object("power");
  power.reject_unknown_keys({"load", "idle"});
  d.power_load_w = power.quantity("load", Dimension::kPower, 0.0);
  d.power_idle_w = power.quantity("idle", Dimension::kPower, 0.0);
  d.price_per_hour_usd = r.number("price_per_hour_usd", 0.0, 0.0, 1e6);
  d.reference_cluster = r.string("reference_cluster", "");
  if (r.ok() && d.memory_reserved_bytes >= d.memory_bytes)
    r.fail("memory_reserved", "must be smaller than memory");
  if (!r.ok()) return r.error();
  return d;
}

json device_to_json(const DeviceSpec& d) {
  json peak = json::object();
  for (int i = 0; i < kDTypeCount; ++i)
    if (d.peak_flops[i] > 0)
      peak[std::string(kDTypeNames[i])] = format_quantity(d.peak_flops[i], Dimension::kFlopRate);
  json j = {{"name", d.name},
            {"vendor", d.vendor},
            {"kind", to_string(d.kind)},
            {"peak", peak},
            {"memory", format_quantity(d.memory_bytes, Dimension::kBytes)},
            {"memory_bandwidth", format_quantity(d.memory_bandwidth, Dimension::kBandwidth)},
            {"efficiency",
             {{"gemm", d.gemm_efficiency},
              {"attention", d.attention_efficiency},
              {"memory", d.memory_efficiency},
              {"kernel_overhead", format_quantity(d.kernel_overhead_s, Dimension::kSeconds)},
              {"graph_kernel_overhead", format_quantity(d.graph_kernel_overhead_s, Dimension::kSeconds)},
              {"host_op", format_quantity(d.host_op_s, Dimension::kSeconds)},
              {"gemm_setup", format_quantity(d.gemm_setup_s, Dimension::kSeconds)},
              {"attention_setup", format_quantity(d.attention_setup_s, Dimension::kSeconds)}}},
            {"memory_reserved", format_quantity(d.memory_reserved_bytes, Dimension::kBytes)},
            {"power",
             {{"load", format_quantity(d.power_load_w, Dimension::kPower)},
              {"idle", format_quantity(d.power_idle_w, Dimension::kPower)}}},
            {"price_per_hour_usd", d.price_per_hour_usd}};
  if (!d.reference_cluster.empty()) j["reference_cluster"] = d.reference_cluster;
  if (d.sm_count > 0) j["sm_count"] = d.sm_count;
  if (d.gemm_tile.m > 0)
    j["gemm_tile"] = {{"m", d.gemm_tile.m},
                      {"n", d.gemm_tile.n},
                      {"k", d.gemm_tile.k},
                      {"fixed_k_steps", d.gemm_tile.fixed_k_steps}};
  if (d.attention_tile.q > 0)
    j["attention_tile"] = {{"q", d.attention_tile.q},
                           {"kv", d.attention_tile.kv},
                           {"fixed_kv_steps", d.attention_tile.fixed_kv_steps}};
  if (d.special_function_rate > 0)
    j["special_functions"] = format_quantity(d.special_function_rate, Dimension::kFlopRate);
  if (d.attention_exp_overlap) j["attention_exp_overlap"] = true;
  if (d.optimizer_efficiency != 1.0) j["efficiency"]["optimizer"] = d.optimizer_efficiency;
  if (d.gemm_fp8_efficiency > 0) j["efficiency"]["gemm_fp8"] = d.gemm_fp8_efficiency;
  if (d.attention_flash2_efficiency > 0) j["efficiency"]["attention_flash2"] = d.attention_flash2_efficiency;
  if (d.attention_score_s > 0)
    j["efficiency"]["attention_score"] = format_quantity(d.attention_score_s, Dimension::kSeconds);
  if (d.attention_head_s > 0)
    j["efficiency"]["attention_head"] = format_quantity(d.attention_head_s, Dimension::kSeconds);
  if (d.attention_backward_ratio > 0) j["efficiency"]["attention_backward"] = d.attention_backward_ratio;
  if (d.activation_element_s > 0)
    j["efficiency"]["activation_element"] = format_quantity(d.activation_element_s, Dimension::kSeconds);
  if (d.gemm_weight_fwd_bandwidth > 0)
    j["efficiency"]["gemm_weight_fwd"] = format_quantity(d.gemm_weight_fwd_bandwidth, Dimension::kBandwidth);
  if (d.gemm_weight_bwd_bandwidth > 0)
    j["efficiency"]["gemm_weight_bwd"] = format_quantity(d.gemm_weight_bwd_bandwidth, Dimension::kBandwidth);
  json caches = json::array();
  for (const CacheLevel& c : d.caches) {
    json level = rates_to_json(c);
    level["size"] = format_quantity(c.bytes, Dimension::kBytes);
    if (c.span > 0 && c.span < c.bytes) level["span"] = format_quantity(c.span, Dimension::kBytes);
    caches.push_back(std::move(level));
  }
  if (caches.size() == 1)
    j["cache"] = caches[0];
  else if (!caches.empty())
    j["cache"] = std::move(caches);
  if (d.shared_memory.shared_by > 1)
    j["shared_memory"] = {{"shared_by", d.shared_memory.shared_by},
                          {"alone", rates_to_json(d.shared_memory.alone)}};
  return j;
}

Result<NodeSpec> node_from_json(const json& doc, const std::string& file, const std::string& pointer) {
  JsonReader r(doc, file, pointer);
  r.reject_unknown_keys({"name", "devices", "fabric", "in_switch_reduction", "in_switch_efficiency",
                         "host_link", "host_memory", "nics", "nic", "collective_sms"});
  NodeSpec n;
  n.name = r.string("name", "node");
  auto groups = r.array("devices");
  if (r.ok() && groups.empty()) r.fail("devices", "a node needs at least one device group");
  for (auto& g : groups) {
    if (!r.ok()) break;
    g.reject_unknown_keys({"device", "count"});
    DeviceGroup group;
    group.count = static_cast<int>(g.required_integer("count", 1, 1 << 16));
    if (!g.has("device")) {
      g.fail("device", "missing required field (a device preset name or object)");
      break;
    }
    auto dev = inline_or_preset<DeviceSpec>(g, "device", device_from_json, load_device);
    if (!dev) return dev.error();
    group.device = std::move(dev).value();
    n.devices.push_back(std::move(group));
  }
  read_link(r.object("fabric"), n.fabric, true, /*fabric=*/true);
  n.in_switch_reduction = r.boolean("in_switch_reduction", false);
  n.in_switch_efficiency = r.number("in_switch_efficiency", 0.0, 0.0, 1.0);
  if (r.ok() && n.in_switch_reduction && n.in_switch_efficiency <= 0)
    r.fail("in_switch_efficiency",
           "required (a measured NVLS busbw / (2(n-1)/n x line rate)) when in_switch_reduction is true");
  if (r.has("host_link")) read_link(r.object("host_link"), n.host_link, true);
  n.host_memory_bytes = r.quantity("host_memory", Dimension::kBytes, 0.0);
  n.nics = static_cast<int>(r.integer("nics", 0, 0, 1024));
  if (r.has("nic")) read_link(r.object("nic"), n.nic, true);
  if (r.ok() && n.nics > 0 && n.nic.bandwidth <= 0) r.fail("nic", "nics > 0 needs a nic with a bandwidth");
  n.collective_sms = static_cast<int>(r.integer("collective_sms", 0, 0, 1 << 16));
  if (r.ok() && n.collective_sms > 0)
    for (const auto& g : n.devices)
      if (g.device.sm_count > 0 && n.collective_sms >= g.device.sm_count) {
        r.fail("collective_sms", std::to_string(n.collective_sms) + " leaves no SM of device " +
                                     g.device.name + " (" + std::to_string(g.device.sm_count) +
                                     " SMs) to compute");
        break;
      }
  if (!r.ok()) return r.error();
  return n;
}

json node_to_json(const NodeSpec& n) {
  json devices = json::array();
  for (const auto& g : n.devices)
    devices.push_back({{"device", device_to_json(g.device)}, {"count", g.count}});
  json j = {{"name", n.name},
            {"devices", devices},
            {"fabric", link_to_json(n.fabric)},
            {"in_switch_reduction", n.in_switch_reduction},
            {"in_switch_efficiency", n.in_switch_efficiency},
            {"host_memory", format_quantity(n.host_memory_bytes, Dimension::kBytes)},
            {"nics", n.nics}};
  if (n.host_link.bandwidth > 0) j["host_link"] = link_to_json(n.host_link);
  if (n.nics > 0) j["nic"] = link_to_json(n.nic);
  if (n.collective_sms > 0) j["collective_sms"] = n.collective_sms;
  return j;
}

Result<ClusterSpec> cluster_from_json(const json& doc, const std::string& file, const std::string& pointer) {
  JsonReader r(doc, file, pointer);
  r.reject_unknown_keys({"name", "node", "nodes", "tiers", "storage_bandwidth"});
  ClusterSpec c;
  c.name = r.required_string("name");
  c.description = r.string("description", "");
  if (!r.ok()) return r.error();
  if (!r.has("node")) {
    r.fail("node", "missing required field (a node preset name or object)");
    return r.error();
  }
  auto node = inline_or_preset<NodeSpec>(r, "node", node_from_json, load_node);
  if (!node) return node.error();
  c.node = std::move(node).value();
  c.nodes = static_cast<int>(r.integer("nodes", 1, 1, 1 << 24));
  if (r.ok() && 1.0 * c.nodes * c.node.accelerators() > (1 << 24))  // total_accelerators() is an int
    r.fail("nodes", "nodes * accelerators per node exceeds " + std::to_string(1 << 24));
  int previous_span = 1;
  for (auto& t : r.array("tiers")) {
    if (!r.ok()) break;
    t.reject_unknown_keys({"name", "kind", "topology", "dims", "link_bandwidth", "span_nodes",
                           "bandwidth_per_node", "oversubscription", "latency"});
    NetworkTier tier;
    tier.name = t.required_string("name");
    tier.kind = t.choice("kind", {"infiniband", "ethernet", "roce", "omnipath"}, "infiniband");
    tier.span_nodes = static_cast<int>(t.integer("span_nodes", 0, 0, 1 << 24));
    tier.topology = t.choice("topology", {"tree", "rail", "torus"}, "tree");
    if (t.ok() && tier.topology == "rail" && !c.tiers.empty())
      t.fail("topology", "rail-optimised leaves (\"rail\") are a first-tier layout");
    if (tier.topology == "torus") {
      for (JsonReader d : t.array("dims")) {
        if (!d.node().is_number_integer() || d.node().get<long long>() < 1 ||
            d.node().get<long long>() > 4096) {
          d.fail("", "expected a positive integer torus dimension");
          break;
        }
        tier.dims.push_back(d.node().get<int>());
      }
      if (t.ok() && (tier.dims.size() < 1 || tier.dims.size() > 3))
        t.fail("dims", "a torus needs 1 to 3 dimensions");
      tier.link_bandwidth = t.required_quantity("link_bandwidth", Dimension::kBandwidth);
      if (t.ok() && c.tiers.size() > 0) t.fail("topology", "a torus must be the only (first) network tier");
    }
    tier.bandwidth_per_node = t.quantity("bandwidth_per_node", Dimension::kBandwidth, 0.0);
    tier.oversubscription = t.number("oversubscription", 1.0, 1.0, 1024.0);
    tier.latency_s = t.quantity("latency", Dimension::kSeconds, 0.0);
    if (t.ok() && tier.span_nodes != 0 && tier.span_nodes <= previous_span)
      t.fail("span_nodes", "tiers must be listed from the lowest (smallest span) up");
    if (tier.span_nodes != 0) previous_span = tier.span_nodes;
    c.tiers.push_back(tier);
  }
  c.storage_bandwidth = r.quantity("storage_bandwidth", Dimension::kBandwidth, 0.0);
  if (r.ok() && c.nodes > 1 && c.tiers.empty())
    r.fail("tiers", "a cluster of more than one node needs at least one network tier");
  if (r.ok() && c.nodes > 1 && c.node.nics == 0)
    r.fail("node", "a cluster of more than one node needs nodes with NICs (nics, nic)");
  if (!r.ok()) return r.error();
  return c;
}

json cluster_to_json(const ClusterSpec& c) {
  json tiers = json::array();
  for (const auto& t : c.tiers) {
    json tj = {{"name", t.name},
               {"kind", t.kind},
               {"topology", t.topology},
               {"span_nodes", t.span_nodes},
               {"oversubscription", t.oversubscription},
               {"latency", format_quantity(t.latency_s, Dimension::kSeconds)}};
    if (t.bandwidth_per_node > 0)
      tj["bandwidth_per_node"] = format_quantity(t.bandwidth_per_node, Dimension::kBandwidth);
    if (t.topology == "torus") {
      tj["dims"] = t.dims;
      tj["link_bandwidth"] = format_quantity(t.link_bandwidth, Dimension::kBandwidth);
    }
    tiers.push_back(tj);
  }
  json j = {{"name", c.name}, {"node", node_to_json(c.node)}, {"nodes", c.nodes}, {"tiers", tiers}};
  if (!c.description.empty()) j["description"] = c.description;
  if (c.storage_bandwidth > 0)
    j["storage_bandwidth"] = format_quantity(c.storage_bandwidth, Dimension::kBandwidth);
  return j;
}

namespace {
template <typename T, typename FromJson>
Result<T> load_spec(PresetKind kind, const std::string& name_or_path, FromJson from_json) {
  FS_ASSIGN_OR_RETURN(SpecText src, resolve_spec(kind, name_or_path));
  FS_ASSIGN_OR_RETURN(json doc, parse_json_text(src.text, src.file));
  return from_json(doc, src.file, "");
}
}  // namespace

Result<DeviceSpec> load_device(const std::string& p) {
  return load_spec<DeviceSpec>(PresetKind::kDevice, p, device_from_json);
}
Result<NodeSpec> load_node(const std::string& p) {
  return load_spec<NodeSpec>(PresetKind::kNode, p, node_from_json);
}
Result<ClusterSpec> load_cluster(const std::string& p) {
  return load_spec<ClusterSpec>(PresetKind::kCluster, p, cluster_from_json);
}

Status check_cluster_shape(const ClusterSpec& c, const std::string& context) {
  for (std::size_t i = 0; i < c.tiers.size(); ++i) {
    const NetworkTier& t = c.tiers[i];
    if (t.topology != "torus") continue;
    long long product = 1;
    std::string dims;
    for (int d : t.dims) {
      product *= d;
      if (!dims.empty()) dims.push_back('x');
      dims.append(std::to_string(d));
    }
    if (product != c.nodes)
      return Error(context + ": /tiers/" + std::to_string(i) + "/dims: " + dims + " = " +
                   std::to_string(product) + " nodes, but the cluster has " + std::to_string(c.nodes));
  }
  return Status::Ok();
}

Status resize_cluster(ClusterSpec& c, int accelerators, const std::string& context) {
  const int per_node = c.node.accelerators();
  if (accelerators < 1) return Error(context + ": must be >= 1");
  if (per_node < 1) return Error(context + ": cluster '" + c.name + "' has no accelerators");
  if (accelerators < per_node) {
    // A partial node: keep the node but use fewer devices.
    // The accelerator group (a CPU-only node's accelerators are its CPUs).
    bool resized = false;
    for (auto& g : c.node.devices)
      if (g.device.kind != DeviceKind::kCpu) {
        g.count = accelerators;
        resized = true;
        break;
      }
    if (!resized) c.node.devices.front().count = accelerators;
    c.nodes = 1;
    return Status::Ok();
  }
  if (accelerators % per_node != 0)
    return Error(context + ": " + std::to_string(accelerators) + " is not a multiple of the " +
                 std::to_string(per_node) + " accelerators per node of '" + c.name + "'");
  if (accelerators > per_node && c.node.nics == 0)
    return Error(context + ": " + std::to_string(accelerators) + " accelerators need " +
                 std::to_string(accelerators / per_node) + " nodes, but the nodes of '" + c.name +
                 "' have no NICs to join them (at most " + std::to_string(per_node) + " on this cluster)");
  c.nodes = accelerators / per_node;
  return Status::Ok();
}

}  // namespace foresight
