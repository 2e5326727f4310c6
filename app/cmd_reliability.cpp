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

}  // namespace

Command add_reliability_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("reliability", "failures and checkpoints over a long run: effective training time");
  auto opts = std::make_shared<PlanOptions>();
  auto r = std::make_shared<ReliabilityOptions>();
  add_plan_options(*cmd, *opts);
  cmd->add_option("--run", r->run, "wall-clock length of the run, e.g. 90d")
      ->capture_default_str()
      ->group("Reliability");
  cmd->add_option("--checkpoint-every", r->checkpoint_every,
                  "steps between full checkpoints (default: Daly's optimum)")
      ->group("Reliability");
  cmd->add_option("--restart", r->restart,
                  "time from a failure until the job runs again, before reading the checkpoint "
                  "(an assumption: 10min)")
      ->capture_default_str()
      ->group("Reliability");
  cmd->add_option("--failure-rate", r->failure_rate,
                  "failures per device-hour (default: Llama 3's 419 in 54 days on 16,384 GPUs)")
      ->group("Reliability");
  cmd->add_option("--light-every", r->light_every,
                  "steps between light snapshots (the articles' progressive scheme)")
      ->group("Reliability");
  cmd->add_option(
         "--light-write", r->light_write,
         "cost of one light snapshot (default: each device's state to host memory over its host link)")
      ->group("Reliability");
  cmd->add_option("--soft-fraction", r->soft_fraction,
                  "share of failures a light snapshot recovers from (0..1)")
      ->capture_default_str()
      ->group("Reliability");
  cmd->add_option("--trials", r->trials, "Monte-Carlo runs")->capture_default_str()->group("Reliability");
  cmd->add_option("--seed", r->seed, "Monte-Carlo seed")->capture_default_str()->group("Reliability");
  cmd->add_option("--tokens", r->tokens, "train this many tokens (e.g. 15T): time to train with failures");
  cmd->add_flag("--json", r->json, "print the result as JSON");
  return [opts, r]() -> int {
    apply_default_job(*opts);
    auto in = resolve_inputs(*opts);
    if (!in) return input_error(in.error().message());
    auto pred = predict(in->model, in->cluster, in->plan, in->plan_source);
    if (!pred) return input_error(pred.error().message());
    ReliabilityInputs ri = reliability_inputs(in->model, in->cluster, in->plan, pred->step_time_s);
    auto run = parse_quantity(r->run, Dimension::kSeconds);
    if (!run) return input_error("--run: " + run.error().message());
    auto restart = parse_quantity(r->restart, Dimension::kSeconds);
    if (!restart) return input_error("--restart: " + restart.error().message());
    // Every option in range before any work: the message names the option.
    if (!(*run > 0)) return input_error("--run: \"" + r->run + "\" must be > 0");
    if (!(*restart >= 0)) return input_error("--restart: \"" + r->restart + "\" must be >= 0");
    ri.run_s = *run;
    ri.restart_s = *restart;
    if (r->failure_rate) {
      if (!(*r->failure_rate > 0 && *r->failure_rate <= kMaxFailuresPerDeviceHour))
        return input_error(fmt::format("--failure-rate: {} is not within (0, {}] failures per device-hour",
                                       *r->failure_rate, kMaxFailuresPerDeviceHour));
      ri.failures_per_device_hour = *r->failure_rate;
    }
    if (r->checkpoint_every) {
      if (*r->checkpoint_every < 1) return input_error("--checkpoint-every: must be >= 1 step");
      ri.interval_s = static_cast<double>(*r->checkpoint_every) * pred->step_time_s;
      if (!std::isfinite(ri.interval_s)) return input_error("--checkpoint-every: too many steps");
    }
    if (r->light_every) {
      if (*r->light_every < 1) return input_error("--light-every: must be >= 1 step");
      ri.light_interval_s = static_cast<double>(*r->light_every) * pred->step_time_s;
      if (!std::isfinite(ri.light_interval_s)) return input_error("--light-every: too many steps");
      if (r->light_write) {
        auto lw = parse_quantity(*r->light_write, Dimension::kSeconds);
        if (!lw) return input_error("--light-write: " + lw.error().message());
        if (!(*lw >= 0)) return input_error("--light-write: \"" + *r->light_write + "\" must be >= 0");
        ri.light_write_s = *lw;
      } else {
        ri.light_write_s = in_memory_snapshot_s(in->cluster, in->plan, ri.checkpoint_bytes);
      }
    }
    if (!(r->soft_fraction >= 0 && r->soft_fraction <= 1))
      return input_error(fmt::format("--soft-fraction: {} is not within 0..1", r->soft_fraction));
    if (r->trials < 1 || r->trials > 100000)
      return input_error(fmt::format("--trials: {} is not within 1..100000", r->trials));
    ri.soft_fraction = r->soft_fraction;
    ri.trials = r->trials;
    ri.seed = r->seed;
    auto res = reliability(ri);
    if (!res) return input_error(res.error().message());
    std::optional<double> useful_s;
    if (r->tokens) {
      auto tok = parse_tokens(*r->tokens);
      if (!tok) return input_error(tok.error().message());
      const int seq = effective_seq_len(in->plan, in->model);
      useful_s = *tok / (static_cast<double>(in->plan.global_batch) * seq) * pred->step_time_s;
    }
    // Beyond the event budget the Monte-Carlo run is not made: the closed form of the same process.
    const std::string method = res->monte_carlo ? "monte-carlo" : "closed-form";
    const std::string closed_form_note = fmt::format(
        "closed form, no Monte-Carlo: {} trials would simulate about {:.3g} events, over the budget of "
        "{:.3g}; the long-run expectation of the same process, without a spread",
        ri.trials, res->events, ri.max_events);
    auto number_or_null = [](double v) {
      return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
    };
    if (r->json) {
      nlohmann::json j = {{"model", in->model.name},
                          {"cluster", in->cluster.name},
                          {"plan", plan_to_json(in->plan)},
                          {"devices", ri.devices},
                          {"step_time_s", pred->step_time_s},
                          {"failures_per_device_hour", ri.failures_per_device_hour},
                          {"mtbf_s", res->mtbf_s},
                          {"checkpoint_bytes", ri.checkpoint_bytes},
                          {"checkpoint_write_s", res->write_s},
                          {"restore_s", res->restore_s},
                          {"restart_s", ri.restart_s},
                          {"young_interval_s", res->young_interval_s},
                          {"daly_interval_s", res->daly_interval_s},
                          {"interval_s", res->interval_s},
                          {"interval_steps", res->interval_s / pred->step_time_s},
                          {"light_interval_s", ri.light_interval_s},
                          {"light_write_s", ri.light_write_s},
                          {"soft_fraction", ri.soft_fraction},
                          {"run_s", ri.run_s},
                          {"effective_time_model", res->efficiency_model},
                          {"effective_time_expected", res->efficiency_expected},
                          {"effective_time", res->efficiency},
                          {"effective_time_method", method},
                          {"monte_carlo_events", res->events},
                          {"monte_carlo_event_budget", ri.max_events},
                          {"effective_time_mc", number_or_null(res->efficiency_mc)},
                          {"effective_time_p5", number_or_null(res->efficiency_p5)},
                          {"effective_time_p95", number_or_null(res->efficiency_p95)},
                          {"failures_per_run", res->failures_mean},
                          {"lost_work_s", res->lost_work_s}};
      if (!res->monte_carlo) j["note"] = closed_form_note;
      if (useful_s) {
        j["time_to_train_s"] = number_or_null(*useful_s / res->efficiency);
        j["time_to_train_without_failures_s"] = *useful_s;
      }
      fmt::print("{}\n", j.dump(2));
      return 0;
    }
    fmt::print("{} on {} devices ({}), step {}\n", in->model.name, ri.devices, in->cluster.name,
               secs(pred->step_time_s));
    fmt::print("job MTBF {} ({} devices x {:.3g} failures per device-hour{})\n", secs(res->mtbf_s),
               ri.devices, ri.failures_per_device_hour,
               r->failure_rate ? "" : ": Llama 3, 419 in 54 days on 16,384 GPUs");
    fmt::print("checkpoint {}: write {} at {}, restore {}; restart {}{}\n",
               pretty_quantity(ri.checkpoint_bytes, Dimension::kBytes), secs(res->write_s),
               pretty_quantity(ri.storage_bandwidth, Dimension::kBandwidth), secs(res->restore_s),
               secs(ri.restart_s), r->restart == ReliabilityOptions{}.restart ? " (assumed)" : "");
    fmt::print("interval: Young {}, Daly {}; used {} ({:.0f} steps){}\n", secs(res->young_interval_s),
               secs(res->daly_interval_s), secs(res->interval_s), res->interval_s / pred->step_time_s,
               r->checkpoint_every ? "" : " (Daly's)");
    if (ri.light_interval_s > 0)
      fmt::print("light snapshots every {} ({:.0f} steps), {} each; {:.0f}% of failures resume from them\n",
                 secs(ri.light_interval_s), ri.light_interval_s / pred->step_time_s, secs(ri.light_write_s),
                 100 * ri.soft_fraction);
    if (res->monte_carlo)
      fmt::print(
          "effective training time over {}: {:.2f}% by Daly's model (full checkpoints only), {:.2f}% by "
          "Monte-Carlo ({} runs; 5-95%: {:.2f}-{:.2f}%), {:.0f} failures and {} of lost work per run\n",
          secs(ri.run_s), 100 * res->efficiency_model, 100 * res->efficiency_mc, ri.trials,
          100 * res->efficiency_p5, 100 * res->efficiency_p95, res->failures_mean, secs(res->lost_work_s));
    else
      fmt::print(
          "effective training time over {}: {:.2f}% by Daly's model (full checkpoints only), {:.2f}% "
          "expected "
          "({}), {:.3g} failures and {} of lost work per run\n",
          secs(ri.run_s), 100 * res->efficiency_model, 100 * res->efficiency, closed_form_note,
          res->failures_mean, secs(res->lost_work_s));
    if (useful_s) {
      if (res->efficiency > 0)
        fmt::print("time to train {}: {} without failures, {} with them\n", *r->tokens, secs(*useful_s),
                   secs(*useful_s / res->efficiency));
      else
        fmt::print("time to train {}: {} without failures, never with them (no work survives the failures)\n",
                   *r->tokens, secs(*useful_s));
    }
    return 0;
  };
}

}  // namespace foresight::app
