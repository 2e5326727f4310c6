// `foresight reliability`: failures and checkpoints over a long run of a plan -- job MTBF, the
// checkpoint's write and restore time, Young's and Daly's intervals, the effective training time
// (Daly's model and a Monte-Carlo run), and with --tokens the time to train.
#include <fmt/core.h>

#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "app/commands.h"
#include "app/plan_options.h"
#include "sim/analytic/analytic_model.h"
#include "sim/analytic/reliability.h"
#include "sim/core/units.h"

namespace foresight::app {

namespace {

struct ReliabilityOptions {
  std::string run = "90d";
  std::optional<long long> checkpoint_every;  // steps
  std::string restart = "10min";
  std::optional<double> failure_rate;    // per device-hour
  std::optional<long long> light_every;  // steps
  std::optional<std::string> light_write;
  double soft_fraction = 0;
  int trials = 200;
  std::uint64_t seed = 1;
  std::optional<std::string> tokens;
  bool json = false;
};

std::string secs(double s) { return pretty_quantity(s, Dimension::kSeconds); }

void add_reliability_options(CLI::App& cmd, ReliabilityOptions& r) {
  cmd.add_option("--run", r.run, "wall-clock length of the run, e.g. 90d")
      ->capture_default_str()
      ->group("Reliability");
  cmd.add_option("--checkpoint-every", r.checkpoint_every,
                 "steps between full checkpoints (default: Daly's optimum)")
      ->group("Reliability");
  cmd.add_option("--restart", r.restart,
                 "time from a failure until the job runs again, before reading the checkpoint "
                 "(an assumption: 10min)")
      ->capture_default_str()
      ->group("Reliability");
  cmd.add_option("--failure-rate", r.failure_rate,
                 "failures per device-hour (default: Llama 3's 419 in 54 days on 16,384 GPUs)")
      ->group("Reliability");
  cmd.add_option("--light-every", r.light_every,
                 "steps between light snapshots (the articles' progressive scheme)")
      ->group("Reliability");
  cmd.add_option(
         "--light-write", r.light_write,
         "cost of one light snapshot (default: each device's state to host memory over its host link)")
      ->group("Reliability");
  cmd.add_option("--soft-fraction", r.soft_fraction,
                 "share of failures a light snapshot recovers from (0..1)")
      ->capture_default_str()
      ->group("Reliability");
  cmd.add_option("--trials", r.trials, "Monte-Carlo runs")->capture_default_str()->group("Reliability");
  cmd.add_option("--seed", r.seed, "Monte-Carlo seed")->capture_default_str()->group("Reliability");
  cmd.add_option("--tokens", r.tokens, "train this many tokens (e.g. 15T): time to train with failures");
  cmd.add_flag("--json", r.json, "print the result as JSON");
}

// --run and --restart read and in range (the message names the option).
Status apply_run_and_restart(const ReliabilityOptions& r, ReliabilityInputs& ri) {
  auto run = parse_quantity(r.run, Dimension::kSeconds);
  if (!run) return Error("--run: " + run.error().message());
  auto restart = parse_quantity(r.restart, Dimension::kSeconds);
  if (!restart) return Error("--restart: " + restart.error().message());
  if (!(*run > 0)) return Error("--run: \"" + r.run + "\" must be > 0");
  if (!(*restart >= 0)) return Error("--restart: \"" + r.restart + "\" must be >= 0");
  ri.run_s = *run;
  ri.restart_s = *restart;
  return Status::Ok();
}

// --failure-rate, --checkpoint-every, --light-every and --light-write; intervals given in steps
// become seconds of the predicted step.
Status apply_failures_and_snapshots(const ReliabilityOptions& r, const ResolvedInputs& in, double step_s,
                                    ReliabilityInputs& ri) {
  if (r.failure_rate) {
    if (!(*r.failure_rate > 0 && *r.failure_rate <= kMaxFailuresPerDeviceHour))
      return Error(fmt::format("--failure-rate: {} is not within (0, {}] failures per device-hour",
                               *r.failure_rate, kMaxFailuresPerDeviceHour));
    ri.failures_per_device_hour = *r.failure_rate;
  }
  if (r.checkpoint_every) {
    if (*r.checkpoint_every < 1) return Error("--checkpoint-every: must be >= 1 step");
    ri.interval_s = static_cast<double>(*r.checkpoint_every) * step_s;
    if (!std::isfinite(ri.interval_s)) return Error("--checkpoint-every: too many steps");
  }
  if (!r.light_every) return Status::Ok();
  if (*r.light_every < 1) return Error("--light-every: must be >= 1 step");
  ri.light_interval_s = static_cast<double>(*r.light_every) * step_s;
  if (!std::isfinite(ri.light_interval_s)) return Error("--light-every: too many steps");
  if (r.light_write) {
    auto lw = parse_quantity(*r.light_write, Dimension::kSeconds);
    if (!lw) return Error("--light-write: " + lw.error().message());
    if (!(*lw >= 0)) return Error("--light-write: \"" + *r.light_write + "\" must be >= 0");
    ri.light_write_s = *lw;
  } else {
    ri.light_write_s = in_memory_snapshot_s(in.cluster, in.plan, ri.checkpoint_bytes);
  }
  return Status::Ok();
}

// --soft-fraction, --trials and --seed.
Status apply_monte_carlo(const ReliabilityOptions& r, ReliabilityInputs& ri) {
  if (!(r.soft_fraction >= 0 && r.soft_fraction <= 1))
    return Error(fmt::format("--soft-fraction: {} is not within 0..1", r.soft_fraction));
  if (r.trials < 1 || r.trials > 100000)
    return Error(fmt::format("--trials: {} is not within 1..100000", r.trials));
  ri.soft_fraction = r.soft_fraction;
  ri.trials = r.trials;
  ri.seed = r.seed;
  return Status::Ok();
}

// The run's inputs: the plan's (devices, checkpoint size, storage) and the options', every option
// in range before any work.
Result<ReliabilityInputs> reliability_inputs_of(const ReliabilityOptions& r, const ResolvedInputs& in,
                                                double step_s) {
  ReliabilityInputs ri = reliability_inputs(in.model, in.cluster, in.plan, step_s);
  FS_RETURN_IF_ERROR(apply_run_and_restart(r, ri));
  FS_RETURN_IF_ERROR(apply_failures_and_snapshots(r, in, step_s, ri));
  FS_RETURN_IF_ERROR(apply_monte_carlo(r, ri));
  return ri;
}

// With --tokens: the time to train them without failures (nullopt without --tokens).
Result<std::optional<double>> time_without_failures(const ReliabilityOptions& r, const ResolvedInputs& in,
                                                    double step_s) {
  if (!r.tokens) return std::optional<double>();
  FS_ASSIGN_OR_RETURN(const double tokens, parse_tokens(*r.tokens));
  const int seq = effective_seq_len(in.plan, in.model);
  return std::optional<double>(tokens / (static_cast<double>(in.plan.global_batch) * seq) * step_s);
}

// What a run with its results says, shared by the JSON and the text.
struct ReliabilityReport {
  const ResolvedInputs& in;
  const ReliabilityOptions& options;
  const ReliabilityInputs& ri;
  const ReliabilityResult& res;
  double step_s;
  std::optional<double> useful_s;  // --tokens: the time to train them without failures

  // Beyond the event budget the Monte-Carlo run is not made: the closed form of the same process.
  std::string method() const { return res.monte_carlo ? "monte-carlo" : "closed-form"; }
  std::string closed_form_note() const {
    return fmt::format(
        "closed form, no Monte-Carlo: {} trials would simulate about {:.3g} events, over the budget of "
        "{:.3g}; the long-run expectation of the same process, without a spread",
        ri.trials, res.events, ri.max_events);
  }
};

nlohmann::json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

nlohmann::json reliability_json(const ReliabilityReport& rep) {
  const ReliabilityInputs& ri = rep.ri;
  const ReliabilityResult& res = rep.res;
  nlohmann::json j = {{"model", rep.in.model.name},
                      {"cluster", rep.in.cluster.name},
                      {"plan", plan_to_json(rep.in.plan)},
                      {"devices", ri.devices},
                      {"step_time_s", rep.step_s},
                      {"failures_per_device_hour", ri.failures_per_device_hour},
                      {"mtbf_s", res.mtbf_s},
                      {"checkpoint_bytes", ri.checkpoint_bytes},
                      {"checkpoint_write_s", res.write_s},
                      {"restore_s", res.restore_s},
                      {"restart_s", ri.restart_s},
                      {"young_interval_s", res.young_interval_s},
                      {"daly_interval_s", res.daly_interval_s},
                      {"interval_s", res.interval_s},
                      {"interval_steps", res.interval_s / rep.step_s},
                      {"light_interval_s", ri.light_interval_s},
                      {"light_write_s", ri.light_write_s},
                      {"soft_fraction", ri.soft_fraction},
                      {"run_s", ri.run_s},
                      {"effective_time_model", res.efficiency_model},
                      {"effective_time_expected", res.efficiency_expected},
                      {"effective_time", res.efficiency},
                      {"effective_time_method", rep.method()},
                      {"monte_carlo_events", res.events},
                      {"monte_carlo_event_budget", ri.max_events},
                      {"effective_time_mc", number_or_null(res.efficiency_mc)},
                      {"effective_time_p5", number_or_null(res.efficiency_p5)},
                      {"effective_time_p95", number_or_null(res.efficiency_p95)},
                      {"failures_per_run", res.failures_mean},
                      {"lost_work_s", res.lost_work_s}};
  if (!res.monte_carlo) j["note"] = rep.closed_form_note();
  if (rep.useful_s) {
    j["time_to_train_s"] = number_or_null(*rep.useful_s / res.efficiency);
    j["time_to_train_without_failures_s"] = *rep.useful_s;
  }
  return j;
}

// The job, its failure rate, its checkpoint and the intervals.
void print_failures_and_checkpoints(const ReliabilityReport& rep) {
  const ReliabilityInputs& ri = rep.ri;
  const ReliabilityResult& res = rep.res;
  const ReliabilityOptions& r = rep.options;
  fmt::print("{} on {} devices ({}), step {}\n", rep.in.model.name, ri.devices, rep.in.cluster.name,
             secs(rep.step_s));
  fmt::print("job MTBF {} ({} devices x {:.3g} failures per device-hour{})\n", secs(res.mtbf_s), ri.devices,
             ri.failures_per_device_hour, r.failure_rate ? "" : ": Llama 3, 419 in 54 days on 16,384 GPUs");
  fmt::print("checkpoint {}: write {} at {}, restore {}; restart {}{}\n",
             pretty_quantity(ri.checkpoint_bytes, Dimension::kBytes), secs(res.write_s),
             pretty_quantity(ri.storage_bandwidth, Dimension::kBandwidth), secs(res.restore_s),
             secs(ri.restart_s), r.restart == ReliabilityOptions{}.restart ? " (assumed)" : "");
  fmt::print("interval: Young {}, Daly {}; used {} ({:.0f} steps){}\n", secs(res.young_interval_s),
             secs(res.daly_interval_s), secs(res.interval_s), res.interval_s / rep.step_s,
             r.checkpoint_every ? "" : " (Daly's)");
  if (ri.light_interval_s > 0)
    fmt::print("light snapshots every {} ({:.0f} steps), {} each; {:.0f}% of failures resume from them\n",
               secs(ri.light_interval_s), ri.light_interval_s / rep.step_s, secs(ri.light_write_s),
               100 * ri.soft_fraction);
}

// The effective training time, and with --tokens the time to train.
void print_effective_time(const ReliabilityReport& rep) {
  const ReliabilityInputs& ri = rep.ri;
  const ReliabilityResult& res = rep.res;
  if (res.monte_carlo)
    fmt::print(
        "effective training time over {}: {:.2f}% by Daly's model (full checkpoints only), {:.2f}% by "
        "Monte-Carlo ({} runs; 5-95%: {:.2f}-{:.2f}%), {:.0f} failures and {} of lost work per run\n",
        secs(ri.run_s), 100 * res.efficiency_model, 100 * res.efficiency_mc, ri.trials,
        100 * res.efficiency_p5, 100 * res.efficiency_p95, res.failures_mean, secs(res.lost_work_s));
  else
    fmt::print(
        "effective training time over {}: {:.2f}% by Daly's model (full checkpoints only), {:.2f}% "
        "expected "
        "({}), {:.3g} failures and {} of lost work per run\n",
        secs(ri.run_s), 100 * res.efficiency_model, 100 * res.efficiency, rep.closed_form_note(),
        res.failures_mean, secs(res.lost_work_s));
  if (!rep.useful_s) return;
  const double useful_s = *rep.useful_s;
  if (res.efficiency > 0)
    fmt::print("time to train {}: {} without failures, {} with them\n", *rep.options.tokens, secs(useful_s),
               secs(useful_s / res.efficiency));
  else
    fmt::print("time to train {}: {} without failures, never with them (no work survives the failures)\n",
               *rep.options.tokens, secs(useful_s));
}

}  // namespace

Command add_reliability_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("reliability", "failures and checkpoints over a long run: effective training time");
  auto opts = std::make_shared<PlanOptions>();
  auto r = std::make_shared<ReliabilityOptions>();
  add_plan_options(*cmd, *opts);
  add_reliability_options(*cmd, *r);
  return [opts, r]() -> int {
    apply_default_job(*opts);
    auto in = resolve_inputs(*opts);
    if (!in) return input_error(in.error().message());
    auto pred = predict(in->model, in->cluster, in->plan, in->plan_source);
    if (!pred) return input_error(pred.error().message());
    FS_ASSIGN_OR_RETURN_CLI(const ReliabilityInputs ri, reliability_inputs_of(*r, *in, pred->step_time_s),
                            "");
    auto res = reliability(ri);
    if (!res) return input_error(res.error().message());
    FS_ASSIGN_OR_RETURN_CLI(const std::optional<double> useful_s,
                            time_without_failures(*r, *in, pred->step_time_s), "");
    const ReliabilityReport report{*in, *r, ri, *res, pred->step_time_s, useful_s};
    if (r->json) {
      fmt::print("{}\n", reliability_json(report).dump(2));
      return 0;
    }
    print_failures_and_checkpoints(report);
    print_effective_time(report);
    return 0;
  };
}

}  // namespace foresight::app
