// The `foresight` subcommands. Each registers itself on the CLI11 app and returns the exit code
// of its run: 0 success, 1 a check failed (a validation gate, a comparison), 2 bad input or usage,
// 3 an internal error (a bug: main() reports it and asks for a report).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "sim/core/status.h"

namespace foresight::app {

using Command = std::function<int()>;

Command add_predict_command(CLI::App& app);
Command add_simulate_command(CLI::App& app);
Command add_search_command(CLI::App& app);
Command add_sweep_command(CLI::App& app);
Command add_validate_command(CLI::App& app);
Command add_presets_command(CLI::App& app);
Command add_run_command(CLI::App& app);
Command add_compare_command(CLI::App& app);
Command add_calibrate_command(CLI::App& app);
Command add_reliability_command(CLI::App& app);
Command add_capacity_command(CLI::App& app);

// Prints "error: message" to stderr and returns 2.
int input_error(const std::string& message);
// A message cut to a few thousand bytes (its start and end kept) for printing.
std::string clamp_message(const std::string& message);

}  // namespace foresight::app
namespace foresight {
struct Prediction;
struct CostOptions;
struct Job;
}  // namespace foresight
namespace foresight::app {
using ResolvedInputs = Job;
// The human-readable breakdown shared by predict and simulate, ending with what the step costs
// (and, with CostOptions::tokens, the whole run).
void print_prediction(const ResolvedInputs& in, const Prediction& p, const CostOptions& cost);

// --price, --pue and --tokens of predict and simulate (search has its own).
struct CostFlags {
  std::optional<double> price;
  double pue = 1.2;
  std::string tokens;
};
void add_cost_options(CLI::App& cmd, CostFlags& flags);
// The flags checked: --pue below 1 or an unreadable --tokens is an error naming the option.
Result<CostOptions> cost_options(const CostFlags& flags);
// The Prediction as JSON with its "economics" object and the model, cluster and plan.
nlohmann::json prediction_with_cost_json(const ResolvedInputs& in, const Prediction& p,
                                         const CostOptions& cost);

}  // namespace foresight::app
namespace foresight {
struct CompareReport;
struct ForeignCompareReport;
struct ForeignTrace;
struct Trace;
}  // namespace foresight
namespace foresight::app {
// The human-readable comparison shared by compare and run --predict.
void print_compare_report(const CompareReport& r);
// Measured traces named on a command line: files as given, a folder's *.json files by name.
std::vector<std::string> measured_paths(const std::vector<std::string>& args);
// PyTorch profiler traces (`paths`) read with the built-in kind table and `kinds_file`'s rules
// (empty: none), compared with `predicted` (compare and calibrate --from-trace).
Result<ForeignCompareReport> compare_with_foreign(const Trace& predicted,
                                                  const std::vector<std::string>& paths,
                                                  const std::string& kinds_file, int warmup);
// The measured traces alone, read the same way.
Result<std::vector<ForeignTrace>> load_measured(const std::vector<std::string>& paths,
                                                const std::string& kinds_file);

// Unwraps a Result into `lhs` or returns input_error with `context` in front.
#define FS_ASSIGN_OR_RETURN_CLI(lhs, expr, context)                                            \
  auto FS_CONCAT_(fs_cli_, __LINE__) = (expr);                                                 \
  if (!FS_CONCAT_(fs_cli_, __LINE__))                                                          \
    return input_error(FS_CONCAT_(fs_cli_, __LINE__).error().with_context(context).message()); \
  lhs = std::move(FS_CONCAT_(fs_cli_, __LINE__)).value()

// Returns input_error(status) from the enclosing command when `expr` (a Status) failed.
#define FS_RETURN_CLI_IF_ERROR(expr)                                          \
  do {                                                                        \
    if (const ::foresight::Status fs_cli_status_ = (expr); !fs_cli_status_)   \
      return ::foresight::app::input_error(fs_cli_status_.error().message()); \
  } while (0)

}  // namespace foresight::app
