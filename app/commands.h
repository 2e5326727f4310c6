// The `foresight` subcommands. Each registers itself on the CLI11 app and returns the exit code
// of its run: 0 success, 1 the work ran but failed (e.g. validation targets missed), 2 bad input.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace foresight::app {

using Command = std::function<int()>;

Command add_predict_command(CLI::App& app);
Command add_validate_command(CLI::App& app);
Command add_presets_command(CLI::App& app);

// Prints "error: message" to stderr and returns 2.
int input_error(const std::string& message);

}  // namespace foresight::app
