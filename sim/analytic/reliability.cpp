// Checkpoint/restart under exponential failures: Young/Daly intervals, Daly's expected efficiency,
// and a Monte-Carlo run of the same process (with the articles' light snapshots).
#include "sim/analytic/reliability.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "sim/analytic/analytic_model.h"

namespace foresight {

double young_interval(double write_s, double mtbf_s) { return std::sqrt(2.0 * write_s * mtbf_s); }

double daly_interval(double write_s, double mtbf_s) {
  if (write_s >= 2.0 * mtbf_s) return mtbf_s;
  const double x = write_s / (2.0 * mtbf_s);
  return std::sqrt(2.0 * write_s * mtbf_s) * (1.0 + std::sqrt(x) / 3.0 + x / 9.0) - write_s;
}

double daly_efficiency(double tau, double delta, double restart, double mtbf) {
  if (tau <= 0 || mtbf <= 0) return 0;
  return tau / (mtbf * std::exp(restart / mtbf) * std::expm1((tau + delta) / mtbf));
}

ReliabilityInputs reliability_inputs(const ModelSpec& m, const ClusterSpec& c, const Plan& p, double step_s) {
  ReliabilityInputs in;
  in.devices = p.gpus();
  in.step_s = step_s;
  // One copy of the model's state: the weights as trained, and the optimizer's fp32 state (master
  // weights and Adam moments; fp32 training keeps only the two moments besides the weights).
  const double optimizer = p.precision == Precision::kFp32 ? 8.0 : 12.0;
  in.checkpoint_bytes = m.total_params() * (weight_bytes(p.precision) + optimizer);
  in.storage_bandwidth = c.storage_bandwidth;
  return in;
}

double in_memory_snapshot_s(const ClusterSpec& c, const Plan& p, double checkpoint_bytes) {
  const double model_parallel = static_cast<double>(p.tp) * p.pp * p.cp;
  const double shard = checkpoint_bytes / model_parallel / (p.zero_stage >= 1 ? p.dp : 1);
  return shard / host_link_rate(c.node);
}

namespace {

struct Run {
  double useful = 0, failures = 0, lost = 0;
};

// One run of the process over the wall budget.
Run simulate_run(const ReliabilityInputs& in, const ReliabilityResult& r, std::mt19937_64& rng) {
  std::exponential_distribution<double> next_failure(1.0 / r.mtbf_s);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const bool light = in.light_interval_s > 0 && in.light_interval_s < r.interval_s;
  const double chunk = light ? in.light_interval_s : r.interval_s;
  Run run;
  double t = 0;
  double done = 0;        // work done (since the start of the run)
  double full = 0;        // work saved by the last full checkpoint
  double snapshot = 0;    // work saved by the last light snapshot (>= full)
  while (t < in.run_s) {
    // The next piece of work up to a snapshot or checkpoint boundary (`done` is always at the last
    // one here), and what it writes there.
    const double to_full = r.interval_s - (done - full);
    const double work = std::min(chunk, to_full);
    const bool writes_full = work >= to_full - 1e-9;
    const double write = writes_full ? r.write_s : in.light_write_s;
    const double segment = work + write;
    const double fail_in = next_failure(rng);
    if (fail_in >= segment) {
      if (t + segment > in.run_s) {  // the budget ends first: what was computed counts
        done += std::min(work, in.run_s - t);
        break;
      }
      t += segment;
      done += work;
      if (writes_full) full = snapshot = done; else snapshot = done;
      continue;
    }
    if (t + fail_in >= in.run_s) {
      done += std::min(work, in.run_s - t);
      break;
    }
    // A failure: back to the light snapshot (a soft failure) or the last full checkpoint.
    t += fail_in;
    done += std::min(work, fail_in);
    ++run.failures;
    const bool soft = light && uniform(rng) < in.soft_fraction;
    const double back_to = soft ? snapshot : full;
    run.lost += done - back_to;
    done = back_to;
    if (!soft) snapshot = full;
    const double recover = in.restart_s + (soft ? in.light_write_s : r.restore_s);
    // The restart itself can be hit by a failure: it starts again (Daly's assumption).
    while (t < in.run_s) {
      const double hit = next_failure(rng);
      if (hit >= recover) { t += recover; break; }
      t += hit;
      ++run.failures;
    }
  }
  run.useful = done;
  return run;
}

}  // namespace

Result<ReliabilityResult> reliability(const ReliabilityInputs& in) {
  auto bad = [](const std::string& field, const std::string& why) { return Error("reliability: " + field + ": " + why); };
  if (in.devices < 1) return bad("devices", "must be >= 1");
  if (!(in.failures_per_device_hour > 0)) return bad("failure rate", "must be > 0 per device-hour");
  if (!(in.checkpoint_bytes > 0)) return bad("checkpoint size", "must be > 0");
  if (!(in.storage_bandwidth > 0)) return bad("storage bandwidth", "the cluster gives none (storage_bandwidth)");
  if (!(in.run_s > 0)) return bad("run length", "must be > 0");
  if (in.restart_s < 0 || in.interval_s < 0 || in.light_interval_s < 0 || in.light_write_s < 0)
    return bad("times", "must be >= 0");
  if (in.soft_fraction < 0 || in.soft_fraction > 1) return bad("soft fraction", "must be within 0..1");
  if (in.trials < 1 || in.trials > 100000) return bad("trials", "must be within 1..100000");
  ReliabilityResult r;
  r.mtbf_s = 3600.0 / (in.devices * in.failures_per_device_hour);
  r.write_s = in.checkpoint_bytes / in.storage_bandwidth;
  r.restore_s = r.write_s;
  r.young_interval_s = young_interval(r.write_s, r.mtbf_s);
  r.daly_interval_s = daly_interval(r.write_s, r.mtbf_s);
  r.interval_s = in.interval_s > 0 ? in.interval_s : r.daly_interval_s;
  r.efficiency_model = daly_efficiency(r.interval_s, r.write_s, in.restart_s + r.restore_s, r.mtbf_s);
  std::mt19937_64 rng(in.seed);
  std::vector<double> eff;
  eff.reserve(static_cast<std::size_t>(in.trials));
  for (int i = 0; i < in.trials; ++i) {
    const Run run = simulate_run(in, r, rng);
    eff.push_back(run.useful / in.run_s);
    r.failures_mean += run.failures / in.trials;
    r.lost_work_s += run.lost / in.trials;
  }
  double sum = 0;
  for (double e : eff) sum += e;
  r.efficiency_mc = sum / in.trials;
  std::sort(eff.begin(), eff.end());
  auto at = [&](double q) { return eff[static_cast<std::size_t>(q * (eff.size() - 1) + 0.5)]; };
  r.efficiency_p5 = at(0.05);
  r.efficiency_p95 = at(0.95);
  return r;
}

}  // namespace foresight
