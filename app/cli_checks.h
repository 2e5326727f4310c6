// Checks on command-line values, shared by every subcommand, so that an option is held to the
// same rule as the file field it stands for and a bad value is an error naming the option (exit 2)
// rather than a silent default, a NaN in the output or a crash later.
//
//   cmd->add_option("--tp", o.tp)->check(int_in(plan_range::kDegree));
//   cmd->add_option("--pue", f.pue)->check(number_in(1.0, 10.0));
//   require_finite_numbers(app);   // once, after every subcommand registered its options
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "sim/spec/plan.h"

namespace foresight::app {

// An integer in [range.min, range.max].
CLI::Validator int_in(IntRange range);
inline CLI::Validator int_in(std::int64_t min, std::int64_t max) { return int_in(IntRange{min, max}); }
// A finite number in [min, max].
CLI::Validator number_in(double min, double max);
// Adds a finite-number check to every floating-point option of `app` and its subcommands: "nan",
// "inf" and "1e999" are refused by name wherever a number is read.
void require_finite_numbers(CLI::App& app);

}  // namespace foresight::app
