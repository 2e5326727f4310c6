// Failures and checkpoints over a long run: how much of the wall-clock time trains the model.
//
//   ReliabilityInputs in = reliability_inputs(model, cluster, plan, step_s);  // sizes, rates
//   in.run_s = 90 * 86400;
//   ReliabilityResult r = reliability(in);   // r.mtbf_s, r.daly_interval_s, r.efficiency_mc ...
//
// Model (exponential failures, checkpoint/restart): the job fails at rate devices x the per-device
// rate; after a failure it restarts (detection, rescheduling, process start: `restart_s`), reads
// the last checkpoint back (`restore_s`) and redoes the work since. Checkpoints are written every
// `interval_s` of work and take `write_s` (size / storage bandwidth), during which the job may
// fail too. Daly's complete model ("A higher order estimate of the optimum checkpoint interval for
// restart dumps", FGCS 22, 2006) gives the expected wall time of this process in closed form; a
// Monte-Carlo run over the same process gives the spread (and checks the formula).
//
// The Monte-Carlo run costs one event per piece of work written and about two per failure, for
// every trial: a long run, a short checkpoint interval or a high failure rate makes that
// unbounded (`--run 1e12d`). Its expected count is estimated first; beyond `max_events`
// (kReliabilityEventBudget: 5e7 events, about a second) the result is the closed form of the same
// process instead (ReliabilityResult::monte_carlo is false; no spread), which is its long-run
// limit: the Monte-Carlo mean tends to it as the run grows.
//
// The reference articles' progressive scheme adds light snapshots every `light_interval_s` of work
// (cost `light_write_s`) from which a share of failures (`soft_fraction`: a process crash, not a
// lost node) can resume; the rest go back to the last full checkpoint. Daly's formula
// leaves it out; the closed form (reliability_expected) and the Monte-Carlo run model it.
#pragma once

#include <cstdint>

#include "sim/core/status.h"
#include "sim/spec/hardware.h"
#include "sim/spec/model.h"
#include "sim/spec/plan.h"

namespace foresight {

// Llama 3 (Dubey et al. 2024, "The Llama 3 Herd of Models", Sec. 3.3.4): 419 unexpected
// interruptions in a 54-day snapshot of pre-training on 16,384 H100 GPUs (466 with the planned
// ones). Per GPU-hour, all causes (GPU, HBM, network, host, software) lumped onto the GPUs.
inline constexpr double kLlama3FailuresPerDeviceHour = 419.0 / (54.0 * 24.0 * 16384.0);

// The most events (pieces of work, failures, restarts) a Monte-Carlo estimate may simulate over all
// its trials: about 1 s of one core (measured ~20 ns an event: 9.8e7 events, tiny on hetero-node's
// defaults, took 1.8 s of CPU). Beyond it the closed form is used.
inline constexpr double kReliabilityEventBudget = 5e7;
// The largest failure rate taken: one failure per device-hour (Llama 3's is 2e-5).
inline constexpr double kMaxFailuresPerDeviceHour = 1.0;

struct ReliabilityInputs {
  int devices = 1;
  double failures_per_device_hour = kLlama3FailuresPerDeviceHour;
  double step_s = 1;             // one training step (for step-denominated intervals)
  double checkpoint_bytes = 0;   // a full checkpoint (weights + optimizer state)
  double storage_bandwidth = 0;  // bytes/s, aggregate, to the checkpoint store
  // Time from a failure until the job runs again, before reading the checkpoint. No published
  // figure for a generic cluster: 10 minutes is an assumption (detection by timeout, a spare node
  // scheduled, processes and NCCL communicators started); override it.
  double restart_s = 600;
  double interval_s = 0;        // work between full checkpoints; 0: Daly's optimum
  double light_interval_s = 0;  // work between light snapshots; 0: none
  double light_write_s = 0;     // cost of one light snapshot
  double soft_fraction = 0;     // failures a light snapshot recovers from (0..1)
  double run_s = 90 * 86400.0;  // wall-clock budget of the run
  int trials = 200;             // Monte-Carlo runs
  std::uint64_t seed = 1;
  double max_events = kReliabilityEventBudget;  // beyond it: the closed form, no Monte-Carlo
};

struct ReliabilityResult {
  double mtbf_s = 0;            // of the job: 1 / (devices x rate)
  double write_s = 0;           // one full checkpoint
  double restore_s = 0;         // reading it back
  double young_interval_s = 0;  // sqrt(2 write M) (Young 1974)
  double daly_interval_s = 0;   // Daly 2006, higher order
  double interval_s = 0;        // the one used
  double efficiency_model = 0;  // Daly's expected useful / wall time (full checkpoints only)
  // The long-run expected useful / wall time of the simulated process, light snapshots included
  // (reliability_expected); equals efficiency_model without them.
  double efficiency_expected = 0;
  // The estimate reported: the Monte-Carlo mean, or efficiency_expected when the Monte-Carlo run
  // would exceed the event budget (monte_carlo false).
  double efficiency = 0;
  bool monte_carlo = true;
  double events = 0;         // the Monte-Carlo run's expected events, all trials (estimated)
  double efficiency_mc = 0;  // Monte-Carlo mean useful / wall time (NaN without the run)
  double efficiency_p5 = 0, efficiency_p95 = 0;  // its spread (NaN without the run)
  double failures_mean = 0;                      // per run
  double lost_work_s = 0;                        // mean per run: work redone after failures
};

// The closed form of the process the Monte-Carlo run simulates, over a long run: the expected
// useful fraction of wall time, and work lost and failures per second of wall time. A Markov
// chain over the pieces between two full checkpoints (light snapshots, then the full one): a piece
// fails with probability 1 - e^{-(work+write)/M}; a soft failure repeats it, a hard one goes back
// to the first piece; a restart of length R that failures restart takes (e^{R/M} - 1) M on
// average. Without light snapshots it is Daly's formula.
struct ReliabilityExpected {
  double efficiency = 0;
  double lost_work_per_s = 0;
  double failures_per_s = 0;
};
ReliabilityExpected reliability_expected(const ReliabilityInputs& in, const ReliabilityResult& r);

// Young's and Daly's optimum intervals for a checkpoint costing `write_s` and a job MTBF `mtbf_s`.
double young_interval(double write_s, double mtbf_s);
double daly_interval(double write_s, double mtbf_s);
// Daly's expected useful fraction of wall time for interval `tau`, write `delta`, restart plus
// restore `restart`, MTBF `mtbf`: tau / (M e^{R/M} (e^{(tau+delta)/M} - 1)).
double daly_efficiency(double tau, double delta, double restart, double mtbf);

// Fills devices, checkpoint size (bf16 weights + fp32 master weights and Adam moments, or as the
// plan's precision keeps them), storage bandwidth and step time from a plan.
ReliabilityInputs reliability_inputs(const ModelSpec& m, const ClusterSpec& c, const Plan& p, double step_s);

// The default light snapshot: every device copies its own state to host memory at once (its
// share of the weights and, with ZeRO, of the optimizer state; else its model-parallel part's
// full state) over its host link.
double in_memory_snapshot_s(const ClusterSpec& c, const Plan& p, double checkpoint_bytes);

// Errors: a rate, bandwidth or duration that is not positive (or not finite) where it must be; a
// failure rate above kMaxFailuresPerDeviceHour.
Result<ReliabilityResult> reliability(const ReliabilityInputs& in);

}  // namespace foresight
