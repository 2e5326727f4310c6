// foresight: predict, simulate, search, sweep, validate, run, compare and calibrate LLM training.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <exception>
#include <new>
#include <vector>

#include "app/cli_checks.h"
#include "app/commands.h"
#include "foresight/config.h"

int main(int argc, char** argv) {
  CLI::App app{"Foresight: predict, run and compare large-model training layouts"};
  app.set_version_flag("--version", FORESIGHT_VERSION);
  app.require_subcommand(0, 1);
  app.footer(
      "Exit codes: 0 success; 1 a check failed (a validate gate, a comparison); 2 bad input or usage (the "
      "message "
      "names the file or option, the field and the reason); 3 an internal error (a bug: please report it).");
  std::vector<std::pair<CLI::App*, foresight::app::Command>> commands;
  auto add = [&](const char* name, foresight::app::Command cmd) {
    commands.emplace_back(app.get_subcommand(name), std::move(cmd));
  };
  add("predict", foresight::app::add_predict_command(app));
  add("simulate", foresight::app::add_simulate_command(app));
  add("search", foresight::app::add_search_command(app));
  add("sweep", foresight::app::add_sweep_command(app));
  add("validate", foresight::app::add_validate_command(app));
  add("run", foresight::app::add_run_command(app));
  add("compare", foresight::app::add_compare_command(app));
  add("calibrate", foresight::app::add_calibrate_command(app));
  add("reliability", foresight::app::add_reliability_command(app));
  add("capacity", foresight::app::add_capacity_command(app));
  add("presets", foresight::app::add_presets_command(app));
  foresight::app::require_finite_numbers(app);
  // A file-size limit (ulimit -f) makes a write fail with EFBIG, reported as an error like a full
  // disk, instead of killing the process half-way through an output.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error exits 2, as bad input does.
    if (e.get_exit_code() == 0) return app.exit(e);
    fmt::print(stderr, "error: {}\nRun with --help for more information.\n",
               foresight::app::clamp_message(e.what()));
    return 2;
  }
  try {
    for (auto& [sub, run] : commands)
      if (sub->parsed()) return run();
    // No subcommand: the quick-start default job.
    for (auto& [sub, run] : commands)
      if (sub->get_name() == "predict") {
        fmt::print(
            "No subcommand given: running `foresight predict` on its built-in default "
            "(see `foresight --help`).\n\n");
        return run();
      }
  } catch (const std::bad_alloc&) {
    fmt::print(stderr,
               "internal error: out of memory (an input passed every limit yet needs more memory than this "
               "machine has; please report the command line)\n");
    return 3;
  } catch (const std::exception& e) {
    fmt::print(stderr, "internal error: {} (this is a bug; please report it with the command line)\n",
               e.what());
    return 3;
  }
  return 0;
}
