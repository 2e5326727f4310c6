// Unit tables and the parser behind parse_quantity / format_quantity.
#include "sim/core/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <span>

namespace foresight {
namespace {

struct Unit {
  std::string_view symbol;
  double factor;  // SI base units per one of this unit
};

// Decimal prefixes are powers of 1000, binary ones powers of 1024 (IEC 80000-13).
constexpr Unit kByteUnits[] = {
    {"B", 1.0},
    {"KB", 1e3},
    {"kB", 1e3},
    {"MB", 1e6},
    {"GB", 1e9},
    {"TB", 1e12},
    {"PB", 1e15},
    {"KiB", 1024.0},
    {"MiB", 1048576.0},
    {"GiB", 1073741824.0},
    {"TiB", 1099511627776.0},
    {"PiB", 1125899906842624.0},
};
constexpr Unit kSecondUnits[] = {
    {"s", 1.0},   {"ms", 1e-3},  {"us", 1e-6},  {"\xC2\xB5s", 1e-6},
    {"ns", 1e-9}, {"min", 60.0}, {"h", 3600.0}, {"d", 86400.0},
};
constexpr Unit kFlopUnits[] = {
    {"FLOP", 1.0},   {"KFLOP", 1e3},  {"MFLOP", 1e6},  {"GFLOP", 1e9},
    {"TFLOP", 1e12}, {"PFLOP", 1e15}, {"EFLOP", 1e18}, {"ZFLOP", 1e21},
};
// Bits per second ("bps") divide by 8; "Bps" and "B/s" are bytes per second (SimGrid style).
constexpr Unit kBandwidthUnits[] = {
    {"bps", 1.0 / 8},
    {"Kbps", 1e3 / 8},
    {"Mbps", 1e6 / 8},
    {"Gbps", 1e9 / 8},
    {"Tbps", 1e12 / 8},
    {"Bps", 1.0},
    {"KBps", 1e3},
    {"MBps", 1e6},
    {"GBps", 1e9},
    {"TBps", 1e12},
    {"B/s", 1.0},
    {"KB/s", 1e3},
    {"MB/s", 1e6},
    {"GB/s", 1e9},
    {"TB/s", 1e12},
    {"KiB/s", 1024.0},
    {"MiB/s", 1048576.0},
    {"GiB/s", 1073741824.0},
    {"TiB/s", 1099511627776.0},
};
constexpr Unit kFlopRateUnits[] = {
    {"FLOPS", 1.0},   {"KFLOPS", 1e3},   {"MFLOPS", 1e6},   {"GFLOPS", 1e9},
    {"TFLOPS", 1e12}, {"PFLOPS", 1e15},  {"EFLOPS", 1e18},  {"FLOP/s", 1.0},
    {"GFLOP/s", 1e9}, {"TFLOP/s", 1e12}, {"PFLOP/s", 1e15},
};
constexpr Unit kPowerUnits[] = {{"W", 1.0}, {"kW", 1e3}, {"MW", 1e6}};

// The range a non-zero quantity of each dimension may take: wide enough for any machine or run
// (a 1 kbit/s link to a 1 EB/s fabric, a femtosecond to 30,000 years), narrow enough that a typo
// such as "1e-300Gbps" is refused instead of turning every later figure into 300-digit nonsense.
struct Range {
  double min, max;
  const char* text;
};
Range physical_range(Dimension d) {
  switch (d) {
    case Dimension::kBytes:
      return {1.0, 1e21, "1B to 1000EB"};
    case Dimension::kSeconds:
      return {1e-15, 1e12, "1e-15s to 1e12s"};
    case Dimension::kFlop:
      return {1.0, 1e30, "1FLOP to 1e30FLOP"};
    case Dimension::kBandwidth:
      return {125.0, 1e18, "1Kbps to 1000PB/s"};
    case Dimension::kFlopRate:
      return {1e3, 1e21, "1KFLOPS to 1e21FLOPS"};
    case Dimension::kPower:
      return {1e-3, 1e10, "1mW to 10GW"};
  }
  return {0, 0, ""};
}

std::span<const Unit> units_for(Dimension d) {
  switch (d) {
    case Dimension::kBytes:
      return kByteUnits;
    case Dimension::kSeconds:
      return kSecondUnits;
    case Dimension::kFlop:
      return kFlopUnits;
    case Dimension::kBandwidth:
      return kBandwidthUnits;
    case Dimension::kFlopRate:
      return kFlopRateUnits;
    case Dimension::kPower:
      return kPowerUnits;
  }
  return {};
}

// Units tried when formatting, largest first, so the shortest exact text wins.
std::span<const Unit> format_units_for(Dimension d) {
  static constexpr Unit kBytes[] = {{"PiB", 1125899906842624.0},
                                    {"TiB", 1099511627776.0},
                                    {"GiB", 1073741824.0},
                                    {"MiB", 1048576.0},
                                    {"KiB", 1024.0},
                                    {"PB", 1e15},
                                    {"TB", 1e12},
                                    {"GB", 1e9},
                                    {"MB", 1e6},
                                    {"KB", 1e3},
                                    {"B", 1.0}};
  static constexpr Unit kSec[] = {{"h", 3600.0}, {"min", 60.0}, {"s", 1.0},
                                  {"ms", 1e-3},  {"us", 1e-6},  {"ns", 1e-9}};
  static constexpr Unit kBw[] = {{"TB/s", 1e12}, {"GB/s", 1e9},     {"Tbps", 1e12 / 8}, {"Gbps", 1e9 / 8},
                                 {"MB/s", 1e6},  {"Mbps", 1e6 / 8}, {"KB/s", 1e3},      {"B/s", 1.0}};
  static constexpr Unit kRate[] = {
      {"PFLOPS", 1e15}, {"TFLOPS", 1e12}, {"GFLOPS", 1e9}, {"MFLOPS", 1e6}, {"FLOPS", 1.0}};
  static constexpr Unit kFlopAmount[] = {{"EFLOP", 1e18}, {"PFLOP", 1e15}, {"TFLOP", 1e12},
                                         {"GFLOP", 1e9},  {"MFLOP", 1e6},  {"FLOP", 1.0}};
  static constexpr Unit kPow[] = {{"kW", 1e3}, {"W", 1.0}};
  switch (d) {
    case Dimension::kBytes:
      return kBytes;
    case Dimension::kSeconds:
      return kSec;
    case Dimension::kFlop:
      return kFlopAmount;
    case Dimension::kBandwidth:
      return kBw;
    case Dimension::kFlopRate:
      return kRate;
    case Dimension::kPower:
      return kPow;
  }
  return {};
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

std::string_view dimension_name(Dimension d) {
  switch (d) {
    case Dimension::kBytes:
      return "a size";
    case Dimension::kSeconds:
      return "a duration";
    case Dimension::kFlop:
      return "an amount of FLOP";
    case Dimension::kBandwidth:
      return "a bandwidth";
    case Dimension::kFlopRate:
      return "a FLOP rate";
    case Dimension::kPower:
      return "a power";
  }
  return "a quantity";
}

std::string_view dimension_examples(Dimension d) {
  switch (d) {
    case Dimension::kBytes:
      return "\"80GiB\", \"512MB\", \"4KiB\"";
    case Dimension::kSeconds:
      return "\"2us\", \"1.5ms\", \"30s\", \"2h\"";
    case Dimension::kFlop:
      return "\"1.2PFLOP\", \"300GFLOP\"";
    case Dimension::kBandwidth:
      return "\"400Gbps\", \"50GB/s\", \"900GBps\"";
    case Dimension::kFlopRate:
      return "\"989TFLOPS\", \"312TFLOP/s\"";
    case Dimension::kPower:
      return "\"700W\", \"10.2kW\"";
  }
  return "";
}

Result<double> parse_quantity(std::string_view text, Dimension dim) {
  const std::string_view s = trim(text);
  const std::string quoted = quote_excerpt(text);
  if (s.empty()) {
    return Error("empty value; expected " + std::string(dimension_name(dim)) + " such as " +
                 std::string(dimension_examples(dim)));
  }
  double number = 0.0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), number);
  if (ec != std::errc() || end == s.data()) {
    return Error(quoted + " does not start with a number; expected " + std::string(dimension_name(dim)) +
                 " such as " + std::string(dimension_examples(dim)));
  }
  if (!std::isfinite(number)) return Error(quoted + " is not a finite number");
  if (number < 0) return Error(quoted + " is negative");
  const std::string_view unit = trim(std::string_view(end, s.data() + s.size() - end));
  if (unit.empty()) {
    return Error(quoted + " has no unit; expected " + std::string(dimension_name(dim)) + " such as " +
                 std::string(dimension_examples(dim)));
  }
  for (const Unit& u : units_for(dim)) {
    if (u.symbol == unit) {
      const double v = number * u.factor;
      if (!std::isfinite(v)) return Error(quoted + " overflows");
      return v;
    }
  }
  return Error(quoted + ": unknown unit '" + std::string(unit.substr(0, 16)) +
               (unit.size() > 16 ? "...'" : "'") + " for " + std::string(dimension_name(dim)) +
               "; use e.g. " + std::string(dimension_examples(dim)));
}

Status check_physical_range(double v, Dimension dim, std::string_view text) {
  const Range r = physical_range(dim);
  if (v == 0 || (v >= r.min && v <= r.max)) return Status::Ok();
  return Error(quote_excerpt(text) + " is outside the range of " + std::string(dimension_name(dim)) + " (" +
               r.text + ", or 0)");
}

std::string format_quantity(double value, Dimension dim) {
  std::string best;
  for (const Unit& u : format_units_for(dim)) {
    const double scaled = value / u.factor;
    if (value != 0 && std::fabs(scaled) < 1.0) continue;
    for (int precision = 1; precision <= 17; ++precision) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.*g", precision, scaled);
      std::string candidate = std::string(buf) + std::string(u.symbol);
      auto back = parse_quantity(candidate, dim);
      // Shortest exact text wins; on a tie prefer the larger unit (tried first).
      if (back && back.value() == value && (best.empty() || candidate.size() < best.size())) best = candidate;
    }
  }
  if (best.empty()) {  // Fall back to the SI base unit (factor 1) with full precision: exact.
    char buf[64];
    Unit base = format_units_for(dim).back();  // "ns" for durations: not exact, so look for "s"
    for (const Unit& u : format_units_for(dim))
      if (u.factor == 1.0) base = u;
    std::snprintf(buf, sizeof buf, "%.17g", value / base.factor);
    best = std::string(buf) + std::string(base.symbol);
  }
  return best;
}

std::string pretty_quantity(double value, Dimension dim) {
  const auto units = format_units_for(dim);
  const Unit* chosen = &units.back();
  for (const Unit& u : units) {
    // Binary units for sizes; skip decimal duplicates when pretty-printing bytes.
    if (dim == Dimension::kBytes && u.symbol.find('i') == std::string_view::npos && u.factor > 1) continue;
    if (dim == Dimension::kBandwidth && u.symbol.find("bps") != std::string_view::npos) continue;
    if (std::fabs(value) >= u.factor) {
      chosen = &u;
      break;
    }
  }
  char buf[64];
  const double scaled = value / chosen->factor;
  std::snprintf(buf, sizeof buf,
                scaled >= 100  ? "%.0f %.*s"
                : scaled >= 10 ? "%.1f %.*s"
                               : "%.2f %.*s",
                scaled, static_cast<int>(chosen->symbol.size()), chosen->symbol.data());
  return buf;
}

}  // namespace foresight
