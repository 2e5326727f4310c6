// Checkpoint/restart under exponential failures: Young/Daly intervals, Daly's expected efficiency,
// and a Monte-Carlo run of the same process (with the articles' light snapshots).
#include "sim/analytic/reliability.h"

#include <algorithm>
#include <cmath>
#include <limits>
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
  double done = 0;      // work done (since the start of the run)
  double full = 0;      // work saved by the last full checkpoint
  double snapshot = 0;  // work saved by the last light snapshot (>= full)
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
      if (writes_full)
        full = snapshot = done;
      else
        snapshot = done;
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
      if (hit >= recover) {
        t += recover;
        break;
      }
      t += hit;
      ++run.failures;
    }
  }
  run.useful = done;
  return run;
}

// The pieces of work between two full checkpoints as simulate_run cuts them: `light` pieces of
// `light_interval_s` each ending with a light snapshot, then the last one ending with the full
// checkpoint.
struct Pieces {
  bool light = false;
  double k = 0;                // light pieces (a count, maybe very large)
  double work = 0, write = 0;  // each light piece
  double last_work = 0, last_write = 0;
};

Pieces pieces(const ReliabilityInputs& in, const ReliabilityResult& r) {
  Pieces p;
  p.light = in.light_interval_s > 0 && in.light_interval_s < r.interval_s;
  if (p.light) {
    p.k = std::max(0.0, std::ceil((r.interval_s - 1e-9) / in.light_interval_s) - 1);
    p.work = in.light_interval_s;
    p.write = in.light_write_s;
  }
  p.last_work = r.interval_s - p.k * p.work;
  p.last_write = r.write_s;
  return p;
}

// Expected events of simulate_run over all trials: an upper bound on the pieces completed (each
// takes at least its work and write) and two per failure (the failure, the restart that ends).
double expected_events(const ReliabilityInputs& in, const ReliabilityResult& r) {
  const Pieces p = pieces(in, r);
  const double period = p.k * (p.work + p.write) + p.last_work + p.last_write;
  const double completed = in.run_s / period * (p.k + 1);
  const double failures = in.run_s / r.mtbf_s;
  return static_cast<double>(in.trials) * (completed + 2 * failures + 1);
}

}  // namespace

ReliabilityExpected reliability_expected(const ReliabilityInputs& in, const ReliabilityResult& r) {
  const Pieces pc = pieces(in, r);
  const double lambda = 1.0 / r.mtbf_s;
  const double f = pc.light ? in.soft_fraction : 0.0;
  // A restart of length `len` that failures start again: expected (e^{len/M} - 1) M.
  const double soft_recovery = std::expm1(lambda * (in.restart_s + in.light_write_s)) / lambda;
  const double hard_recovery = std::expm1(lambda * (in.restart_s + r.restore_s)) / lambda;
  const double recovery = f * soft_recovery + (1 - f) * hard_recovery;
  // A piece of `work` then `write`: success probability p, failure q; time of one attempt
  // (min(X, s) then the restart after a failure) and the work it computes and loses when it fails
  // (E[min(work, X); X < s]).
  struct Attempt {
    double p, q, time, lost;
  };
  auto attempt = [&](double work, double write) {
    const double s = work + write;
    Attempt a;
    a.p = std::exp(-lambda * s);
    a.q = -std::expm1(-lambda * s);
    a.time = a.q > 0 ? a.q / lambda + a.q * recovery : s;
    a.lost = -std::expm1(-lambda * work) / lambda - work * a.p;
    return a;
  };
  const Attempt light = attempt(pc.work, pc.write), last = attempt(pc.last_work, pc.last_write);
  ReliabilityExpected e;
  e.failures_per_s = lambda;  // failures arrive at rate 1/M whatever the job does
  // A piece that (to double precision) never completes: the job repeats it for ever.
  if ((pc.k > 0 && light.p == 0) || last.p == 0) {
    const Attempt& stuck = pc.k > 0 && light.p == 0 ? light : last;
    if (stuck.time > 0 && std::isfinite(stuck.time)) e.lost_work_per_s = stuck.lost / stuck.time;
    return e;
  }
  // Visits per period to light piece j, relative to piece 0: V_j = r^j with r = p / (1 - q f)
  // (reached by a success, repeated by a soft failure; a hard failure goes back to piece 0), and
  // to the last piece V_{k-1} p / (1 - q_last f). S0 = sum r^j, S1 = sum j r^j over the k light
  // pieces.
  double s0 = 0, s1 = 0, v_last = 1;
  if (pc.k > 0) {
    const double d = f >= 1 ? 0.0 : light.q * (1 - f) / (1 - light.q * f);  // 1 - r
    const double k = pc.k;
    const double log_r = std::log1p(-d);
    if (d * k < 1e-7) {  // r = 1 to within 1e-7 over the k pieces
      s0 = k;
      s1 = k * (k - 1) / 2;
    } else {
      s0 = -std::expm1(k * log_r) / d;
      s1 = (s0 - 1 - (k - 1) * std::exp(k * log_r)) / d;
    }
    v_last = std::exp((k - 1) * log_r) * light.p / (f >= 1 ? last.p : 1 - last.q * f);
  }
  const double time = s0 * light.time + v_last * last.time;
  const double completed = v_last * last.p;  // periods per visit to piece 0
  const double lost = s0 * light.lost + light.q * (1 - f) * pc.work * s1 +
                      v_last * (last.lost + last.q * (1 - f) * pc.k * pc.work);
  if (!(time > 0) || !std::isfinite(time)) return e;  // never completes a period
  e.efficiency = std::clamp(r.interval_s * completed / time, 0.0, 1.0);
  e.lost_work_per_s = std::max(0.0, lost / time);
  return e;
}

Result<ReliabilityResult> reliability(const ReliabilityInputs& in) {
  auto bad = [](const std::string& field, const std::string& why) {
    return Error("reliability: " + field + ": " + why);
  };
  if (in.devices < 1) return bad("devices", "must be >= 1");
  if (!(in.failures_per_device_hour > 0)) return bad("failure rate", "must be > 0 per device-hour");
  if (!(in.checkpoint_bytes > 0)) return bad("checkpoint size", "must be > 0");
  if (!(in.storage_bandwidth > 0))
    return bad("storage bandwidth", "the cluster gives none (storage_bandwidth)");
  if (!(in.failures_per_device_hour <= kMaxFailuresPerDeviceHour))
    return bad("failure rate", "must be at most 1 per device-hour");
  if (!(in.run_s > 0) || !std::isfinite(in.run_s)) return bad("run length", "must be > 0 and finite");
  for (double t : {in.restart_s, in.interval_s, in.light_interval_s, in.light_write_s})
    if (!(t >= 0) || !std::isfinite(t)) return bad("times", "must be >= 0 and finite");
  if (!(in.soft_fraction >= 0 && in.soft_fraction <= 1)) return bad("soft fraction", "must be within 0..1");
  if (in.trials < 1 || in.trials > 100000) return bad("trials", "must be within 1..100000");
  if (!(in.max_events >= 0)) return bad("event budget", "must be >= 0");
  ReliabilityResult r;
  r.mtbf_s = 3600.0 / (in.devices * in.failures_per_device_hour);
  r.write_s = in.checkpoint_bytes / in.storage_bandwidth;
  if (!std::isfinite(r.write_s)) return bad("checkpoint size", "takes no finite time to write");
  r.restore_s = r.write_s;
  r.young_interval_s = young_interval(r.write_s, r.mtbf_s);
  r.daly_interval_s = daly_interval(r.write_s, r.mtbf_s);
  r.interval_s = in.interval_s > 0 ? in.interval_s : r.daly_interval_s;
  r.efficiency_model = daly_efficiency(r.interval_s, r.write_s, in.restart_s + r.restore_s, r.mtbf_s);
  const ReliabilityExpected expected = reliability_expected(in, r);
  r.efficiency_expected = expected.efficiency;
  r.events = expected_events(in, r);
  if (!(r.events <= in.max_events)) {  // also when the estimate overflows
    r.monte_carlo = false;
    r.efficiency = r.efficiency_expected;
    r.efficiency_mc = r.efficiency_p5 = r.efficiency_p95 = std::numeric_limits<double>::quiet_NaN();
    r.failures_mean = expected.failures_per_s * in.run_s;
    r.lost_work_s = expected.lost_work_per_s * in.run_s;
    return r;
  }
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
  r.efficiency = r.efficiency_mc;
  std::sort(eff.begin(), eff.end());
  auto at = [&](double q) { return eff[static_cast<std::size_t>(q * (eff.size() - 1) + 0.5)]; };
  r.efficiency_p5 = at(0.05);
  r.efficiency_p95 = at(0.95);
  return r;
}

}  // namespace foresight
