// Cost and energy from a Prediction.
#include "sim/analytic/economics.h"

#include <algorithm>
#include <cmath>

#include "sim/analytic/layer_ops.h"

namespace foresight {

Economics economics(const Prediction& p, const ClusterSpec& cluster, const Plan& plan, int seq_len,
                    const CostOptions& o) {
  Economics e;
  const double step = p.step_time_s;
  if (step <= 0) return e;
  // Power and price per device: the accelerator's, averaged over the stages' when they differ.
  const DeviceSpec& first = cluster.node.accelerator();
  double idle = first.power_idle_w, load = first.power_load_w, device_price = first.price_per_hour_usd;
  if (!plan.stage_devices.empty() && plan.pp > 0) {
    idle = load = device_price = 0;
    for (int st = 0; st < plan.pp; ++st) {
      const DeviceSpec& d = cluster.node.devices[stage_group(plan, cluster.node, st)].device;
      idle += d.power_idle_w / plan.pp;
      load += d.power_load_w / plan.pp;
      device_price += d.price_per_hour_usd / plan.pp;
    }
  }
  const double busy = std::clamp((p.time.compute + p.time.optimizer) / step, 0.0, 1.0);
  e.device_power_w = idle + (load - idle) * busy;
  const double devices = p.devices;
  double price = o.price_per_device_hour.value_or(device_price);
  // Plan::attention_device holds one partner accelerator per rank for the whole step, used or not
  // ("auto" may leave it idle): the bill pays for it at its preset's price (an override prices
  // the stages' devices only). Its power is counted as if it computed as long as its rank does:
  // an upper bound, since the two take turns.
  const Partner partner = attention_partner(plan, cluster.node);
  if (partner.device) {
    const DeviceSpec& d = *partner.device;
    e.device_power_w += d.power_idle_w + (d.power_load_w - d.power_idle_w) * busy;
    price += d.price_per_hour_usd;
    e.partner_devices = p.devices;
  }
  e.energy_per_step_j = devices * e.device_power_w * step * o.pue;
  e.cost_per_step_usd = devices * price * step / 3600.0;
  const double tokens_per_step = static_cast<double>(plan.global_batch) * seq_len;
  e.cost_per_mtok_usd = e.cost_per_step_usd / tokens_per_step * 1e6;
  e.energy_per_mtok_kwh = e.energy_per_step_j / tokens_per_step * 1e6 / 3.6e6;
  if (o.tokens && *o.tokens > 0) {
    // A compression scheme that slows convergence needs that many more steps for the same model.
    e.steps = std::ceil(*o.tokens / tokens_per_step * (1.0 + plan.compression_penalty));
    e.time_to_train_s = e.steps * step;
    e.cost_to_train_usd = e.steps * e.cost_per_step_usd;
    e.energy_to_train_mwh = e.steps * e.energy_per_step_j / 3.6e9;
  }
  return e;
}

}  // namespace foresight
