// Physical quantities as value types, and parsing of quantities with their unit inside the string.
//
//   Result<BytesPerSecond> bw = parse_bandwidth("400Gbps");   // 5e10 bytes/s
//   Seconds t = Bytes(1e9) / bw.value();                       // 0.02 s
//
// Every quantity is stored in SI base units (bytes, seconds, FLOP) as a double. Files always carry
// the unit in the value ("80GiB", "2us", "989TFLOPS"); a bare number for a quantity is an error.
#pragma once

#include <compare>
#include <string>
#include <string_view>

#include "sim/core/status.h"

namespace foresight {

template <typename Tag>
class Quantity {
 public:
  constexpr Quantity() = default;
  constexpr explicit Quantity(double v) : v_(v) {}
  constexpr double value() const { return v_; }

  constexpr Quantity operator+(Quantity o) const { return Quantity(v_ + o.v_); }
  constexpr Quantity operator-(Quantity o) const { return Quantity(v_ - o.v_); }
  constexpr Quantity operator*(double k) const { return Quantity(v_ * k); }
  constexpr Quantity operator/(double k) const { return Quantity(v_ / k); }
  constexpr double operator/(Quantity o) const { return v_ / o.v_; }
  constexpr Quantity& operator+=(Quantity o) {
    v_ += o.v_;
    return *this;
  }
  constexpr Quantity& operator-=(Quantity o) {
    v_ -= o.v_;
    return *this;
  }
  constexpr auto operator<=>(const Quantity&) const = default;

 private:
  double v_ = 0.0;
};

template <typename Tag>
constexpr Quantity<Tag> operator*(double k, Quantity<Tag> q) {
  return q * k;
}

struct BytesTag {};
struct SecondsTag {};
struct FlopTag {};
struct BytesPerSecondTag {};
struct FlopsPerSecondTag {};
struct WattsTag {};

using Bytes = Quantity<BytesTag>;
using Seconds = Quantity<SecondsTag>;
using Flop = Quantity<FlopTag>;  // an amount of floating-point work
using BytesPerSecond = Quantity<BytesPerSecondTag>;
using FlopsPerSecond = Quantity<FlopsPerSecondTag>;
using Watts = Quantity<WattsTag>;

constexpr Seconds operator/(Bytes b, BytesPerSecond r) { return Seconds(b.value() / r.value()); }
constexpr Seconds operator/(Flop f, FlopsPerSecond r) { return Seconds(f.value() / r.value()); }

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

inline Result<Bytes> parse_bytes(std::string_view t) {
  FS_ASSIGN_OR_RETURN(double v, parse_quantity(t, Dimension::kBytes));
  return Bytes(v);
}
inline Result<Seconds> parse_seconds(std::string_view t) {
  FS_ASSIGN_OR_RETURN(double v, parse_quantity(t, Dimension::kSeconds));
  return Seconds(v);
}
inline Result<BytesPerSecond> parse_bandwidth(std::string_view t) {
  FS_ASSIGN_OR_RETURN(double v, parse_quantity(t, Dimension::kBandwidth));
  return BytesPerSecond(v);
}
inline Result<FlopsPerSecond> parse_flop_rate(std::string_view t) {
  FS_ASSIGN_OR_RETURN(double v, parse_quantity(t, Dimension::kFlopRate));
  return FlopsPerSecond(v);
}

}  // namespace foresight
