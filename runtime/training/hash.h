// The runtime's two small hashes: SplitMix64 (Steele et al. 2014), the mixer behind the
// layout-independent parameter values and the synthetic data, and FNV-1a 64 for checkpoint
// content and tensor names (not cryptographic: it catches corruption, not tampering).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace foresight::runtime {

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline std::uint64_t fnv1a(std::string_view bytes) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : bytes) h = (h ^ ch) * 1099511628211ull;
  return h;
}

}  // namespace foresight::runtime
