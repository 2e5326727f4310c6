// Money and energy of a predicted step, per million tokens and for a whole training run.
//
//   Economics e = economics(prediction, cluster, plan, model.seq_len, CostOptions{});
//   e.cost_per_mtok_usd, e.energy_per_mtok_kwh, e.time_to_train_s (with CostOptions::tokens)
//
// Power of a device during the step: idle + (load - idle) x the fraction of the step it computes
// (a device waiting on the network or in a pipeline bubble draws little above idle), times the
// facility's PUE. Price: per device-hour, from the device preset unless overridden. A plan with an
// attention partner (Plan::attention_device) pays for one partner beside each rank.
#pragma once

#include <optional>

#include "sim/analytic/prediction.h"
#include "sim/spec/hardware.h"
#include "sim/spec/plan.h"

namespace foresight {

struct CostOptions {
  std::optional<double> price_per_device_hour;  // USD; default: the device preset's
  // Power usage effectiveness of the facility. Assumption: 1.2, a modern hyperscale/AI data centre
  // (Uptime Institute's 2023 survey average across all data centres is 1.58; hyperscalers
  // report 1.1-1.2).
  double pue = 1.2;
  std::optional<double> tokens;  // a training run's token budget
};

struct Economics {
  double device_power_w = 0;     // average per rank during the step (its attention partner included)
  int partner_devices = 0;       // attention partners paid for beside the ranks (Plan::attention_device)
  double energy_per_step_j = 0;  // whole job, PUE included
  double cost_per_step_usd = 0;
  double cost_per_mtok_usd = 0;
  double energy_per_mtok_kwh = 0;
  // With CostOptions::tokens:
  double steps = 0;
  double time_to_train_s = 0;
  double cost_to_train_usd = 0;
  double energy_to_train_mwh = 0;
};

Economics economics(const Prediction& p, const ClusterSpec& cluster, const Plan& plan, int seq_len,
                    const CostOptions& options);

}  // namespace foresight
