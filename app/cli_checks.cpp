// Shared checks on command-line values.
#include "app/cli_checks.h"

#include <charconv>
#include <cmath>
#include <sstream>

#include "sim/core/status.h"

namespace foresight::app {

namespace {

std::string range_text(std::int64_t min, std::int64_t max) {
  return max == INT64_MAX ? ">= " + std::to_string(min)
                          : "in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
}

bool parse_double(const std::string& text, double& out) {
  // CLI11 reads numbers with strtod, which also takes "nan", "inf" and hex floats.
  if (text.empty()) return false;
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

}  // namespace

CLI::Validator int_in(IntRange range) {
  const std::string desc = "INT " + range_text(range.min, range.max);
  return CLI::Validator(
      [range](std::string& input) -> std::string {
        std::int64_t v = 0;
        const auto [end, ec] = std::from_chars(input.data(), input.data() + input.size(), v);
        if (ec != std::errc() || end != input.data() + input.size() || v < range.min || v > range.max)
          return quote_excerpt(input) + " is not an integer " + range_text(range.min, range.max);
        return {};
      },
      desc);
}

CLI::Validator number_in(double min, double max) {
  std::ostringstream desc;
  desc << "NUMBER in [" << min << ", " << max << "]";
  return CLI::Validator(
      [min, max, text = desc.str().substr(7)](std::string& input) -> std::string {
        double v = 0;
        if (!parse_double(input, v) || !std::isfinite(v) || v < min || v > max)
          return quote_excerpt(input) + " is not a number " + text;
        return {};
      },
      desc.str());
}

void require_finite_numbers(CLI::App& app) {
  const CLI::Validator finite(
      [](std::string& input) -> std::string {
        double v = 0;
        if (parse_double(input, v) && !std::isfinite(v))
          return quote_excerpt(input) + " is not a finite number";
        return {};  // anything else is CLI11's own type check to judge
      },
      "", "FINITE");
  for (CLI::Option* opt : app.get_options())
    if (opt->get_type_name().rfind("FLOAT", 0) == 0) opt->check(finite);
  for (CLI::App* sub : app.get_subcommands({})) require_finite_numbers(*sub);
}

}  // namespace foresight::app
