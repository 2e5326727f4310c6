// Parsing and formatting of quantities with their unit inside the string.
//
//   Result<double> bw = parse_quantity("400Gbps", Dimension::kBandwidth);   // 5e10 bytes/s
//   std::string t = format_quantity(2e-6, Dimension::kSeconds);             // "2us"
//
// Every quantity is stored in SI base units (bytes, seconds, FLOP) as a double. Files always carry
// the unit in the value ("80GiB", "2us", "989TFLOPS"); a bare number for a quantity is an error.
#pragma once

#include <string>
#include <string_view>

#include "sim/core/status.h"

namespace foresight {

// What a string is expected to measure; picks the table of accepted units.
enum class Dimension { kBytes, kSeconds, kFlop, kBandwidth, kFlopRate, kPower };

std::string_view dimension_name(Dimension d);
// Example units for error messages, e.g. "B, KiB, MiB, GiB, GB, TB".
std::string_view dimension_examples(Dimension d);

// Parses "<number><unit>" (space allowed) into SI base units. Bandwidth accepts bits ("400Gbps")
// and bytes ("50GB/s", "50GBps"); FLOP rates "989TFLOPS" or "989TFLOP/s".
Result<double> parse_quantity(std::string_view text, Dimension dim);

// An error unless `v` (parsed from `text`) is 0 or within the physical range of its dimension: a
// 1 kbit/s link to a 1000 PB/s fabric, a femtosecond to 30,000 years, a byte to 1000 EB, ... Spec
// readers hold every quantity to it, so that a typo such as "1e-300Gbps" is refused instead of
// turning each later figure into 300-digit nonsense.
Status check_physical_range(double v, Dimension dim, std::string_view text);

// The shortest text in a natural unit that parses back to exactly `value`.
std::string format_quantity(double value, Dimension dim);

// Human-readable text with 3-4 significant digits, for tables ("1.23 GiB", "45.6 ms").
std::string pretty_quantity(double value, Dimension dim);

}  // namespace foresight
