// Fuzzes parse_quantity for every Dimension; a parsed value must survive format_quantity exactly.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sim/core/units.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using foresight::Dimension;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (Dimension dim : {Dimension::kBytes, Dimension::kSeconds, Dimension::kFlop, Dimension::kBandwidth,
                        Dimension::kFlopRate, Dimension::kPower}) {
    auto v = foresight::parse_quantity(text, dim);
    if (!v) continue;
    auto back = foresight::parse_quantity(foresight::format_quantity(v.value(), dim), dim);
    if (!back || back.value() != v.value()) __builtin_trap();
  }
  return 0;
}
