// Largest model that fits: bisection over a scaled model family (see the header).
#include "sim/analytic/capacity.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>

#include "sim/analytic/analytic_model.h"

namespace foresight {

ModelSpec scale_model(const ModelSpec& base, double s) {
  ModelSpec m = base;
  const double head_dim = base.heads > 0 ? static_cast<double>(base.hidden) / base.heads : 128;
  m.hidden =
      std::max<std::int64_t>(128, static_cast<std::int64_t>(std::llround(base.hidden * s / 128.0)) * 128);
  m.layers = std::max(1, static_cast<int>(std::lround(base.layers * s)));
  m.heads = std::max(1, static_cast<int>(std::lround(m.hidden / head_dim)));
  const double kv_ratio = base.heads > 0 ? static_cast<double>(base.kv_heads) / base.heads : 1;
  m.kv_heads = std::max(1, static_cast<int>(std::lround(m.heads * kv_ratio)));
  while (m.heads % m.kv_heads != 0) --m.kv_heads;  // GQA groups must divide the heads
  if (base.head_dim > 0) m.head_dim = base.head_dim;
  m.ffn_hidden = std::max<std::int64_t>(
      128, static_cast<std::int64_t>(
               std::llround(static_cast<double>(base.ffn_hidden) * m.hidden / base.hidden / 128.0)) *
               128);
  if (m.is_moe()) m.moe.dense_layers = std::min(m.moe.dense_layers, m.layers);
  m.name = base.name + "-scaled";
  return m;
}

ModelSpec splittable_model(const ModelSpec& base, double s, const Plan& p) {
  ModelSpec m = scale_model(base, s);
  int t = std::max(1, p.tp);
  for (int st : p.stage_tp) t = std::lcm(t, std::max(1, st));
  if (t > 1) {
    const int heads = (m.heads + t - 1) / t * t;
    if (heads != m.heads) {  // more heads at the base's head size: the hidden size grows with them
      const double head_dim = base.heads > 0 ? static_cast<double>(base.hidden) / base.heads : 128;
      m.heads = heads;
      const auto need = static_cast<std::int64_t>(std::ceil(heads * head_dim / 128.0)) * 128;
      if (need > m.hidden) {
        m.hidden = need;
        m.ffn_hidden = std::max<std::int64_t>(
            128, static_cast<std::int64_t>(
                     std::llround(static_cast<double>(base.ffn_hidden) * m.hidden / base.hidden / 128.0)) *
                     128);
      }
      const double kv_ratio = base.heads > 0 ? static_cast<double>(base.kv_heads) / base.heads : 1;
      m.kv_heads = std::max(1, static_cast<int>(std::lround(m.heads * kv_ratio)));
    }
    m.ffn_hidden = (m.ffn_hidden + t - 1) / t * t;
    auto splits = [&](int kv) {
      if (m.heads % kv != 0) return false;
      if (m.mla.enabled()) return true;
      auto divides = [&](int tp) { return kv % tp == 0 || tp % kv == 0; };
      if (!divides(p.tp)) return false;
      for (int st : p.stage_tp)
        if (!divides(st)) return false;
      return true;
    };
    while (m.kv_heads > 1 && !splits(m.kv_heads)) --m.kv_heads;
  }
  if (!p.layer_split.empty()) {
    m.layers = 0;
    for (int n : p.layer_split) m.layers += n;
  } else {
    m.layers = std::max(m.layers, p.pp);
    const int unit = p.virtual_stages > 1 ? p.pp * p.virtual_stages : 1;
    m.layers = (m.layers + unit - 1) / unit * unit;
  }
  if (m.is_moe()) m.moe.dense_layers = std::min(m.moe.dense_layers, m.layers);
  return m;
}

namespace {
constexpr double kSmallestScale = 1e-3;  // a 128-wide, 1-layer model for any preset

std::string params_text(double params) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3gM parameters", params / 1e6);
  return buf;
}

std::string shape(const ModelSpec& m) {
  return "hidden " + std::to_string(m.hidden) + ", " + std::to_string(m.layers) + " layers, " +
         std::to_string(m.heads) + " heads";
}
}  // namespace

Status capacity_plan_check(const ModelSpec& base, const ClusterSpec& c, const Plan& p) {
  const ModelSpec smallest = splittable_model(base, kSmallestScale, p);
  const Status valid = validate_plan_on(p, smallest, c, "plan");
  if (!valid)
    return Error("capacity: the plan cannot split any model of " + base.name +
                 "'s family (the smallest tried: " + shape(smallest) + "): " + valid.error().message());
  return Status::Ok();
}

int most_layers_per_chunk(const Plan& p, int layers) {
  int most = 0;
  for (int st = 0; st < p.pp; ++st)
    for (int c = 0; c < p.chunks(); ++c) {
      const auto [first, last] = p.chunk_layer_range(layers, st, c);
      most = std::max(most, last - first);
    }
  return most;
}

int fewest_recompute_layers(const ModelSpec& m, const ClusterSpec& c, const Plan& p) {
  return fewest_recompute_layers(AnalyticModel(m, c), p);
}

int fewest_recompute_layers(const AnalyticModel& am, const Plan& p, double min_free) {
  if (p.recompute != Recompute::kSelective && p.recompute != Recompute::kFull &&
      p.recompute != Recompute::kSelectiveOp)
    return -1;
  const ModelSpec& m = am.model();
  auto fits = [&](int k) {
    Plan q = p;
    q.recompute_layers = k;
    q.recompute_method = RecomputeMethod::kBlock;
    const MemoryBreakdown mem = am.memory(q);
    return mem.fits() && mem.capacity - mem.total >= min_free * mem.capacity;
  };
  const int most = most_layers_per_chunk(p, m.layers);  // more recomputes nothing more
  if (!fits(most)) return -1;
  int lo = 0, hi = most;  // fits(hi); find the smallest that fits
  if (fits(0)) return 0;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (fits(mid) ? hi : lo) = mid;
  }
  return hi;
}

Result<CapacityResult> largest_model(const ModelSpec& base, const ClusterSpec& c, const Plan& p) {
  FS_RETURN_IF_ERROR(capacity_plan_check(base, c, p));
  auto fits = [&](double s, CapacityResult* out) {
    const ModelSpec m = splittable_model(base, s, p);
    if (!validate_plan_on(p, m, c, "plan").ok()) return false;
    const MemoryBreakdown mem = AnalyticModel(m, c).memory(p);
    if (!mem.fits()) return false;
    if (out) *out = CapacityResult{m, m.total_params(), mem};
    return true;
  };
  double lo = kSmallestScale, hi = 1.0;
  if (!fits(lo, nullptr)) {
    const ModelSpec smallest = splittable_model(base, lo, p);
    return Error("capacity: not even the smallest model of " + base.name + "'s family (" + shape(smallest) +
                 ", " + params_text(smallest.total_params()) + ") fits this plan on " + c.name + ": " +
                 describe_memory(AnalyticModel(smallest, c).memory(p)));
  }
  while (fits(hi, nullptr)) {  // grow until it does not fit
    lo = hi;
    hi *= 2;
    if (hi > 1e4) break;
  }
  for (int i = 0; i < 60 && hi / lo > 1.001; ++i) {
    const double mid = std::sqrt(lo * hi);
    (fits(mid, nullptr) ? lo : hi) = mid;
  }
  CapacityResult r;
  fits(lo, &r);
  return r;
}

}  // namespace foresight
